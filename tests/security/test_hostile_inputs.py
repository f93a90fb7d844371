"""The hostile-input corpus (``tests/support/hostile.py``), run command by command in a
subprocess, checked by :func:`tests.support.measure.check_run`.

For every run: the exit status; the issue code and location in the output; no traceback;
CPU time (user + system) at most ``CPU_RATIO`` times that of the same command on the
valid base problem, measured in the same process (again in the same test when the first
comparison fails), so that a slower, busier or colder machine slows both alike (a run
with no benign twin, an evaluation or a fit, has its own ceiling of 30 s or more:
``Run.cpu_s``); a run still going after ``HANG_SECONDS`` (or ``Run.wall_s``) of wall
time fails as hung; 500 MB peak memory (or ``Run.peak_mb``)
(``ru_maxrss`` of the command, measured by ``tests/support/measure_child.py``); and no
file under the case's root changes except the paths the case allows.

The 500 MB were set with the CPU wheel of torch (Python 3.11), whose import costs about
220 MB.  Where torch is another build (on Python 3.12 only PyPI's CUDA build exists; its
import alone takes about 625 MB, GPU or not), what its import costs beyond the CPU
wheel's, measured in the same run, is added to the budget (``peak_budget_mb``): the
budget still bounds what an input makes us allocate, not which torch build is installed.
``benchmarks/bench_hostile.py`` prints the tight figures: each run's wall and CPU time
and memory as ratios to the benign run.
"""

from __future__ import annotations

import pytest

from tests.support.hostile import CASES
from tests.support.measure import check_run


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.slow
def test_hostile_input(name, tmp_path):
    bullet, build = CASES[name]
    root = tmp_path / "case"
    root.mkdir()
    runs = build(root)
    assert runs, bullet
    for run in runs:
        check_run(run, root)


@pytest.mark.parametrize("name", sorted(CASES))
def test_info_shows_no_traceback_either(name, tmp_path):
    """``info`` on every problem of the corpus (in-process: the CLI turns nothing into a
    traceback, and ``info`` reports the same verdict as ``validate``)."""
    from click.testing import CliRunner

    from petab_sciml.cli import main

    root = tmp_path / "case"
    root.mkdir()
    runs = [r for r in CASES[name][1](root) if r.argv[3:4] == ["validate"]]
    for run in runs:
        result = CliRunner().invoke(main, ["info", run.argv[4]])
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            result.output
        verdict = "invalid" if run.exit else "valid"
        assert f": {verdict} (" in result.output, result.output


def test_corpus_covers_every_issue_bullet():
    """One case per bullet of issues 14 and 16 that concerns inputs (the numerical
    faults are tested with the simulation)."""
    assert len(CASES) >= 50
    bullets = " | ".join(b for b, _ in CASES.values())
    for words in ("--params arrays.hdf5", "a.yaml a.yaml", ".onnx", "overwritten",
                  "predictable name", "device path", "problem.yaml", "network YAML",
                  "10^6 x 10^6", "20000 x 20000", "(3, 1e6, 1e6)", "(3, 20000, 20000)",
                  "200k groups", "unary minus", "noise formulas", "hybridization formulas",
                  "parentheses", "9^9^9", "5000-digit", "1e999999", "negative layer",
                  "1e30", "NaN time", "external raw storage", "external link (absolute)",
                  "../../x.h5", "virtual dataset", "/etc/passwd", "*.dat", "/dev/zero",
                  "Range", "ConstantOfShape", "3 GB member", "duplicate column",
                  "longer than the header", "empty observableFormula", "duplicate SBML",
                  "leave the problem folder", "doesn't exist", "is a folder",
                  "truncated .tgz", "ONNX external data"):
        assert words in bullets, words

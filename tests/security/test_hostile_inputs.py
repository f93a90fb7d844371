"""The hostile-input corpus of issues 14 and 16 (``tests/support/hostile.py``), run command by
command in a subprocess.

For every run: the exit status; the issue code and location in the output; no traceback;
at most 5 s of CPU time (user + system, so that other jobs on a CI machine do not make
it flaky; a run still going after 60 s wall time fails as hung) and 500 MB peak memory
(``ru_maxrss`` of the command, measured by ``tests/support/measure_child.py``); and no file
under the case's root changes except the paths the case allows.

The 500 MB were set with the CPU wheel of torch (Python 3.11), whose import costs about
220 MB.  Where torch is another build (on Python 3.12 only PyPI's CUDA build exists; its
import alone takes about 625 MB, GPU or not), what its import costs beyond the CPU
wheel's, measured in the same run, is added to the budget (:func:`peak_budget_mb`): the
budget still bounds what an input makes us allocate, not which torch build is installed.
``benchmarks/bench_hostile.py`` prints wall time and memory of the same runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.hostile import CASES, Run

REPO = Path(__file__).resolve().parents[2]
CPU_SECONDS = 5.0
PEAK_MB = 500.0
TORCH_CPU_IMPORT_MB = 250.0
"""Peak memory of ``import torch`` with the CPU wheel the budget was set with (measured:
219 MB, torch 2.13.0+cpu on Python 3.11), with some headroom."""
HANG_SECONDS = 60.0


@dataclass
class Measured:
    code: int
    output: str
    wall: float
    cpu: float
    peak_mb: float


def run_measured(argv: list[str], cwd: Path, timeout: float = HANG_SECONDS) -> Measured:
    """Run ``argv``; exit status, output, wall and CPU seconds and peak memory of the
    command (its own ``wait4`` resource usage, through ``tests/support/measure_child.py``)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PETAB_SCIML_CACHE": "0",
           "COLUMNS": "200"}
    env.pop("PETAB_SCIML_DEBUG", None)
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        launcher = [sys.executable, str(REPO / "tests" / "support" / "measure_child.py"),
                    str(report), "--", *argv]
        with open(Path(scratch) / "out", "w+b") as out:
            start = time.monotonic()
            proc = subprocess.Popen(launcher, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                pytest.fail(f"hung: still running after {timeout:.0f} s: {argv}")
            wall = time.monotonic() - start
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        result = json.loads(report.read_text())
    return Measured(result["code"], text, wall, result["cpu"], result["peak_mb"])


@functools.cache
def peak_budget_mb() -> float:
    """:data:`PEAK_MB` plus what importing this interpreter's torch costs beyond the CPU
    wheel's (zero there, and where torch is missing)."""
    with tempfile.TemporaryDirectory() as scratch:
        torch_mb = run_measured([sys.executable, "-c", "import torch"], Path(scratch)).peak_mb
    return PEAK_MB + max(0.0, torch_mb - TORCH_CPU_IMPORT_MB)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` (links not followed, FIFOs not opened): its type and,
    for regular files, size and content hash; for links, the target."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            else:
                out[rel] = (stat.S_IFMT(st.st_mode),)
    return out


def changed(before: dict, after: dict, allowed: list[str]) -> list[str]:
    def ok(rel: str) -> bool:
        return any(rel == a or rel.startswith(a.rstrip("/") + "/") for a in allowed)

    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) != after.get(k) and not ok(k))


def check_run(run: Run, root: Path) -> Measured:
    before = snapshot(root)
    result = run_measured(run.argv, root)
    shown = f"{' '.join(run.argv[2:])}\n{result.output[-3000:]}"
    assert result.code == run.exit, f"exit {result.code}, expected {run.exit}: {shown}"
    assert "Traceback" not in result.output, shown
    for text in run.expect:
        assert text in result.output, f"{text!r} not in the output: {shown}"
    assert result.cpu < CPU_SECONDS, f"{result.cpu:.1f} s of CPU time: {shown}"
    budget = peak_budget_mb()
    assert result.peak_mb < budget, \
        f"{result.peak_mb:.0f} MB peak memory (budget {budget:.0f} MB): {shown}"
    assert changed(before, snapshot(root), run.changes) == [], shown
    if run.check is not None:
        run.check(root)
    return result


@pytest.mark.parametrize("name", sorted(CASES))
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

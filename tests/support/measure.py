"""Run a command in a fresh process and measure it: exit status, output, wall and CPU
seconds, peak memory (its own ``wait4`` resource usage, through ``measure_child.py``).

Shared by ``tests/security/`` and ``benchmarks/bench_hostile.py``.  Time budgets are
ratios to a benign run of the same command (:func:`benign_argv`), measured on the same
machine, so that interpreter start, imports and a slower or busier machine cancel out.
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
from dataclasses import dataclass
from pathlib import Path

from tests.support.hostile import CLI, LOAD, Run, make_problem
from tests.support.suite import REPO

HANG_SECONDS = 120.0
"""Wall seconds after which a command counts as hung and is killed."""


class Hung(AssertionError):
    """A measured command still ran after its timeout; it was killed."""


@dataclass
class Measured:
    code: int
    output: str
    wall: float
    """Seconds of wall time."""
    cpu: float
    """Seconds of CPU time, user + system, of the command and its children."""
    peak_mb: float
    """Peak resident memory of the command in MB (``ru_maxrss``)."""


def run_measured(argv: list[str], cwd: Path, timeout: float = HANG_SECONDS) -> Measured:
    """Run ``argv`` in ``cwd`` with the repository on ``PYTHONPATH`` and the toolkit's
    export cache off; raise :class:`Hung` if it runs longer than ``timeout`` seconds."""
    import time

    env = {**os.environ, "PYTHONPATH": str(REPO), "PETAB_SCIML_CACHE": "0",
           "COLUMNS": "200"}
    env.pop("PETAB_SCIML_DEBUG", None)
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        launcher = [sys.executable, str(Path(__file__).with_name("measure_child.py")),
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
                raise Hung(f"hung: still running after {timeout:.0f} s: {argv}") from None
            wall = time.monotonic() - start
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        result = json.loads(report.read_text())
    return Measured(result["code"], text, wall, result["cpu"], result["peak_mb"])


def command_kind(argv: list[str]) -> str:
    """``"load"`` (``load_problem`` in a script), else the CLI subcommand (``"validate"``,
    ``"info"``, ``"convert"``)."""
    if argv[:2] == LOAD:
        return "load"
    return argv[len(CLI)]


def benign_argv(kind: str, problem: Path, scratch: Path) -> list[str]:
    """The command of ``kind`` on the valid base problem ``problem``
    (:func:`tests.support.hostile.make_problem`); ``convert`` writes into ``scratch``."""
    if kind == "load":
        return [*LOAD, str(problem)]
    if kind == "convert":
        return [*CLI, "convert", str(problem.parent / "net1.yaml"),
                str(scratch / "benign.onnx"), "--force"]
    return [*CLI, kind, str(problem)]


CPU_RATIO = 8.0
"""A hostile run may take at most this many times the CPU seconds of the same command on
the valid base problem: a ceiling that catches a blow-up, not a slow machine."""
PEAK_MB = 500.0
TORCH_CPU_IMPORT_MB = 250.0
"""Peak memory of ``import torch`` with the CPU wheel the budget was set with, with some
headroom."""


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


_BENIGN: dict[str, Measured] = {}


def benign_run(kind: str, fresh: bool = False) -> Measured:
    """The command ``kind`` on the valid base problem, measured once per process, or
    anew with ``fresh``."""
    if fresh or kind not in _BENIGN:
        with tempfile.TemporaryDirectory() as scratch:
            problem = make_problem(Path(scratch))
            _BENIGN[kind] = result = run_measured(
                benign_argv(kind, problem, Path(scratch)), Path(scratch))
        assert result.code == 0, f"benign {kind} failed: {result.output[-3000:]}"
    return _BENIGN[kind]


def check_cpu(argv: list[str], result: Measured, shown: str) -> None:
    """The run's CPU time is within :data:`CPU_RATIO` times the benign run's; when it is
    not, the benign run is measured again now, under the machine's present load."""
    kind = command_kind(argv)
    if result.cpu <= CPU_RATIO * benign_run(kind).cpu:
        return
    benign = benign_run(kind, fresh=True)
    assert result.cpu <= CPU_RATIO * benign.cpu, \
        f"{result.cpu:.2f} s of CPU time, {result.cpu / benign.cpu:.1f} times the " \
        f"{benign.cpu:.2f} s of {kind} on the valid problem: {shown}"


def check_run(run: Run, root: Path) -> Measured:
    before = snapshot(root)
    result = run_measured(run.argv, root, timeout=run.wall_s or HANG_SECONDS)
    shown = f"{' '.join(run.argv[2:])}\n{result.output[-3000:]}"
    assert result.code == run.exit, f"exit {result.code}, expected {run.exit}: {shown}"
    assert "Traceback" not in result.output, shown
    for text in run.expect:
        assert text in result.output, f"{text!r} not in the output: {shown}"
    if run.cpu_s is None:
        check_cpu(run.argv, result, shown)
    else:
        assert run.cpu_s >= 30, "an absolute CPU ceiling is a blow-up guard: 30 s or more"
        assert result.cpu < run.cpu_s, f"{result.cpu:.1f} s of CPU time: {shown}"
    budget = peak_budget_mb() - PEAK_MB + run.peak_mb
    assert result.peak_mb < budget, \
        f"{result.peak_mb:.0f} MB peak memory (budget {budget:.0f} MB): {shown}"
    assert changed(before, snapshot(root), run.changes) == [], shown
    if run.check is not None:
        run.check(root)
    return result

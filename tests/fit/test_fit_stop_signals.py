"""SIGTERM and SIGHUP during ``petab-sciml fit`` stop it as Ctrl-C does: a checkpoint
written at the signal, one line, exit 128 + signal number; ``--resume`` then finishes and
gives the result of an uninterrupted run.

The signal goes to the fit's whole process group, as ``timeout -s TERM`` sends it (the
embedded LocalCluster's workers receive it too), once the first periodic checkpoint exists
(so a slow machine only makes the test slower).  No worker process may outlive the fit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")
pytest.importorskip("distributed")

from petab_sciml.fit import FitResult  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"
CLI = [sys.executable, "-m", "petab_sciml.cli", "fit", str(EXAMPLE), "--starts", "2",
       "--seed", "5", "--lr", "0.02", "--no-plots", "--json"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The command's environment: a JAX compilation cache shared by every run here."""
    cache = tmp_path_factory.mktemp("jax_cache")
    return {**os.environ, "PYTHONPATH": str(REPO), "JAX_COMPILATION_CACHE_DIR": str(cache),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def _children(pid: int) -> set[int]:
    """Process ids of the descendants of ``pid`` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _stopped_by(signum: int, where: list[str], out: Path, env: dict) -> int:
    """Run the fit until its first checkpoint, send ``signum`` to its process group and
    check how it ends; returns the step its checkpoint holds."""
    cmd = [*CLI, *where, "--out", str(out), "--steps", "100000", "--checkpoint-every", "3"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True, preexec_fn=_stop_signals_default)
    try:
        first = out / "checkpoints" / "start_0000.npz"
        deadline = time.monotonic() + 300
        while not first.is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if not first.is_file():
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no checkpoint within 300 s: {proc.communicate()[1][-2000:]}")
        workers = _children(proc.pid)
        sent = time.time()
        os.killpg(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 128 + signum, stderr[-2000:]
        lines = [line for line in stderr.splitlines() if "stopped by" in line]
        assert len(lines) == 1 and signal.Signals(signum).name in lines[0], stderr[-2000:]
        assert "--resume" in stderr and "Traceback" not in stderr, stderr[-2000:]
        time.sleep(1.0)
        assert not {p for p in workers if Path(f"/proc/{p}").exists()
                    and "zombie" not in _state(p)}, "worker processes outlived the fit"
        with np.load(first) as z:
            step = int(z["step"])
            assert z["trace"].shape == (step,)
        # written at the signal, not a periodic checkpoint from before it
        assert first.stat().st_mtime >= sent - 0.05
        assert step >= 3
        return step
    finally:
        # a fit that failed the checks (ignored the signal, never checkpointed) goes too
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _stop_signals_default() -> None:
    """In the fit's process before it starts: SIGTERM and SIGHUP with their default
    action, as in a terminal.  A test run started under ``nohup`` would otherwise pass
    SIGHUP on ignored, and the fit rightly keeps an ignored signal ignored."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return "zombie"


def _finish(cmd_extra: list[str], out: Path, steps: int, env: dict,
            resume: bool) -> FitResult:
    cmd = [*CLI, *cmd_extra, "--out", str(out), "--steps", str(steps),
           "--checkpoint-every", "3"] + (["--resume"] if resume else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return FitResult.load(out / "results.h5")


@pytest.mark.slow
def test_sigterm_and_sighup_checkpoint_then_resume_equals_uninterrupted(tmp_path, env):
    runs = {"in-process SIGTERM": (["--in-process"], signal.SIGTERM),
            "LocalCluster SIGTERM": (["--workers", "1"], signal.SIGTERM),
            "in-process SIGHUP": (["--in-process"], signal.SIGHUP)}
    stopped = {name: _stopped_by(signum, where, tmp_path / str(i), env)
               for i, (name, (where, signum)) in enumerate(runs.items())}
    steps = max(stopped.values()) + 2
    reference = _finish(["--in-process"], tmp_path / "reference", steps, env, resume=False)
    for i, (name, (where, _)) in enumerate(runs.items()):
        resumed = _finish(where, tmp_path / str(i), steps, env, resume=True)
        for a, b in zip(resumed.starts, reference.starts, strict=True):
            assert a.steps == b.steps == steps, name
            np.testing.assert_allclose(a.trace, b.trace, rtol=1e-10, atol=0, err_msg=name)
            np.testing.assert_allclose(a.w, b.w, rtol=1e-10, atol=1e-12, err_msg=name)
            assert a.value == pytest.approx(b.value, rel=1e-10, abs=0), name


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_during_a_checkpoint_write_comes_after_it(signum):
    """``signals_deferred`` (around every checkpoint write) holds Ctrl-C and SIGTERM
    back: the block finishes, then the interrupt is raised."""
    from petab_sciml.fit.signals import FitSignalled, signals_deferred, stop_signals_interrupt

    finished = []
    # Python's own Ctrl-C handler, as in the CLI (pytest-xdist's workers ignore SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as caught, stop_signals_interrupt():
            _interrupt_inside(signals_deferred, signum, finished)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert finished == [True]
    assert isinstance(caught.value, FitSignalled) == (signum == signal.SIGTERM)


def _interrupt_inside(signals_deferred, signum: int, finished: list) -> None:
    """Send ``signum`` inside a ``signals_deferred`` block that then finishes."""
    with signals_deferred():
        os.kill(os.getpid(), signum)
        time.sleep(0.05)
        finished.append(True)
    time.sleep(0.05)   # the interrupt arrives here at the latest

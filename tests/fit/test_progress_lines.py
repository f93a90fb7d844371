"""``fit``'s progress without a terminal (a log file, CI, a notebook): one plain line per
start at every tenth of the steps and at least every ``every_s`` seconds, no table
borders, and a last line that says what the loss and the objective are."""

from __future__ import annotations

import io

import numpy as np
import pytest

rich = pytest.importorskip("rich")

from rich.console import Console  # noqa: E402

from petab_sciml import fit as fit_module  # noqa: E402


def _log(steps: int, every_s: float, clock: list[float], per_step_s: float) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=40)   # no wrapping at any width
    with fit_module._Progress(2, steps, console, every_s=every_s) as progress:
        for step in range(1, steps + 1):
            clock[0] += per_step_s
            progress.update([0, 1], step, np.array([100.0 / step, 200.0 / step]))
    return out.getvalue().rstrip("\n").splitlines()


def test_plain_lines_at_every_tenth_and_a_closing_note(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(fit_module.time, "perf_counter", lambda: clock[0])
    lines = _log(50, every_s=1e9, clock=clock, per_step_s=0.01)
    for k in (0, 1):
        mine = [line for line in lines if line.startswith(f"start {k}: ")]
        steps = [int(line.split("step ")[1].split("/")[0]) for line in mine]
        assert steps == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]
    assert "start 0: step 50/50, loss 2," in lines[-3]
    assert "start 1: step 50/50, loss 4," in lines[-2]
    assert lines[-1].startswith("loss: the training loss before each step; the objective")
    assert not any(c in "".join(lines) for c in "┃━│─┏┗")      # no table drawn


def test_plain_lines_every_few_seconds_between_tenths(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(fit_module.time, "perf_counter", lambda: clock[0])
    # 1,000 steps of 0.1 s: a tenth is 10 s, so a line every 3 s comes between them
    lines = _log(1000, every_s=3.0, clock=clock, per_step_s=0.1)
    steps = [int(line.split("step ")[1].split("/")[0]) for line in lines
             if line.startswith("start 0: ")]
    gaps = np.diff([0] + steps)
    assert gaps.max() <= 31 and len(steps) >= 1000 // 31
    assert 100 in steps and 1000 in steps
    rate = next(line for line in lines if line.startswith("start 0: step 100/"))
    assert "10.0 steps/s, 90 s left" in rate

"""Time and memory of every command of the hostile-input corpus, as ratios to a benign run.

For each run of ``tests/support/hostile.py``: wall time, CPU time and peak memory of the
command (a fresh process), each also as a ratio to the same command on the valid base
problem measured in this run (``validate``, ``info``, ``convert`` and ``load_problem``).
Targets: CPU time within 4x the benign run's and 500 MB peak memory (the test,
``tests/security/test_hostile_inputs.py``, holds only the generous ceiling ``CPU_RATIO``).

    python benchmarks/bench_hostile.py [CASE ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.hostile import CASES, make_problem  # noqa: E402
from tests.support.measure import benign_argv, command_kind, run_measured  # noqa: E402

CPU_RATIO_TARGET = 4.0
PEAK_MB_TARGET = 500.0


def main(names: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        base = make_problem(Path(scratch) / "base")
        baseline = {kind: run_measured(benign_argv(kind, base, base.parent), base.parent)
                    for kind in ("validate", "info", "convert", "load")}
        for kind, m in baseline.items():
            print(f"benign {kind:8s} (valid problem): {m.wall:5.2f} s wall, {m.cpu:5.2f} s "
                  f"CPU, {m.peak_mb:4.0f} MB")
        print(f"{'case':36s} {'command':9s} {'exit':>4s} {'wall s':>7s} {'ratio':>6s} "
              f"{'cpu s':>6s} {'ratio':>6s} {'peak MB':>8s} {'ratio':>6s}  verdict")
        worst_cpu = worst_mb = 0.0
        failed = 0
        for name in names or sorted(CASES):
            root = Path(scratch) / name
            root.mkdir()
            for run in CASES[name][1](root):
                m = run_measured(run.argv, root)
                command = command_kind(run.argv)
                ref = baseline.get(command, baseline["validate"])
                cpu_ratio = m.cpu / ref.cpu
                ok = m.code == run.exit and cpu_ratio < CPU_RATIO_TARGET \
                    and m.peak_mb < PEAK_MB_TARGET and "Traceback" not in m.output
                failed += not ok
                worst_cpu, worst_mb = max(worst_cpu, cpu_ratio), max(worst_mb, m.peak_mb)
                print(f"{name:36s} {command:9s} {m.code:4d} {m.wall:7.2f} "
                      f"{m.wall / ref.wall:5.2f}x {m.cpu:6.2f} {cpu_ratio:5.2f}x "
                      f"{m.peak_mb:8.0f} {m.peak_mb / ref.peak_mb:5.2f}x  "
                      f"{'ok' if ok else 'OVER'}")
        print(f"worst: {worst_cpu:.2f}x the benign CPU time, {worst_mb:.0f} MB peak (targets "
              f"{CPU_RATIO_TARGET:.0f}x, {PEAK_MB_TARGET:.0f} MB); {failed} run(s) over or wrong")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

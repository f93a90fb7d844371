"""Time and memory of every command of the hostile-input corpus.

For each run of ``tests/support/hostile.py``: wall time, CPU time and peak memory of the command
(a fresh process), with the ratio of wall time to the same command on the valid base
problem measured in this run (``validate`` and ``load_problem``).  Targets: every run
within 5 s and 500 MB.

    python benchmarks/bench_hostile.py [CASE ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.security.test_hostile_inputs import run_measured  # noqa: E402
from tests.support.hostile import CASES, CLI, LOAD, make_problem  # noqa: E402


def main(names: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        base = make_problem(Path(scratch) / "base")
        baseline = {"validate": run_measured([*CLI, "validate", str(base)], base.parent),
                    "load": run_measured([*LOAD, str(base)], base.parent)}
        for kind, m in baseline.items():
            print(f"baseline {kind:8s} (valid problem): {m.wall:5.2f} s wall, {m.cpu:5.2f} s "
                  f"CPU, {m.peak_mb:4.0f} MB")
        print(f"{'case':36s} {'command':9s} {'exit':>4s} {'wall s':>7s} {'ratio':>6s} "
              f"{'cpu s':>6s} {'peak MB':>8s}  verdict")
        worst_wall = worst_mb = 0.0
        failed = 0
        for name in names or sorted(CASES):
            root = Path(scratch) / name
            root.mkdir()
            for run in CASES[name][1](root):
                m = run_measured(run.argv, root)
                command = "load" if run.argv[:2] == LOAD else run.argv[3]
                ref = baseline["load" if command == "load" else "validate"]
                ok = m.code == run.exit and m.wall < 5 and m.peak_mb < 500 \
                    and "Traceback" not in m.output
                failed += not ok
                worst_wall, worst_mb = max(worst_wall, m.wall), max(worst_mb, m.peak_mb)
                print(f"{name:36s} {command:9s} {m.code:4d} {m.wall:7.2f} "
                      f"{m.wall / ref.wall:5.2f}x {m.cpu:6.2f} {m.peak_mb:8.0f}  "
                      f"{'ok' if ok else 'OVER'}")
        print(f"worst: {worst_wall:.2f} s wall, {worst_mb:.0f} MB peak (targets 5 s, 500 MB); "
              f"{failed} run(s) over or wrong")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

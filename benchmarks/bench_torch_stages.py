"""The compiled torch module with its Runge-Kutta stages looped (default) or unrolled
(``unroll_stages=True``) against JAX, measured in one run (issue 11 point 5: torch
objective + gradient within 10x of JAX).

    python benchmarks/bench_torch_stages.py [--cases 004] [--evals 20]

Per suite case: the JAX baseline of ``bench_native.py`` (``Simulator.value_and_grad``),
then ``loss = module(); loss.backward()`` on the native torch module compiled both ways
(first call, compilation included; min and median), each against the baseline's min
and median.  Single-threaded, one process; inductor's on-disk cache makes a second run's first calls
shorter (set ``TORCHINDUCTOR_CACHE_DIR`` to a fresh folder to time compilation).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_native import suite_case  # noqa: E402


def min_median(fn, evals: int) -> tuple[float, float]:
    """(min, median) seconds of ``evals`` calls after one warm-up call."""
    import statistics

    fn()
    times = []
    for _ in range(evals):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def torch_module(path: Path, evals: int, **options):
    """(first call s, (min, median) s, loss) of ``module(); backward()``."""
    from petab_sciml.problem import load_problem

    module = load_problem(path, backend="torch").model(compile=True, **options).eval()
    losses = []

    def step():
        module.zero_grad()
        loss = module()
        loss.backward()
        losses.append(float(loss.detach()))

    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    return first, min_median(step, evals), losses[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["004"])
    parser.add_argument("--evals", type=int, default=20)
    args = parser.parse_args()

    import torch

    from petab_sciml.problem import load_problem

    torch.set_num_threads(1)
    for case in args.cases:
        path = suite_case(case)
        sim = load_problem(path, backend="jax").simulator(cache=False)
        p = sim.parameters()
        base = min_median(lambda s=sim, q=p: s.value_and_grad(q), args.evals)
        jax_loss = sim.evaluate(p, grad=False).value
        print(f"case {case}: jax value_and_grad min {base[0] * 1e3:.2f} ms, median "
              f"{base[1] * 1e3:.2f} ms", flush=True)
        for label, options in (("looped", {}), ("unrolled", {"unroll_stages": True})):
            first, (low, median), loss = torch_module(path, args.evals, **options)
            print(f"  torch compiled, stages {label:8s} min {low * 1e3:6.2f} ms "
                  f"({low / base[0]:4.1f}x jax), median {median * 1e3:6.2f} ms "
                  f"({median / base[1]:4.1f}x jax; target <= 10x), first call {first:.0f} s, "
                  f"loss rel diff to jax {abs(loss - jax_loss) / abs(jax_loss):.1e}",
                  flush=True)


if __name__ == "__main__":
    main()

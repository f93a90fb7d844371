"""The compiled native torch module against JAX, objective + gradient, measured in one run
(target: torch within 10x of JAX on suite cases 001, 002 and 004).

    python benchmarks/bench_torch_stages.py [--cases 001 002 004] [--evals 40]
                                            [--stages default looped unrolled]

Per suite case: the JAX baseline of ``bench_native.py`` (``Simulator.value_and_grad``)
and ``loss = module(); loss.backward()`` on the native torch module (``compile=True``)
with its Runge-Kutta stages as ``TorchOptions.unroll_stages`` decides by default
(``default``: unrolled without a network in the right-hand side), or forced ``looped``
/ ``unrolled``.  Every torch module is compiled first (first call, compilation
included, printed); then JAX and each torch module are called in turn ``--evals``
times, so that all see the same machine load; min and median of each, and their
ratios to JAX's min and median.  The load average (``os.getloadavg``) before and after
is printed.  Single-threaded, one process; inductor's on-disk cache makes a second run's
first calls shorter (set ``TORCHINDUCTOR_CACHE_DIR`` to a fresh folder to time
compilation).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_native import suite_case  # noqa: E402

STAGES = {"default": {}, "looped": {"unroll_stages": False},
          "unrolled": {"unroll_stages": True}}


def torch_step(path: Path, **options):
    """(step, first call s, loss): ``step()`` runs ``module(); backward()`` once."""
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
    return step, time.perf_counter() - t, losses, module.executor.options.unroll_stages


def in_turn(fns: list, evals: int) -> list[list[float]]:
    """Wall times of each of ``fns``, called in turn ``evals`` times after one call each."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(evals):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return times


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["001", "002", "004"])
    parser.add_argument("--evals", type=int, default=40)
    parser.add_argument("--stages", nargs="+", default=["default"], choices=list(STAGES))
    args = parser.parse_args()

    import torch

    from petab_sciml.problem import load_problem

    torch.set_num_threads(1)
    for case in args.cases:
        path = suite_case(case)
        sim = load_problem(path, backend="jax").simulator(cache=False)
        p = sim.parameters()
        jax_loss = sim.evaluate(p, grad=False).value
        variants = []
        for label in args.stages:
            step, first, losses, unrolled = torch_step(path, **STAGES[label])
            variants.append((label, step, first, losses, unrolled))
        start = load()
        times = in_turn([lambda s=sim, q=p: s.value_and_grad(q)]
                        + [v[1] for v in variants], args.evals)
        base = min(times[0]), statistics.median(times[0])
        print(f"case {case} (load average {start} -> {load()}, {args.evals} calls each, "
              f"in turn): jax value_and_grad min {base[0] * 1e3:.2f} ms, median "
              f"{base[1] * 1e3:.2f} ms", flush=True)
        for (label, _, first, losses, unrolled), ts in zip(variants, times[1:]):
            low, median = min(ts), statistics.median(ts)
            stages = "unrolled" if unrolled else "looped"
            print(f"  torch compiled, {label} ({stages}) min {low * 1e3:6.2f} ms "
                  f"({low / base[0]:4.1f}x jax), median {median * 1e3:6.2f} ms "
                  f"({median / base[1]:4.1f}x jax; target <= 10x), first call {first:.0f} s, "
                  f"loss rel diff to jax {abs(losses[-1] - jax_loss) / abs(jax_loss):.1e}",
                  flush=True)


if __name__ == "__main__":
    main()

"""Time per fit step, and the speed-up of K vmapped starts over K sequential ones.

    python benchmarks/bench_fit.py [--starts 4] [--steps 50] [--torch]

On the bundled example (Lotka-Volterra UDE): the JAX fit step (``backends/jax/fit.py``:
objective, gradient, optax Adam update and projection of a batch of starts, one jitted
vmapped call) for a batch of 1 and of K starts, measured in one run after compilation;
"K sequential" is K times the single-start step. With ``--torch`` also the PyTorch
runner's step (``TorchProblem`` + torch.optim.Adam, compiled solves). Prints medians in
ms and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "lotka_volterra_ude" / "problem.yaml"


def jax_step_ms(problem, starts: int, steps: int) -> tuple[float, float]:
    """(compile s, median ms per step) of the vmapped step for ``starts`` starts."""
    import jax
    import jax.numpy as jnp

    from petab_sciml.backends.jax.fit import _compiled
    from petab_sciml.backends.jax.problem import from_vector, stack
    from petab_sciml.fit.starts import draw_starts
    from petab_sciml.fit.task import FitTask

    spec = problem.model().spec
    w0 = draw_starts(problem, 0, starts, None)
    task = FitTask(str(EXAMPLE), "jax", list(range(starts)), w0, 0, "adam", 0.02, steps)
    step, _, init = _compiled(task, spec, False)
    batch = stack([from_vector(spec, w) for w in w0])
    states = init(batch)
    previous, active = batch, jnp.ones(starts, bool)
    rngs = jnp.stack([jax.random.PRNGKey(k) for k in range(starts)])
    t0 = time.perf_counter()
    out = step(batch, previous, states, active, rngs, jnp.asarray(0, jnp.int32))
    jax.block_until_ready(out[-1])
    compile_s = time.perf_counter() - t0
    batch, previous, states, active, _ = out
    times = []
    for k in range(1, steps + 1):
        t = time.perf_counter()
        batch, previous, states, active, values = step(batch, previous, states, active, rngs,
                                                       jnp.asarray(k, jnp.int32))
        jax.block_until_ready(values)
        times.append(time.perf_counter() - t)
    return compile_s, 1e3 * statistics.median(times)


def torch_step_ms(steps: int) -> float:
    import torch

    from petab_sciml.problem import load_problem

    problem = load_problem(EXAMPLE, backend="torch")
    module = problem.model()
    opt = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=0.02)
    times = []
    for _ in range(steps + 1):
        t = time.perf_counter()
        opt.zero_grad()
        loss = module()
        loss.backward()
        opt.step()
        module.project_()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=4)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--torch", action="store_true")
    args = parser.parse_args()
    import os

    from petab_sciml.problem import load_problem

    problem = load_problem(EXAMPLE, backend="jax")
    c1, t1 = jax_step_ms(problem, 1, args.steps)
    ck, tk = jax_step_ms(problem, args.starts, args.steps)
    k = args.starts
    print(f"load average {os.getloadavg()[0]:.2f}; example {EXAMPLE.parent.name}, "
          f"{args.steps} steps after compilation, median")
    print(f"JAX fit step, 1 start:          {t1:8.2f} ms   (compile {c1:.1f} s)")
    print(f"JAX fit step, {k} starts vmapped: {tk:8.2f} ms   (compile {ck:.1f} s)")
    print(f"JAX {k} starts sequential:        {k * t1:8.2f} ms   = {k} x 1 start")
    print(f"speed-up of {k} vmapped over {k} sequential: {k * t1 / tk:.2f}x; "
          f"per start: {tk / k:.2f} ms")
    if args.torch:
        tt = torch_step_ms(args.steps)
        print(f"PyTorch fit step, 1 start:      {tt:8.2f} ms   ({tt / t1:.1f}x the JAX step)")
    np.testing.assert_(np.isfinite([t1, tk]).all())


if __name__ == "__main__":
    main()

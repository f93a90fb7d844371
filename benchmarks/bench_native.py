"""The native trainable models: what a training step costs, measured in one run.

    python benchmarks/bench_native.py [--cases 001 002 004] [--evals 20] [--starts 16]
                                      [--no-torch-compile] [--no-torch] [--json]

Per suite case (SciML problem import; 001: network in the right-hand side, 002:
pre-initialization network, 004: network in an observable), median wall time of:

* ``jax value_and_grad``: today's numpy API, ``problem.value_and_grad(p)`` (the baseline);
* ``jax native step``: a user's jitted optax step on the native equinox model (objective,
  gradient, ``optax.adam`` update, projection onto the bounds); target <= 1.1x the
  baseline;
* ``jax vmap 16``: objective and gradient of 16 starts in one vmapped call; target <= 4x
  one start (the native model's ``value_and_grad``), the two called in turn (ratio of
  medians, and of minima);
* ``torch native``: ``loss = module(); loss.backward()`` on the native torch module,
  solves compiled by ``torch.compile`` (first call, compilation included, printed
  apart); target <= 10x the JAX baseline; and the eager module for comparison.

Everything runs single-threaded in one process, JAX first, so the ratios compare
figures taken under the same machine load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def suite_case(case: str) -> Path:
    from petab_sciml.testcases import suite_problem

    return suite_problem(case)


def median_time(fn, evals: int) -> float:
    fn()
    times = []
    for _ in range(evals):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_jax(path: Path, evals: int, starts: int) -> dict:
    import equinox as eqx
    import jax
    import optax

    from petab_sciml.backends.jax.problem import loss, project, stack
    from petab_sciml.problem import load_problem

    problem = load_problem(path, backend="jax")
    sim = problem.simulator(cache=False)
    p = sim.parameters()
    model = problem.model()
    opt = optax.adam(1e-4)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))

    def raw_step(model, state):
        (value, _), grads = eqx.filter_value_and_grad(loss, has_aux=True)(model)
        updates, state = opt.update(grads, state, model)
        return project(eqx.apply_updates(model, updates)), state, value

    step = eqx.filter_jit(raw_step)

    def one_step():
        # the same point every call: the cost of a step, not of a trajectory
        jax.block_until_ready(step(model, state)[2])

    # the same step under plain jax.jit of the model's arrays (eqx.partition / combine):
    # the loss's own cost, without eqx.filter_jit's per-call Python dispatch (equinox's,
    # the same for any module)
    arrays, static = eqx.partition(model, eqx.is_inexact_array)

    @jax.jit
    def array_step(arrays, state):
        new, state, value = raw_step(eqx.combine(arrays, static), state)
        return eqx.filter(new, eqx.is_inexact_array), state, value

    def one_array_step():
        jax.block_until_ready(array_step(arrays, state)[2])

    # the numpy-API baseline and the native step called in turn (same machine load)
    bases, steps = interleaved(lambda: sim.value_and_grad(p), one_step, evals)
    baseline, native_step = statistics.median(bases), statistics.median(steps)
    bases2, array_steps = interleaved(lambda: sim.value_and_grad(p), one_array_step, evals)
    value_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))
    batch = stack([jax.tree_util.tree_map(lambda x, s=s: x * (1 + 1e-3 * s), model)
                   for s in range(starts)])
    batched = eqx.filter_jit(eqx.filter_vmap(eqx.filter_value_and_grad(loss, has_aux=True)))
    # one start and the batch called in turn, so that both see the same machine load
    ones, manys = interleaved(lambda: jax.block_until_ready(value_and_grad(model)[0][0]),
                              lambda: jax.block_until_ready(batched(batch)[0][0]), evals)
    one, many = statistics.median(ones), statistics.median(manys)
    return {"value_and_grad_s": baseline, "native_step_s": native_step,
            "native_value_and_grad_s": one, f"vmap_{starts}_s": many,
            "step_ratio": native_step / baseline,
            "step_ratio_min": min(steps) / min(bases),
            "array_step_s": statistics.median(array_steps),
            "array_step_ratio": statistics.median(array_steps) / statistics.median(bases2),
            "array_step_ratio_min": min(array_steps) / min(bases2), "vmap_ratio": many / one,
            "vmap_ratio_min": min(manys) / min(ones)}


def interleaved(first, second, evals: int) -> tuple[list[float], list[float]]:
    """Wall times of ``first`` and ``second`` called in turn ``evals`` times (after one
    call each)."""
    first(), second()
    a, b = [], []
    for _ in range(evals):
        for fn, out in ((first, a), (second, b)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return a, b


def bench_torch(path: Path, evals: int, compile_: bool) -> dict:
    import torch

    from petab_sciml.problem import load_problem

    problem = load_problem(path, backend="torch")
    module = problem.model(compile=compile_).eval()

    def step():
        module.zero_grad()
        module().backward()

    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    torch.set_num_threads(1)
    return {"first_s": first, "per_eval_s": median_time(step, evals)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["001", "002", "004"])
    parser.add_argument("--evals", type=int, default=20)
    parser.add_argument("--starts", type=int, default=16)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--no-torch", action="store_true", help="JAX figures only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    if not args.no_torch:
        import torch

        torch.set_num_threads(1)
    results = {}
    for case in args.cases:
        path = suite_case(case)
        jax_r = bench_jax(path, args.evals, args.starts)
        eager = None if args.no_torch else bench_torch(path, max(args.evals // 4, 3), False)
        compiled = (None if args.no_torch_compile or args.no_torch
                    else bench_torch(path, args.evals, True))
        results[case] = {"jax": jax_r, "torch_eager": eager, "torch_compiled": compiled}
        if not args.json:
            base = jax_r["value_and_grad_s"]
            print(f"case {case}")
            print(f"  jax value_and_grad (baseline)    {base * 1e3:9.2f} ms")
            print(f"  jax native optax step            {jax_r['native_step_s'] * 1e3:9.2f} ms"
                  f"   {jax_r['step_ratio']:.2f}x baseline, minima {jax_r['step_ratio_min']:.2f}x"
                  " (target <= 1.1x; eqx.filter_jit)")
            print(f"  jax native optax step, jax.jit   {jax_r['array_step_s'] * 1e3:9.2f} ms"
                  f"   {jax_r['array_step_ratio']:.2f}x baseline, minima "
                  f"{jax_r['array_step_ratio_min']:.2f}x (eqx.partition + jax.jit)")
            print(f"  jax vmap {args.starts} starts                "
                  f"{jax_r[f'vmap_{args.starts}_s'] * 1e3:9.2f} ms   "
                  f"{jax_r['vmap_ratio']:.2f}x one start "
                  f"({jax_r['native_value_and_grad_s'] * 1e3:.2f} ms; target <= 4x); "
                  f"minima {jax_r['vmap_ratio_min']:.2f}x")
            if compiled:
                print(f"  torch native, compiled           {compiled['per_eval_s'] * 1e3:9.2f}"
                      f" ms   {compiled['per_eval_s'] / base:.1f}x jax (target <= 10x); "
                      f"first call {compiled['first_s']:.1f} s")
            if eager:
                print(f"  torch native, eager              {eager['per_eval_s'] * 1e3:9.2f}"
                      f" ms   {eager['per_eval_s'] / base:.0f}x jax")
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""A large right-hand side compiled as straight-line code and as a term sum
(``petab_sciml/simulation/term_sums.py``), side by side in one run: XLA compile time of
the right-hand side and of its reverse-mode product (``vjp``), and the time per call,
in JAX; the time per call and per backward in PyTorch.  Prints one Markdown table with
the ratios straight-line / term sum (above 1: term sums are faster).

    python benchmarks/bench_term_sums.py [--model Chen_MSB2009] [--skip-straight-vjp]

The model comes from the benchmark collection beside the checkout
(``../shared/petab_benchmark``, or ``PETAB_BENCHMARK``).  The straight-line ``vjp``
compile of Chen_MSB2009 takes minutes; ``--skip-straight-vjp`` leaves it out.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from timing import best_of

REPO = Path(__file__).resolve().parents[1]
BENCHMARK = Path(os.environ.get("PETAB_BENCHMARK") or REPO.parent / "shared" / "petab_benchmark")


def jax_rows(plan, skip_straight_vjp: bool) -> dict[str, dict[str, float]]:
    import jax
    import jax.numpy as jnp

    from petab_sciml.backends.jax.model import check_dtype
    from petab_sciml.simulation.compiled import compile_plan

    check_dtype("float64")
    rng = np.random.default_rng(0)
    args = [jnp.asarray(rng.uniform(0.5, 1.5, len(g))) for g in plan.groups()]
    out = {}
    for label, term_sums in (("straight-line", False), ("term sum", True)):
        t = time.perf_counter()
        rhs = compile_plan(plan, "jax", term_sums=term_sums).rhs
        row = {"build [s]": time.perf_counter() - t}
        t = time.perf_counter()
        value = jax.jit(lambda t, *a, f=rhs: f(t, *a)).lower(0.0, *args).compile()
        row["JAX compile [s]"] = time.perf_counter() - t
        row["JAX call [us]"] = 1e6 * best_of(lambda v=value: v(0.0, *args).block_until_ready(),
                                           200)
        if term_sums or not skip_straight_vjp:
            def pullback(t, x, *rest, f=rhs):
                return jax.vjp(lambda y: f(t, y, *rest), x)[1](jnp.ones_like(x))[0]

            t = time.perf_counter()
            vjp = jax.jit(pullback).lower(0.0, *args).compile()
            row["JAX vjp compile [s]"] = time.perf_counter() - t
            row["JAX vjp call [us]"] = 1e6 * best_of(
                lambda v=vjp: v(0.0, *args).block_until_ready(), 200)
        out[label] = row
    return out


def torch_rows(plan) -> dict[str, dict[str, float]]:
    import torch

    from petab_sciml.simulation.compiled import compile_plan

    rng = np.random.default_rng(0)
    out = {}
    for label, term_sums in (("straight-line", False), ("term sum", True)):
        rhs = compile_plan(plan, "torch", term_sums=term_sums).rhs
        args = [torch.tensor(rng.uniform(0.5, 1.5, (1, len(g)))) for g in plan.groups()]
        t0 = torch.tensor(0.0, dtype=torch.float64)
        with torch.no_grad():
            call = best_of(lambda f=rhs, t0=t0, args=args: f(t0, *args), 20)
        x = args[0].clone().requires_grad_(True)

        def backward(f=rhs, x=x, t0=t0, rest=args[1:]):
            f(t0, x, *rest).sum().backward()

        out[label] = {"torch call [us]": 1e6 * call,
                      "torch call + backward [us]": 1e6 * best_of(backward, 10)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Chen_MSB2009")
    parser.add_argument("--skip-straight-vjp", action="store_true")
    args = parser.parse_args()
    from petab_sciml.problem import load_problem

    path = BENCHMARK / args.model / f"{args.model}.yaml"
    plan = load_problem(path, backend="jax").plan
    rows = jax_rows(plan, args.skip_straight_vjp)
    try:
        for label, more in torch_rows(plan).items():
            rows[label].update(more)
    except ImportError:
        pass
    print(f"{args.model}: {len(plan.state_ids)} states, {len(plan.theta_ids)} parameters\n")
    columns = list(dict.fromkeys(c for r in rows.values() for c in r))
    print("| | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for label, row in rows.items():
        print(f"| {label} | " + " | ".join(f"{row[c]:.3g}" if c in row else "-"
                                          for c in columns) + " |")
    a, b = rows["straight-line"], rows["term sum"]
    print("| straight-line / term sum | " + " | ".join(
        f"{a[c] / b[c]:.3g}" if c in a and c in b else "-" for c in columns) + " |")


if __name__ == "__main__":
    main()

"""Train the bundled Lotka-Volterra UDE: validate, load, then Adam on the objective.

Usage: python examples/lotka_volterra_ude/train.py [--backend jax|torch] [--steps N]

The objective is PEtab's negative log-likelihood of the measurements (no priors here);
``problem.value_and_grad`` gives it with its gradient in the structure of
``problem.parameters()``: ``{"mech": array in parameter-table order, "nets": {net: {layer:
{array: array}}}}``. Mechanistic parameters are kept inside their bounds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from petab_sciml import load_problem

HERE = Path(__file__).resolve().parent


def flatten(tree: dict) -> list[np.ndarray]:
    out = [np.asarray(tree["mech"], dtype=float)]
    for net in tree["nets"].values():
        for layer in net.values():
            out.extend(np.asarray(a, dtype=float) for a in layer.values())
    return out


def unflatten(template: dict, leaves: list[np.ndarray]) -> dict:
    it = iter(leaves)
    return {"mech": next(it),
            "nets": {n: {lay: {a: next(it) for a in arrays} for lay, arrays in net.items()}
                     for n, net in template["nets"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "torch"])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    start = time.perf_counter()
    problem = load_problem(HERE / "problem.yaml", backend=args.backend)
    params = problem.parameters()
    lower, upper = problem.plan.mech_lower, problem.plan.mech_upper
    print(f"loaded in {time.perf_counter() - start:.2f} s ({args.backend}); "
          f"mechanistic parameters {list(problem.plan.mech_ids)}")

    leaves = flatten(params)
    m = [np.zeros_like(x) for x in leaves]
    v = [np.zeros_like(x) for x in leaves]
    b1, b2, eps = 0.9, 0.999, 1e-8
    first = None
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        value, grad = problem.value_and_grad(unflatten(params, leaves))
        if first is None:
            first = time.perf_counter() - t0
        grads = flatten(grad)
        for k, g in enumerate(grads):
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            step_k = args.lr * (m[k] / (1 - b1**step)) / (np.sqrt(v[k] / (1 - b2**step)) + eps)
            leaves[k] = leaves[k] - step_k
        leaves[0] = np.clip(leaves[0], lower, upper)
        if step == 1 or step % 50 == 0:
            print(f"step {step:4d}   objective {float(value):14.4f}")
    elapsed = time.perf_counter() - t0
    final = problem.objective(unflatten(params, leaves))
    print(f"final objective {float(final):.4f}; first call {first:.2f} s, then "
          f"{(elapsed - first) / max(args.steps - 1, 1) * 1e3:.1f} ms per step")
    print("estimated:", dict(zip(problem.plan.mech_ids, np.round(leaves[0], 3))),
          "(data made with alpha 1.3, beta 0.9, delta 1.8)")


if __name__ == "__main__":
    main()

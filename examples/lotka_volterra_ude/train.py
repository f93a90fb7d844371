"""Train the bundled Lotka-Volterra UDE with optax (JAX) or torch.optim (PyTorch).

Usage: python examples/lotka_volterra_ude/train.py [--backend jax|torch] [--steps N]
                                                    [--lr LR] [--out DIR]

``problem.model()`` is the whole problem as a native model of the backend: an equinox
Module whose leaves are the estimated values (JAX) or a torch.nn.Module whose parameters
are (PyTorch).  Each step is the framework's own optimizer step, then a projection onto
the parameter bounds.  ``--out DIR`` writes the trained problem (a complete PEtab SciML
problem) there.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from petab_sciml import load_problem

HERE = Path(__file__).resolve().parent


def train_jax(problem, steps: int, lr: float):
    import equinox as eqx
    import optax

    from petab_sciml.backends.jax.problem import loss, project

    model = problem.model()
    optimizer = optax.adam(lr)
    state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state):
        (value, _), grads = eqx.filter_value_and_grad(loss, has_aux=True)(model)
        updates, state = optimizer.update(grads, state, model)
        return project(eqx.apply_updates(model, updates)), state, value

    for k in range(1, steps + 1):
        model, state, value = step(model, state)
        yield k, float(value), model


def train_torch(problem, steps: int, lr: float):
    import torch

    module = problem.model().eval()          # torch.nn.Module; compiled solves
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    for k in range(1, steps + 1):
        optimizer.zero_grad()
        value = module()
        value.backward()
        optimizer.step()
        module.project_()
        yield k, value.item(), module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "torch"])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--out", type=Path, help="write the trained problem here")
    args = parser.parse_args()

    start = time.perf_counter()
    problem = load_problem(HERE / "problem.yaml", backend=args.backend)
    print(f"loaded in {time.perf_counter() - start:.2f} s ({args.backend}); "
          f"mechanistic parameters {list(problem.plan.mech_ids)}")
    train = train_jax if args.backend == "jax" else train_torch
    t0 = time.perf_counter()
    first = model = None
    for k, value, model in train(problem, args.steps, args.lr):  # noqa: B007
        if first is None:
            first = time.perf_counter() - t0
        if k == 1 or k % 50 == 0:
            print(f"step {k:4d}   objective {value:14.4f}")
    elapsed = time.perf_counter() - t0
    values = model.values()
    final = problem.objective(values)
    print(f"final objective {final:.4f}; first step {first:.2f} s, then "
          f"{(elapsed - first) / max(args.steps - 1, 1) * 1e3:.1f} ms per step")
    estimated = {k: round(float(v), 3) for k, v in zip(problem.plan.mech_ids, values["mech"])}
    print("estimated:", estimated,
          "(data made with alpha 1.3, beta 0.9, delta 1.8)")
    if args.out:
        print("trained problem written to", problem.save(model, args.out, force=True))


if __name__ == "__main__":
    main()

"""Why suite case 038 differs between batched and unbatched experiments.

    python benchmarks/investigations/batched_vs_unbatched_038.py [--rtols 1e-8 1e-10 1e-12]
    python benchmarks/investigations/batched_vs_unbatched_038.py --backend torch

Case 038 has a ReLU network inside the right-hand side and two experiments.  The
batched path (one ``vmap`` over both experiments) and the unbatched one
(``batch_experiments=False``: ``lax.map``, one experiment after another) can end
apart in more than rounding: XLA sums a product in one order for one state
and in another under ``vmap``, and the ReLU kinks make the controller reject most steps,
so a last-bit difference flips some accept / reject decisions.  Small Linear layers
(``ops.ordered_linear``) and diffrax's stage sums (``stage_sums.diffeqsolve``) are now
computed in one fixed order of elementwise operations.  This script prints:

1. the network (the executor's own forward), jitted alone and under ``vmap``: how many
   values differ in the last bits, and the same for its Jacobian computed as the
   forward-sensitivity right-hand side does (``ops.batch_invariant_jacobians``) and as
   plain ``jax.jacfwd`` (matrix products: differs, not used to steer steps).  The
   network's values can still differ in a few last bits where XLA fuses the input
   concatenation with the products and contracts multiply-adds into fused
   multiply-adds differently; inside the solve they did not;
2. at each tolerance, both paths' accepted / rejected step counts per experiment and the
   largest difference of value, simulations and gradient (relative to
   max(1, |unbatched|)).

``--backend torch``: the same differences for PyTorch, forward sensitivities and
``autograd``, with ``torch.nn.Linear``'s BLAS products (``ordered_products=False``) and
with the batch-invariant ones a kinked right-hand side gets by default
(``backends/torch/ordered.py``), plus steps and seconds of each evaluation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def case_path() -> Path:
    from petab_sciml.testcases import default_suite

    suite = default_suite()
    if suite is None:
        raise SystemExit("official suite not found: set PETAB_SCIML_TESTSUITE")
    return suite / "test_cases" / "sciml_problem_import" / "038"


def network_bits(n: int = 200) -> None:
    import jax
    import jax.numpy as jnp

    from petab_sciml.problem import load_problem
    from petab_sciml.testcases import load_problem_case

    case = load_problem_case(case_path())
    sim = load_problem(case.problem, backend="jax").simulator(cache=False)
    ex = sim.executor
    params, buffers = ex.networks.arrays(jnp.asarray(sim.plan.w0))[0]
    forward = ex.networks.forwards[0]

    def net(a, b):
        return forward(params, (a, b), buffers)[0]

    rng = np.random.default_rng(0)
    prey, array = rng.uniform(0, 5, (n, 1)), rng.normal(size=(n, 3))
    from petab_sciml.backends.jax import ops

    def invariant(f):
        def g(*args):
            with ops.batch_invariant_jacobians():
                return f(*args)
        return g

    for name, f in (("network", net),
                    ("its Jacobian (as forward sensitivities take it)",
                     invariant(jax.jacrev(net))),
                    ("its Jacobian (plain jax.jacfwd)", jax.jacfwd(net))):
        one, many = jax.jit(f), jax.jit(jax.vmap(f))
        batched = np.asarray(many(jnp.asarray(prey), jnp.asarray(array)))
        single = np.stack([np.asarray(one(jnp.asarray(prey[i]), jnp.asarray(array[i])))
                           for i in range(n)])
        differ = int(np.sum(batched != single))
        scale = np.maximum(np.abs(single), np.finfo(np.float64).tiny)   # zeros agree
        print(f"{name}: jitted alone and under vmap differ in the last bits in {differ} of "
              f"{single.size} values (largest relative difference "
              f"{float(np.max(np.abs(batched - single) / scale)):.1e})")


def agreement(rtol: float) -> None:
    import diffrax
    import jax

    from petab_sciml.testcases import evaluate_problem_case, load_problem_case

    original = diffrax.diffeqsolve

    def counted(*args, **kwargs):
        sol = original(*args, **kwargs)
        jax.debug.print("  accepted/rejected steps {a}/{r}", a=sol.stats["num_accepted_steps"],
                        r=sol.stats["num_rejected_steps"])
        return sol

    case = load_problem_case(case_path())
    diffrax.diffeqsolve = counted
    try:
        evaluations = {}
        sensitivity = "auto"
        for batched in (True, False):
            print(f"rtol = atol = {rtol:g}, {'batched' if batched else 'unbatched'}:",
                  flush=True)
            sim, ev = evaluate_problem_case(case, "jax", cache=False, rtol=rtol, atol=rtol,
                                            batch_experiments=batched,
                                            sensitivity=sensitivity)
            jax.effects_barrier()
            sensitivity = sim.executor.sensitivity
            evaluations[batched] = ev
    finally:
        diffrax.diffeqsolve = original

    def rel(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))

    b, u = evaluations[True], evaluations[False]
    print(f"rtol = atol = {rtol:g} ({sensitivity} sensitivities): batched - unbatched: "
          f"value {rel(b.value, u.value):.1e}, simulations "
          f"{rel(b.simulations, u.simulations):.1e}, gradient "
          f"{rel(b.grad_flat, u.grad_flat):.1e}", flush=True)


def torch_agreement() -> None:
    """PyTorch at the default tolerances: batched against unbatched with the networks'
    own ``torch.nn.Linear`` products (``ordered_products=False``) and with the ordered
    ones that a kinked right-hand side gets by default; steps summed over both
    experiments and seconds per evaluation (first call included)."""
    import time

    from petab_sciml.testcases import evaluate_problem_case, load_problem_case

    case = load_problem_case(case_path())

    def rel(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))

    for sensitivity in ("forward", "autograd"):
        for ordered in (False, None):
            runs = {}
            for batched in (True, False):
                start = time.perf_counter()
                sim, ev = evaluate_problem_case(case, "torch", sensitivity=sensitivity,
                                                batch_experiments=batched,
                                                ordered_products=ordered)
                runs[batched] = (ev, sim.executor.n_steps, time.perf_counter() - start,
                                 sim.executor.ordered_products)
            (b, nb, tb, on), (u, nu, tu, _) = runs[True], runs[False]
            print(f"torch, {sensitivity}, {'ordered' if on else 'torch.nn.Linear'} "
                  f"products: batched - unbatched value {rel(b.value, u.value):.1e}, "
                  f"simulations {rel(b.simulations, u.simulations):.1e}, gradient "
                  f"{rel(b.grad_flat, u.grad_flat):.1e}; steps {nb} / {nu}; "
                  f"{tb:.1f} s / {tu:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtols", type=float, nargs="+", default=[1e-8, 1e-10, 1e-12])
    parser.add_argument("--backend", choices=["jax", "torch"], default="jax")
    args = parser.parse_args()
    if args.backend == "torch":
        torch_agreement()
        return
    network_bits()
    print("steps per experiment as the solves run (the order of the two experiments may "
          "differ between the paths)")
    for rtol in args.rtols:
        agreement(rtol)


if __name__ == "__main__":
    main()

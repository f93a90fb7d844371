"""Why the 5-state problem's batched and unbatched JAX solves differ by ~1e-10 (issue 17:
"agree with the unbatched path to 1e-10 on the scaled problems", not met for it).

    python benchmarks/five_state_batch_roundoff.py

1. Last bits: its right-hand side for one state alone (``jit``) and the same state
   inside a batch (``jit(vmap)``), with every network product in the batch-invariant
   ordered form (``ops.ordered_linear``): rows that differ in any bit, for the network
   alone, for the mass-action part ``concat([x1, (k * x)[:4]]) - k * x`` and for the
   whole right-hand side.  XLA contracts ``a - k * x`` into fused multiply-adds
   differently in the two programs (no XLA option turns contraction off).
2. Conditioning: how far one unit in the last place of the initial state moves the
   simulated states, with the adaptive controller (rtol = atol = 1e-8, the
   problem's) and with fixed steps: the adaptive step sizes follow error estimates
   that are mostly rounding noise on this smooth problem, so a last-bit difference
   moves the solution by ~1e-10, not ~1e-16.
3. The hand-written diffrax solve of 6 experiments, ``vmap`` against ``lax.map``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    import diffrax
    import jax
    import jax.numpy as jnp

    from benchmarks.five_state_gradient_anatomy import five_state_inputs
    from petab_sciml.backends.jax import ops
    from petab_sciml.backends.jax.stage_sums import diffeqsolve

    theta, data = five_state_inputs(6)
    k, p = theta

    def net(x):
        h = jnp.tanh(ops.ordered_linear(x, p["layer1"]["weight"], p["layer1"]["bias"]))
        h = jnp.tanh(ops.ordered_linear(h, p["layer2"]["weight"], p["layer2"]["bias"]))
        return ops.ordered_linear(h, p["layer3"]["weight"], p["layer3"]["bias"])

    def mass_action(x):
        return jnp.concatenate([x[:1], (k * x)[:4]]) - k * x

    def rhs(x):
        return jnp.concatenate([net(x), (k * x)[:4]]) - k * x

    states = jnp.asarray(np.random.default_rng(1).uniform(0.0, 1.0, size=(200, 5)))
    for name, fn in (("network (ordered products)", net), ("mass-action part", mass_action),
                     ("whole right-hand side", rhs)):
        one = jax.jit(fn)
        alone = np.stack([np.asarray(one(x)) for x in states])
        batched = np.asarray(jax.jit(jax.vmap(fn))(states))
        rows = int(np.sum(np.any(alone != batched, axis=1)))
        print(f"{name}: {rows} of {len(states)} rows differ between one state alone and "
              f"in a batch (largest {np.max(np.abs(alone - batched)):.1e})")

    term = diffrax.ODETerm(lambda t, x, args: rhs(x))
    x0, ts = data[0], data[1]

    def solve(x0, ts, dt0=None):
        controller = (diffrax.PIDController(rtol=1e-8, atol=1e-8) if dt0 is None
                      else diffrax.ConstantStepSize())
        return diffeqsolve(term, diffrax.Dopri8(), 0.0, ts[-1], dt0, x0, None,
                           saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller,
                           max_steps=100_000).ys

    ulp = x0[0] * (1 + np.finfo(np.float64).eps)
    for label, dt0 in (("adaptive steps", None), ("fixed steps (dt = 0.01)", 0.01)):
        f = jax.jit(lambda a, b, dt0=dt0: solve(a, b, dt0))
        moved = np.max(np.abs(np.asarray(f(ulp, ts[0])) - np.asarray(f(x0[0], ts[0]))))
        print(f"{label}: x0 one unit in the last place larger moves the states by "
              f"{moved:.1e}")
    batched = np.asarray(jax.jit(jax.vmap(solve))(x0, ts))
    mapped = np.asarray(jax.jit(lambda a, b: jax.lax.map(lambda z: solve(*z), (a, b)))(x0, ts))
    print(f"hand-written diffrax, 6 experiments, vmap - lax.map: "
          f"{np.max(np.abs(batched - mapped)):.1e} (states of size "
          f"{np.max(np.abs(mapped)):.2f})")


if __name__ == "__main__":
    main()

"""Why the 5-state problem's batched and unbatched JAX solves differed (they must agree
to 1e-10), and what fixed it.

    python benchmarks/investigations/five_state_batch_roundoff.py

1. Last bits: its right-hand side for one state alone (``jit``) and the same state
   inside a batch (``jit(vmap)``), with every network product in the batch-invariant
   ordered form (``ops.ordered_linear``): rows that differ in any bit, for the network
   alone, for the mass-action part ``concat([x1, (k * x)[:4]]) - k * x`` and for the
   whole right-hand side.  XLA contracts ``a - k * x`` into fused multiply-adds
   differently in the two programs (no XLA option turns contraction off).
2. Conditioning: how far one unit in the last place of the initial state moves the
   simulated states, with the adaptive controller (rtol = atol = 1e-8, the
   problem's) and with fixed steps.  With diffrax's default growth limit (10x per
   step) the first steps grow by factors computed from error estimates at rounding
   level, so a last-bit difference moves the solution far more than rounding; with 6x
   (DOP853's default, ours for ``dopri8``: ``simulation.steps.MAX_STEP_GROWTH``) that
   growth is capped.
3. The hand-written diffrax solve of 6 experiments, ``vmap`` against ``lax.map``, with
   both growth limits.
4. What batch-invariant forms of the 96 x 96 product cost (``--cost``): per layer, the
   library product against an elementwise product summed over the last axis; and our
   objective + gradient at 1 and 1,000 experiments with that layer in the library
   product (as shipped) and in the ordered form (``ops.ordered_linear``).

    python benchmarks/investigations/five_state_batch_roundoff.py --cost
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> None:
    import diffrax
    import jax
    import jax.numpy as jnp

    from benchmarks.investigations.five_state_gradient_anatomy import five_state_inputs
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
    from petab_sciml.backends.jax.backend import rounded_product

    def mass_action_rounded(x):
        flux = rounded_product(k * x)
        return jnp.concatenate([x[:1], flux[:4]]) - flux

    def library_net(x):
        h = jnp.tanh(ops.linear(x, p["layer1"]["weight"], p["layer1"]["bias"]))
        h = jnp.tanh(ops.linear(h, p["layer2"]["weight"], p["layer2"]["bias"]))
        return ops.linear(h, p["layer3"]["weight"], p["layer3"]["bias"])

    for name, fn in (("network, library 96 x 96 product (as shipped)", library_net),
                     ("network, every product ordered", net),
                     ("mass-action part", mass_action),
                     ("mass-action part, products through rounded_product (as our compiled "
                      "formulas)", mass_action_rounded),
                     ("whole right-hand side", rhs)):
        one = jax.jit(fn)
        alone = np.stack([np.asarray(one(x)) for x in states])
        batched = np.asarray(jax.jit(jax.vmap(fn))(states))
        rows = int(np.sum(np.any(alone != batched, axis=1)))
        print(f"{name}: {rows} of {len(states)} rows differ between one state alone and "
              f"in a batch (largest {np.max(np.abs(alone - batched)):.1e})")

    term = diffrax.ODETerm(lambda t, x, args: rhs(x))
    x0, ts = data[0], data[1]

    def solve(x0, ts, dt0=None, factormax=10.0):
        controller = (diffrax.PIDController(rtol=1e-8, atol=1e-8, factormax=factormax)
                      if dt0 is None else diffrax.ConstantStepSize())
        return diffeqsolve(term, diffrax.Dopri8(), 0.0, ts[-1], dt0, x0, None,
                           saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller,
                           max_steps=100_000).ys

    ulp = x0[0] * (1 + np.finfo(np.float64).eps)
    # diffrax's default step growth (10x per step at most) and ours for dopri8 (6x,
    # simulation.steps.MAX_STEP_GROWTH): with 10 the growth factors of this problem's first steps
    # come from error estimates at rounding level
    for label, dt0, fmax in (("adaptive steps, growth <= 10x", None, 10.0),
                             ("adaptive steps, growth <= 6x (ours)", None, 6.0),
                             ("fixed steps (dt = 0.01)", 0.01, 10.0)):
        f = jax.jit(lambda a, b, dt0=dt0, fmax=fmax: solve(a, b, dt0, fmax))
        moved = np.max(np.abs(np.asarray(f(ulp, ts[0])) - np.asarray(f(x0[0], ts[0]))))
        print(f"{label}: x0 one unit in the last place larger moves the states by "
              f"{moved:.1e}")
    for fmax in (10.0, 6.0):
        one = functools.partial(solve, factormax=fmax)
        batched = np.asarray(jax.jit(jax.vmap(one))(x0, ts))
        mapped = np.asarray(jax.jit(lambda a, b, one=one: jax.lax.map(lambda z: one(*z),
                                                                        (a, b)))(x0, ts))
        print(f"hand-written diffrax, 6 experiments, growth <= {fmax:.0f}x, vmap - lax.map: "
              f"{np.max(np.abs(batched - mapped)):.1e} (states of size "
              f"{np.max(np.abs(mapped)):.2f})")


def cost() -> None:
    import jax
    import jax.numpy as jnp

    from benchmarks.bench_experiments import timed_together
    from benchmarks.investigations.five_state_gradient_anatomy import _best
    from petab_sciml import load_problem
    from petab_sciml.backends.jax import ops
    from tests.support.problems.five_state import write_five_state

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.normal(size=(96, 96)) / 10)
    forms = {"library product": lambda x: ops.linear(x, w),
             "sum(x * W, -1)": lambda x: jnp.sum(x[..., None, :] * w, axis=-1)}
    for rows in (1, 1000):
        x = jnp.asarray(rng.normal(size=(rows, 96)))
        for name, f in forms.items():
            def chain(x, f=f):
                return jax.lax.fori_loop(0, 50, lambda i, h: jnp.tanh(jax.vmap(f)(h)), x)
            fn = jax.jit(chain)
            print(f"{rows} row(s), {name}: "
                  f"{_best(lambda fn=fn, x=x: fn(x).block_until_ready(), 5) / 50 * 1e3:.1f} us "
                  f"per layer", flush=True)
    shipped = ops.takes_ordered_product
    for n in (1, 1000):
        folder = Path(tempfile.mkdtemp())
        sims = {}
        for name, rule in (("library 96 x 96 (shipped)", shipped),
                           ("ordered 96 x 96", lambda n_in, n_w: True)):
            ops.takes_ordered_product = rule      # read when the objective is traced
            try:
                sim = load_problem(write_five_state(folder / name[:7], n),
                                   backend="jax").simulator(cache=False)
                sim.evaluate()
            finally:
                ops.takes_ordered_product = shipped
            sims[name] = sim
        times = timed_together([s.evaluate for s in sims.values()], 5)
        for name, (t_min, t_med) in zip(sims, times):
            print(f"{n} experiment(s), {name}: objective + gradient {t_min:.1f} / "
                  f"{t_med:.1f} ms (min / median)", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cost", action="store_true")
    if parser.parse_args().cost:
        cost()
    else:
        main()

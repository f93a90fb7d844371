"""Where the time of the 5-state problem's gradient goes at 1,000 experiments in JAX
(target: 1,000 experiments cost at most 200x one); the anatomy that led to
``ops.batch_summed_weight_cotangents``.

    python benchmarks/investigations/five_state_gradient_anatomy.py [--sizes 1 1000] [--chunks 50]

The hand-written diffrax objective of ``bench_five_state.py`` (Dopri8, PID controller,
rtol = atol = 1e-8, one ``vmap`` of ``diffeqsolve`` over experiments), timed per size
in one process, min of 3 calls after the first:

1. the objective alone (forward solves only) and objective + gradient;
2. objective + gradient with the gradient of the 96 x 96 hidden weight stopped
   (``lax.stop_gradient``; wrong gradient, for the anatomy only): what the weight
   cotangents of that one layer cost;
3. objective + gradient with the experiments in chunks (``lax.map`` over chunks, ``vmap``
   inside), to see whether the cost is memory traffic (chunks fit in cache) or
   arithmetic;
4. accepted + rejected steps per experiment, and XLA's float64 throughput for the
   network's products alone (``tanh(h @ W.T)``, 96 x 96, in a jitted loop).

Under ``vmap`` the solver's loops have a per-experiment predicate, so every carry of
their reverse pass is per experiment, the cotangent of a weight shared by all
experiments included: each stage adds one 96 x 96 outer product per experiment instead
of one matrix product over the batch.  The forward pass batches well, the reverse pass
does not.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _best(fn, repeats: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def five_state_inputs(n: int):
    """The 5-state problem with ``n`` experiments written to a temporary folder, as JAX
    arrays: ``theta = (rates k1..k5, {layer: {array: value}})`` at the nominal values and
    ``data = (x0 (n, 5), ts (n, N), mask (n, N), y (n, N, 2))`` (padded grids)."""
    import jax
    import jax.numpy as jnp

    from benchmarks.bench_five_state import _data
    from tests.support.problems.five_state import write_five_state

    jax.config.update("jax_enable_x64", True)
    folder = Path(tempfile.mkdtemp())
    write_five_state(folder, n)
    mech, nets, x0, ts, mask, y, _ = _data(folder, n, "jax")
    theta = (jnp.asarray(mech), {layer: {k: jnp.asarray(v) for k, v in arrays.items()}
                                 for layer, arrays in nets.items()})
    return theta, tuple(jnp.asarray(v) for v in (x0, ts, mask, y))


def anatomy(n: int, chunks: list[int]) -> dict[str, float]:
    import diffrax
    import jax
    import jax.numpy as jnp

    from tests.support.problems.five_state import NOISE_SD

    theta, data = five_state_inputs(n)

    def make_rhs(stop_hidden: bool):
        def rhs(t, x, theta):
            k, p = theta
            w2 = p["layer2"]["weight"]
            w2 = jax.lax.stop_gradient(w2) if stop_hidden else w2
            h = jnp.tanh(p["layer1"]["weight"] @ x + p["layer1"]["bias"])
            h = jnp.tanh(w2 @ h + p["layer2"]["bias"])
            u = (p["layer3"]["weight"] @ h + p["layer3"]["bias"])[0]
            flux = k * x
            return jnp.concatenate([u[None], flux[:4]]) - flux
        return diffrax.ODETerm(rhs)

    def solve(term, theta, x0, ts):
        sol = diffrax.diffeqsolve(term, diffrax.Dopri8(), 0.0, ts[-1], None, x0, theta,
                                  saveat=diffrax.SaveAt(ts=ts),
                                  stepsize_controller=diffrax.PIDController(rtol=1e-8,
                                                                            atol=1e-8),
                                  max_steps=100_000)
        return sol.ys, sol.stats["num_steps"]

    def nll(theta, data, term, chunk=None):
        x0, ts, mask, y = data
        batched = jax.vmap(lambda a, b: solve(term, theta, a, b)[0])
        if chunk is None:
            sim = batched(x0, ts)
        else:
            sim = jax.lax.map(lambda ab: batched(*ab),
                              (x0.reshape(n // chunk, chunk, -1),
                               ts.reshape(n // chunk, chunk, -1)))
            sim = sim.reshape(n, ts.shape[1], -1)
        r = (y - sim[:, :, jnp.asarray([0, 4])]) / NOISE_SD
        return jnp.sum(0.5 * r ** 2 * mask[:, :, None])

    plain, stopped = make_rhs(False), make_rhs(True)
    out = {}
    f = jax.jit(lambda th, d: nll(th, d, plain))
    out["objective"] = _best(lambda: jax.block_until_ready(f(theta, data)))
    g = jax.jit(jax.value_and_grad(lambda th, d: nll(th, d, plain)))
    out["objective + gradient"] = _best(lambda: jax.block_until_ready(g(theta, data)))
    g = jax.jit(jax.value_and_grad(lambda th, d: nll(th, d, stopped)))
    out["objective + gradient, hidden weight's gradient stopped"] = _best(
        lambda: jax.block_until_ready(g(theta, data)))
    for c in chunks:
        if 1 < c < n and n % c == 0:
            g = jax.jit(jax.value_and_grad(lambda th, d, c=c: nll(th, d, plain, c)))
            out[f"objective + gradient, chunks of {c}"] = _best(
                lambda g=g: jax.block_until_ready(g(theta, data)))
    steps = jax.jit(jax.vmap(lambda a, b: solve(plain, theta, a, b)[1]))(*data[:2])
    out["steps per experiment, mean"] = float(jnp.mean(steps))
    out["steps per experiment, max"] = float(jnp.max(steps))
    return out


def throughput(rows: int, repeats: int = 200) -> float:
    """GFLOP/s of ``tanh(h @ W.T)`` for ``rows`` rows, W 96 x 96, float64."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    w = jnp.asarray(np.random.default_rng(0).normal(size=(96, 96)) / 10)
    h = jnp.asarray(np.random.default_rng(1).normal(size=(rows, 96)))
    f = jax.jit(lambda h: jax.lax.fori_loop(0, repeats, lambda i, a: jnp.tanh(a @ w.T), h))
    ms = _best(lambda: f(h).block_until_ready(), 5)
    return 2 * rows * 96 * 96 * repeats / (ms * 1e-3) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 1000])
    parser.add_argument("--chunks", type=int, nargs="*", default=[50])
    args = parser.parse_args()
    results = {n: anatomy(n, args.chunks) for n in args.sizes}
    first = args.sizes[0]
    for n, out in results.items():
        for what, value in out.items():
            ratio = (f"  ({value / results[first][what]:.0f}x {first} experiment(s))"
                     if what in results[first] and "steps" not in what and n != first
                     else "")
            unit = "" if "steps" in what else " ms"
            print(f"{n:5d} experiments, {what}: {value:.1f}{unit}{ratio}")
    for rows in (1, 1000):
        print(f"XLA tanh(h @ W.T), W 96 x 96, {rows} row(s): {throughput(rows):.1f} GFLOP/s")


if __name__ == "__main__":
    main()

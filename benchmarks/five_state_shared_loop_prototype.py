"""Prototype, not the solver we ship: the 5-state problem's JAX objective + gradient
with one loop for all experiments (issue 17, the 200x target at 1,000 experiments).

    python benchmarks/five_state_shared_loop_prototype.py

``five_state_gradient_anatomy.py`` found that under ``vmap`` diffrax's reverse pass
carries per-experiment cotangents of the shared weights (a 96 x 96 outer product per
experiment and stage).  Here the states of every experiment are one ``(E, 5)`` array
in a single loop whose predicate is shared by the batch; each row keeps its own step
size and error control (Dopri8 from diffrax's tableau, an I-controller, steps shortened
to land on the row's output times), the network runs on the batch as matrix products,
and the weight cotangents are therefore products over the batch.  The loop is a
``lax.scan`` of a fixed length (the iterations a forward run needed, plus one), so
reverse mode stores every iteration's residuals and recomputes nothing: an optimistic
bound for such a solver, without dense output, pre-equilibration or any of the
executor's other paths.  Prints forward and forward + gradient ms at 1 and 1,000
experiments (min of 5 after a first call) and their ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RTOL = ATOL = 1e-8


def rhs(x, theta):
    """The 5-state right-hand side for a batch ``x`` ``(E, 5)``."""
    import jax.numpy as jnp

    k, p = theta
    h = jnp.tanh(x @ p["layer1"]["weight"].T + p["layer1"]["bias"])
    h = jnp.tanh(h @ p["layer2"]["weight"].T + p["layer2"]["bias"])
    u = h @ p["layer3"]["weight"].T + p["layer3"]["bias"]
    flux = k * x
    return jnp.concatenate([u, flux[:, :4]], 1) - flux


def solve(theta, x0, ts, n_iter: int):
    """States at ``ts`` ``(E, N)`` (each row sorted, > 0) from ``x0`` at t = 0:
    ``(ys (E, N, 5), outputs filled per row, whether any row moved per iteration)``."""
    import jax
    import jax.numpy as jnp
    from diffrax._solver.dopri8 import _dopri8_tableau as tab

    a = [np.asarray(r, np.float64) for r in tab.a_lower]
    b, b_err = np.asarray(tab.b_sol, np.float64), np.asarray(tab.b_error, np.float64)
    E, N = ts.shape
    rows, slots = jnp.arange(E), jnp.arange(N)

    def combine(weights, ks):
        return sum(w * k for w, k in zip(weights, ks) if w != 0)

    def step(carry, _):
        t, h, y, f, k, ys = carry
        active = k < N
        target = ts[rows, jnp.minimum(k, N - 1)]
        gap = jnp.where(active, target - t, 0.0)
        clipped = gap <= h
        hh = jnp.where(clipped, gap, h)[:, None]
        ks = [f]
        for row in a:
            ks.append(rhs(y + hh * combine(row, ks), theta))
        y1 = y + hh * combine(b, ks)
        err = hh * combine(b_err, ks)
        scale = ATOL + RTOL * jnp.maximum(jnp.abs(y), jnp.abs(y1))
        ratio = jax.lax.stop_gradient(jnp.sqrt(jnp.mean((err / scale) ** 2, 1)))
        accept = active & (ratio <= 1.0)
        factor = jnp.clip(0.9 * jnp.maximum(ratio, 1e-10) ** (-1 / 8), 0.2, 10.0)
        h_new = jax.lax.stop_gradient(jnp.where(accept & clipped,
                                                jnp.maximum(h, hh[:, 0] * factor),
                                                hh[:, 0] * factor))
        hit = accept & clipped
        f = jnp.where(accept[:, None], rhs(y1, theta), f)
        y = jnp.where(accept[:, None], y1, y)
        at = (hit[:, None] & (slots[None] == k[:, None]))[:, :, None]
        ys = jnp.where(at, y1[:, None, :], ys)
        t = jnp.where(accept, jnp.where(clipped, target, t + hh[:, 0]), t)
        return (t, jnp.where(active, h_new, h), y, f, k + hit.astype(k.dtype), ys), \
            active.any()

    init = (jnp.zeros(E), jnp.full(E, 0.05), x0, rhs(x0, theta), jnp.zeros(E, jnp.int32),
            jnp.zeros((E, N, x0.shape[1])))
    (_, _, _, _, k, ys), moved = jax.lax.scan(step, init, None, length=n_iter)
    return ys, k, moved


def measure(n: int) -> tuple[float, float]:
    import jax
    import jax.numpy as jnp

    from benchmarks.five_state_gradient_anatomy import _best, five_state_inputs
    from tests.problems.five_state import NOISE_SD

    theta, data = five_state_inputs(n)
    n_times = data[1].shape[1]
    _, filled, moved = jax.jit(solve, static_argnums=3)(theta, data[0], data[1], 64)
    if int(np.asarray(filled).min()) != n_times:
        raise SystemExit("64 iterations were not enough")
    n_iter = int(np.asarray(moved).sum()) + 1

    def nll(theta, data):
        x0, ts, mask, y = data
        sim = solve(theta, x0, ts, n_iter)[0][:, :, jnp.asarray([0, 4])]
        r = (y - sim) / NOISE_SD
        return jnp.sum(0.5 * r ** 2 * mask[:, :, None])

    objective, both = jax.jit(nll), jax.jit(jax.value_and_grad(nll))
    forward = _best(lambda: jax.block_until_ready(objective(theta, data)), 5)
    gradient = _best(lambda: jax.block_until_ready(both(theta, data)), 5)
    print(f"{n} experiments: {n_iter} loop iterations, objective {forward:.1f} ms, "
          f"objective + gradient {gradient:.1f} ms", flush=True)
    return forward, gradient


def main() -> None:
    one, many = measure(1), measure(1000)
    print(f"1,000 / 1: objective {many[0] / one[0]:.0f}x, objective + gradient "
          f"{many[1] / one[1]:.0f}x")


if __name__ == "__main__":
    main()

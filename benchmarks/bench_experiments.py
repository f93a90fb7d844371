"""Objective + gradient against the number of experiments (JAX): the bundled
Lotka-Volterra UDE (``examples/lotka_volterra_ude``) scaled to 1, 10, 100 and 1,000
experiments (differing initial conditions and time grids, ``tests/support/problems/scaled_lv.py``)
against a hand-written diffrax baseline with the same solver (``Dopri8``, PID controller,
``rtol = atol = 1e-8``): one ``vmap`` over experiments of ``diffeqsolve``, times padded
and masked, Gaussian negative log-likelihood, ``jax.value_and_grad`` (diffrax's default
``RecursiveCheckpointAdjoint``) with respect to alpha, beta, delta and every network
array.

    python benchmarks/bench_experiments.py [--sizes 1 10 100 1000] [--repeats 7]
                                           [--unbatched 1 10 100] [--cores 1]

Prints min / median ms per objective + gradient for ours and the baseline, ours / one
experiment, ours / baseline, and the largest relative difference between the two
objective values and gradients (the same computation: it should be ~1e-9 or below).
``--unbatched`` also times our ``batch_experiments=False`` path at those sizes.
JAX gets one CPU device per core (the backend's default, ``backends/jax/devices.py``):
ours splits large batches of experiments over them; the hand-written baseline stays
on one device, as written.  ``--cores N`` gives JAX N CPU devices instead
(``use_cpu_cores(N)``; ``--cores 1``: one device, nothing split).
Everything is measured in one run (each size in a fresh process), ours and the baseline
called in turn; CPU load from other processes inflates every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(fn, repeats: int) -> tuple[float, float]:
    return timed_together([fn], repeats)[0]


def timed_together(fns, repeats: int) -> list[tuple[float, float]]:
    """(min, median) ms of each function, called in turn ``repeats`` times (the order
    alternating): load from other processes then hits all of them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        order = list(zip(fns, times))
        for fn, out in order if r % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return [(min(t) * 1e3, statistics.median(t) * 1e3) for t in times]


def baseline(problem_dir: Path, n: int):
    """The hand-written objective + gradient of the scaled problem: (fn, args, theta).
    ``fn(theta, data) -> (value, grad)``; ``theta = (alpha, beta, delta, net arrays)``."""
    import jax
    import jax.numpy as jnp

    from petab_sciml import load_problem
    from tests.support.problems.scaled_lv import initial_condition, time_grid

    problem = load_problem(problem_dir / "problem.yaml", backend="jax")
    plan = problem.simulator().plan
    nets = plan.unpack(plan.w0)["nets"]["net1"]
    theta = ({k: jnp.asarray(v) for k, v in zip(("alpha", "beta", "delta"),
                                                  plan.unpack(plan.w0)["mech"])},
             {layer: {k: jnp.asarray(v) for k, v in arrays.items()}
              for layer, arrays in nets.items()})
    grids = [time_grid(e) for e in range(n)]
    width = max(len(g) for g in grids)
    ts = np.zeros((n, width))
    mask = np.zeros((n, width))
    y = np.zeros((n, width, 2))
    rows = plan.measurements.rows
    values = {(r["experimentId"], r["observableId"], float(r["time"])): float(r["measurement"])
              for r in rows}
    for e, g in enumerate(grids):
        ts[e] = g[-1]
        ts[e, : len(g)] = g
        mask[e, : len(g)] = 1.0
        for j, t in enumerate(g):
            y[e, j] = values[(f"e{e}", "prey_obs", float(t))], \
                values[(f"e{e}", "predator_obs", float(t))]
    x0 = np.array([initial_condition(e) for e in range(n)])
    data = tuple(jnp.asarray(a) for a in (x0, ts, mask, y))
    sigma = 0.05

    def net(p, x):
        h = jnp.tanh(p["layer1"]["weight"] @ x + p["layer1"]["bias"])
        h = jnp.tanh(p["layer2"]["weight"] @ h + p["layer2"]["bias"])
        # the example's output is a softplus (a positive rate), PyTorch's default beta 1
        return jax.nn.softplus(p["layer3"]["weight"] @ h + p["layer3"]["bias"])[0]

    def rhs(t, x, theta):
        mech, p = theta
        prey, pred = x[0], x[1]
        gamma = net(p, x)
        return jnp.stack([mech["alpha"] * prey - mech["beta"] * prey * pred,
                          gamma * prey * pred - mech["delta"] * pred])

    return hand_written_value_and_grad(rhs, sigma), theta, data


def hand_written_value_and_grad(rhs, sigma: float, observed=None):
    """The hand-written baseline's jitted ``value_and_grad`` of the normal negative
    log-likelihood: ``rhs(t, x, theta)`` solved by diffrax (Dopri8, PID, rtol = atol =
    1e-8, steps growing at most 6x per step as ours: ``simulation.steps.MAX_STEP_GROWTH``) per
    experiment under one ``vmap``, on padded time grids (``mask`` 0 on padding),
    the states at positions ``observed`` (all when None) compared with the data.
    Called as ``fn(theta, (x0, ts, mask, y))``."""
    import diffrax
    import jax
    import jax.numpy as jnp

    term = diffrax.ODETerm(rhs)
    solver = diffrax.Dopri8()
    controller = diffrax.PIDController(rtol=1e-8, atol=1e-8, factormax=6.0)

    def one(theta, x0, ts):
        sol = diffrax.diffeqsolve(term, solver, 0.0, ts[-1], None, x0, theta,
                                  saveat=diffrax.SaveAt(ts=ts),
                                  stepsize_controller=controller, max_steps=100_000)
        return sol.ys

    def nll(theta, data):
        x0, ts, mask, y = data
        sim = jax.vmap(one, in_axes=(None, 0, 0))(theta, x0, ts)
        if observed is not None:
            sim = sim[:, :, jnp.asarray(observed)]
        r = (y - sim) / sigma
        terms = 0.5 * r ** 2 + jnp.log(jnp.sqrt(2 * jnp.pi) * sigma)
        return jnp.sum(terms * mask[:, :, None])

    return jax.jit(jax.value_and_grad(nll))


def measure(n: int, repeats: int, unbatched: bool) -> dict:
    """One size: ours and the baseline, called in turn (the order alternating)."""
    import jax

    from petab_sciml import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv

    with tempfile.TemporaryDirectory() as tmp:
        path = write_scaled_lv(Path(tmp), n)
        problem = load_problem(path, backend="jax")
        sim = problem.simulator(cache=False)
        t = time.perf_counter()
        ours = sim.evaluate()
        first = time.perf_counter() - t
        fn, theta, data = baseline(Path(tmp), n)
        value, grad = jax.block_until_ready(fn(theta, data))
        ours_ms, base_ms = timed_together(
            [sim.evaluate, lambda: jax.block_until_ready(fn(theta, data))], repeats)
        # same objective: compare values and gradients (mechanistic + network)
        g_ours = ours.grad
        diffs = [abs(float(value) - ours.value) / abs(float(value))]
        for k in ("alpha", "beta", "delta"):
            i = sim.plan.mech_ids.index(k)
            diffs.append(abs(float(grad[0][k]) - g_ours["mech"][i])
                         / max(1.0, abs(float(grad[0][k]))))
        for layer, arrays in grad[1].items():
            for k, v in arrays.items():
                ref = np.asarray(v)
                diffs.append(float(np.max(np.abs(ref - g_ours["nets"]["net1"][layer][k])
                                          / np.maximum(1.0, np.abs(ref)))))
        unb = None
        if unbatched:
            usim = problem.simulator(cache=False, batch_experiments=False,
                                     sensitivity=sim.executor.sensitivity)
            usim.evaluate()
            unb = timed(usim.evaluate, max(3, repeats // 2))
        return {"ours": ours_ms, "base": base_ms, "diff": max(diffs),
                "sensitivity": sim.executor.sensitivity, "first": first, "unbatched": unb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--unbatched", type=int, nargs="*", default=[])
    parser.add_argument("--cores", type=int, default=0,
                        help="JAX CPU devices (0: backend default, one per core; 1: no split)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        if args.cores:
            from petab_sciml.backends.jax.devices import use_cpu_cores

            use_cpu_cores(args.cores)
        print(json.dumps(measure(args.worker, args.repeats, args.worker in args.unbatched)))
        return
    # each size in a fresh process: no compiled programs or memory of the other sizes
    rows = []
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--worker", str(n), "--repeats", str(args.repeats),
               "--cores", str(args.cores), "--unbatched", *map(str, args.unbatched)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append((n, r["ours"], r["base"], r["diff"], r["sensitivity"], r["first"],
                     r["unbatched"]))
        print(f"{n} experiments: ours {r['ours'][0]:.1f} / {r['ours'][1]:.1f} ms "
              f"({r['sensitivity']}, first call {r['first']:.1f} s), baseline "
              f"{r['base'][0]:.1f} / {r['base'][1]:.1f} ms, max rel diff {r['diff']:.1e}",
              flush=True)
    one = next((r[1][0] for r in rows if r[0] == 1), None)
    one_base = next((r[2][0] for r in rows if r[0] == 1), None)
    print()
    print("| experiments | ours min / median ms | baseline min / median ms | ours / one "
          "experiment (min) | baseline / one (min) | ours / baseline (min, median) | "
          "gradient | value+grad rel diff | unbatched min / median ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, o, b, d, sens, _, unb in rows:
        ratio_one = f"{o[0] / one:.1f}x" if one else "-"
        ratio_base1 = f"{b[0] / one_base:.1f}x" if one_base else "-"
        unb_text = f"{unb[0]:.1f} / {unb[1]:.1f}" if unb else "-"
        print(f"| {n} | {o[0]:.1f} / {o[1]:.1f} | {b[0]:.1f} / {b[1]:.1f} | {ratio_one} | "
              f"{ratio_base1} | {o[0] / b[0]:.2f}x, {o[1] / b[1]:.2f}x | {sens} | {d:.1e} | "
              f"{unb_text} |")


if __name__ == "__main__":
    main()

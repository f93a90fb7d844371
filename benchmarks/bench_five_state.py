"""Many experiments with a large network inside the ODE, in both backends: a 5-state
UDE whose inflow is an MLP 5-96-96-1 of the states (9,985 network parameters plus 5
rates, ``tests/support/problems/five_state.py``), scaled to 1-1,000 experiments (own initial
condition and time grid each).  Objective + gradient with respect to every parameter,
float64, ``dopri8``, ``rtol = atol = 1e-8``.

* JAX: ours (``Simulator.evaluate``; ``auto`` picks reverse mode here) against a
  hand-written diffrax objective: one ``vmap`` over experiments of ``diffeqsolve``
  (Dopri8, PID controller), padded and masked times, ``jax.value_and_grad``.
* PyTorch: ours with ``sensitivity="autograd"`` (experiments solved as one batched solve,
  back-propagation through the steps; forward sensitivities would carry 5 x 9,990
  sensitivities per experiment) against a hand-written torchdiffeq objective: the states
  of every experiment as one ``(E, 5)`` tensor in one ``odeint`` (dopri8, one step-size
  controller for the whole batch) on the union of the time grids, back-propagation
  through its steps.

    python benchmarks/bench_five_state.py [--sizes 1 10 100 1000] [--repeats 5]
                                          [--backends jax torch] [--cores 1]

JAX gets one CPU device per core (the backend's default, ``backends/jax/devices.py``):
ours splits large batches of experiments over them; the hand-written baseline stays
on one device, as written.  ``--cores N`` gives JAX N CPU devices instead
(``use_cpu_cores(N)``; ``--cores 1``: one device, nothing split).

Each size and backend runs in a fresh process; ours and the baseline are called in
turn (order alternating).  Prints min / median ms, ours / one experiment, baseline /
one experiment, ours / baseline and the largest relative difference between ours and
the baseline (value and gradient: same problem, different step sequences, so ~1e-6).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_experiments import (  # noqa: E402
    hand_written_value_and_grad,
    timed_together,
)


def _data(problem_dir: Path, n: int, backend: str):
    """Nominal parameters and padded data shared by both baselines: (mech rates in
    k1..k5 order, network arrays, x0 (n, 5), ts (n, N), mask (n, N), y (n, N, 2), plan)."""
    from petab_sciml import load_problem
    from tests.support.problems.five_state import initial_condition, time_grid

    plan = load_problem(problem_dir / "problem.yaml", backend=backend).simulator().plan
    unpacked = plan.unpack(plan.w0)
    mech = np.array([unpacked["mech"][plan.mech_ids.index(f"k{i}")] for i in range(1, 6)])
    nets = unpacked["nets"]["net1"]
    grids = [time_grid(e) for e in range(n)]
    width = max(len(g) for g in grids)
    ts, mask, y = np.zeros((n, width)), np.zeros((n, width)), np.zeros((n, width, 2))
    values = {(r["experimentId"], r["observableId"], float(r["time"])): float(r["measurement"])
              for r in plan.measurements.rows}
    for e, g in enumerate(grids):
        ts[e] = g[-1]
        ts[e, : len(g)] = g
        mask[e, : len(g)] = 1.0
        for j, t in enumerate(g):
            y[e, j] = values[(f"e{e}", "x1_obs", float(t))], values[(f"e{e}", "x5_obs",
                                                                       float(t))]
    x0 = np.array([[*initial_condition(e), 0.1, 0.1, 0.1] for e in range(n)])
    return mech, nets, x0, ts, mask, y, plan


def baseline_jax(problem_dir: Path, n: int):
    """Hand-written diffrax objective + gradient: ``(fn, theta, data)``."""
    import jax
    import jax.numpy as jnp

    from tests.support.problems.five_state import NOISE_SD

    mech, nets, x0, ts, mask, y, _ = _data(problem_dir, n, "jax")
    theta = (jnp.asarray(mech), {layer: {k: jnp.asarray(v) for k, v in arrays.items()}
                                 for layer, arrays in nets.items()})
    data = tuple(jnp.asarray(a) for a in (x0, ts, mask, y))

    def rhs(t, x, theta):
        k, p = theta
        h = jnp.tanh(p["layer1"]["weight"] @ x + p["layer1"]["bias"])
        h = jnp.tanh(p["layer2"]["weight"] @ h + p["layer2"]["bias"])
        u = (p["layer3"]["weight"] @ h + p["layer3"]["bias"])[0]
        flux = k * x
        inflow = jnp.concatenate([u[None], flux[:4]])
        return inflow - flux

    fn = hand_written_value_and_grad(rhs, NOISE_SD, observed=(0, 4))

    def call():
        value, grad = jax.block_until_ready(fn(theta, data))
        return float(value), np.asarray(grad[0]), {
            layer: {k: np.asarray(v) for k, v in arrays.items()}
            for layer, arrays in grad[1].items()}

    return call


def baseline_torch(problem_dir: Path, n: int):
    """Hand-written torchdiffeq objective + gradient (one ``odeint`` of all experiments
    as an ``(E, 5)`` state on the union of their time grids)."""
    import torch
    import torchdiffeq

    from tests.support.problems.five_state import NOISE_SD

    mech, nets, x0, ts, mask, y, _ = _data(problem_dir, n, "torch")
    as_t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    k = as_t(mech).requires_grad_(True)
    layers = {layer: {name: as_t(v).requires_grad_(True) for name, v in arrays.items()}
              for layer, arrays in nets.items()}
    grid = np.unique(np.concatenate([[0.0], ts.ravel()]))
    where = torch.as_tensor(np.searchsorted(grid, ts))
    rows = torch.arange(n)[:, None]
    grid_t, x0_t, mask_t, y_t = as_t(grid), as_t(x0), as_t(mask), as_t(y)

    def rhs(t, x):
        p = layers
        h = torch.tanh(x @ p["layer1"]["weight"].T + p["layer1"]["bias"])
        h = torch.tanh(h @ p["layer2"]["weight"].T + p["layer2"]["bias"])
        u = h @ p["layer3"]["weight"].T + p["layer3"]["bias"]
        flux = k * x
        return torch.cat([u, flux[:, :4]], 1) - flux

    params = [k] + [v for arrays in layers.values() for v in arrays.values()]

    def call():
        sol = torchdiffeq.odeint(rhs, x0_t, grid_t, method="dopri8", rtol=1e-8, atol=1e-8)
        sim = sol.permute(1, 0, 2)[rows, where][:, :, [0, 4]]
        r = (y_t - sim) / NOISE_SD
        terms = 0.5 * r ** 2 + math.log(math.sqrt(2 * math.pi) * NOISE_SD)
        value = torch.sum(terms * mask_t[:, :, None])
        grads = torch.autograd.grad(value, params)
        out, i = {}, 1
        for layer, arrays in layers.items():
            out[layer] = {}
            for name in arrays:
                out[layer][name] = grads[i].numpy()
                i += 1
        return float(value), grads[0].numpy(), out

    return call


def measure(n: int, backend: str, repeats: int) -> dict:
    import torch

    from petab_sciml import load_problem
    from tests.support.problems.five_state import write_five_state

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_five_state(Path(tmp), n)
        problem = load_problem(path, backend=backend)
        options = {"cache": False} if backend == "jax" else {"sensitivity": "autograd"}
        sim = problem.simulator(**options)
        t = time.perf_counter()
        ours = sim.evaluate()
        first = time.perf_counter() - t
        base = (baseline_jax if backend == "jax" else baseline_torch)(Path(tmp), n)
        value, g_mech, g_nets = base()
        ours_ms, base_ms = timed_together([sim.evaluate, base], repeats)
        diffs = [abs(value - ours.value) / abs(value)]
        for i in range(5):
            j = sim.plan.mech_ids.index(f"k{i + 1}")
            diffs.append(abs(g_mech[i] - ours.grad["mech"][j]) / max(1.0, abs(g_mech[i])))
        for layer, arrays in g_nets.items():
            for name, ref in arrays.items():
                got = ours.grad["nets"]["net1"][layer][name]
                diffs.append(float(np.max(np.abs(ref - got) / np.maximum(1.0, np.abs(ref)))))
        mode = getattr(sim.executor, "sensitivity", None) or sim.executor.options.sensitivity
        batches = [len(e) for _, e, *_ in getattr(sim.executor, "batches", [])]
        return {"ours": ours_ms, "base": base_ms, "diff": max(diffs), "first": first,
                "mode": mode, "batches": batches, "n_free": int(sim.plan.n_free)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["jax", "torch"])
    parser.add_argument("--cores", type=int, default=0,
                        help="JAX CPU devices (0: backend default, one per core; 1: no split)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        n, backend = int(args.worker[0]), args.worker[1]
        if args.cores and backend == "jax":
            from petab_sciml.backends.jax.devices import use_cpu_cores

            use_cpu_cores(args.cores)
        print(json.dumps(measure(n, backend, args.repeats)))
        return
    rows = []
    for backend in args.backends:
        for n in args.sizes:
            cmd = [sys.executable, __file__, "--worker", str(n), backend, "--repeats",
                   str(args.repeats), "--cores", str(args.cores)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            rows.append((backend, n, r))
            print(f"{backend} {n} experiments ({r['n_free']} parameters, {r['mode']}, "
                  f"batches {r['batches']}): ours {r['ours'][0]:.1f} / {r['ours'][1]:.1f} ms "
                  f"(first call {r['first']:.1f} s), baseline {r['base'][0]:.1f} / "
                  f"{r['base'][1]:.1f} ms, max rel diff {r['diff']:.1e}", flush=True)
    print()
    print("| backend | experiments | ours min / median ms | baseline min / median ms | "
          "ours / one experiment (min) | baseline / one (min) | ours / baseline (min, "
          "median) | gradient | value+grad rel diff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for backend, n, r in rows:
        one = next((q for b, m, q in rows if b == backend and m == 1), None)
        o, b = r["ours"], r["base"]
        ratio_one = f"{o[0] / one['ours'][0]:.1f}x" if one else "-"
        ratio_base1 = f"{b[0] / one['base'][0]:.1f}x" if one else "-"
        print(f"| {backend} | {n} | {o[0]:.1f} / {o[1]:.1f} | {b[0]:.1f} / {b[1]:.1f} | "
              f"{ratio_one} | {ratio_base1} | {o[0] / b[0]:.2f}x, {o[1] / b[1]:.2f}x | "
              f"{r['mode']} | {r['diff']:.1e} |")


if __name__ == "__main__":
    main()

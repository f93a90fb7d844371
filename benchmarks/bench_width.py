"""Large networks inside the ODE: objective + gradient against a hand-written
diffrax solve of the same dynamics, as the network widens.

    python benchmarks/bench_width.py [--widths 5 64 512 2048] [--modes forward reverse]
                                     [--evals 10] [--json]
    python benchmarks/bench_width.py --products [--widths 64 512 2048] [--rounds 20]

Suite case 001 (Lotka-Volterra, a 2-W-W-1 tanh network in the right-hand side) is written
to a temporary directory with the hidden width ``W`` (5: the suite's own network, 54
parameters with the mechanistic ones; 64: 4.4k; 512: 265k; 2048: 4.2M).  The suite's
network sits in the first five hidden units and the other units add a small random
term, so the dynamics (and the solver's steps) stay close to the suite case's at every
width.

Per width and sensitivity mode, one fresh process measures:

* ``ours``: ``load_problem(...).simulator(sensitivity=mode).value_and_grad(p)`` (the
  numpy API, JAX backend, float64, ``dopri8``, rtol = atol = 1e-8);
* ``hand``: the same objective written by hand: ``W @ h`` network, ``diffrax.Dopri8``
  with the same ``PIDController`` and ``SaveAt``; ``reverse``: ``jax.value_and_grad``
  through ``RecursiveCheckpointAdjoint`` with the same checkpoints as ours;
  ``forward``: the forward-sensitivity system ``dS/dt = J_x S + J_p`` (Jacobian from
  ``jax.jacrev``) integrated with the states in one solve, error control on both.

``first call``: the first evaluation (tracing, compilation, the run), ours first, so the
hand-written one profits from anything already warm; ``per eval``: the minimum over at
least ``--evals`` evaluations (a fifth of them at width 2048) and at least 2 s of each
variant, ours and hand-written alternating so that all see the same machine load: ours
through ``Simulator.value_and_grad`` (numpy parameters in, numpy gradient out) and our
compiled objective alone (JAX arrays in and out, as the hand-written one), the
hand-written one jitted with XLA's default options and with our options; the ratios are
over the faster hand-written variant.  ``peak``: the process's peak resident memory.
Objective values and gradients of ours and the hand-written one are compared (they
compute the same thing).  ``--checkpoints N``: reverse mode with N checkpoints (ours and
hand-written) instead of diffrax's default.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from timing import best_of  # noqa: E402

from tests.support.problems.widened import write_widened_problem  # noqa: E402

WIDTHS = (5, 64, 512, 2048)
MODES = ("forward", "reverse")


def suite_case_dir() -> Path:
    from petab_sciml.testcases import suite_problem

    return suite_problem("001").parent


# ----------------------------------------------------------------------------- by hand
def hand_written(arrays, mech, mode: str, checkpoints: int | None, max_steps: int):
    """``(value_and_grad, argument)`` of the objective written directly in JAX (not yet
    jitted; the caller jits it)."""
    import diffrax
    import jax
    import jax.numpy as jnp

    data = np.loadtxt(suite_case_dir() / "measurements.tsv", skiprows=1, usecols=(2, 3))
    observable = np.genfromtxt(suite_case_dir() / "measurements.tsv", skip_header=1,
                               usecols=0, dtype=str)
    ts = jnp.asarray(np.unique(data[:, 1]))
    prey = jnp.asarray(data[observable == "prey_o", 0])
    predator = jnp.asarray(data[observable == "predator_o", 0])
    x0 = jnp.asarray([0.44249296, 4.6280594])
    sigma = 0.05
    names = [(layer, name) for layer in ("layer1", "layer2", "layer3")
             for name in ("weight", "bias")]
    # p = ((alpha, beta, delta), network arrays in PyTorch layout): a pytree, so that
    # neither the solve nor its gradient slices a flat vector
    p0 = (jnp.asarray(mech), [jnp.asarray(arrays[layer][name]) for layer, name in names])

    def field(t, x, p):
        (alpha, beta, delta), w = p[0], p[1]
        h = jnp.tanh(w[0] @ x + w[1])
        h = jnp.tanh(w[2] @ h + w[3])
        gamma = (w[4] @ h + w[5])[0]
        return jnp.stack([alpha * x[0] - beta * x[0] * x[1], gamma - delta * x[1]])

    controller = diffrax.PIDController(rtol=1e-8, atol=1e-8, factormax=6.0)  # as ours
    solver = diffrax.Dopri8()

    def nll(xs):
        r = jnp.concatenate([(xs[:, 0] - prey) / sigma, (xs[:, 1] - predator) / sigma])
        return 0.5 * jnp.sum(r * r) + r.size * np.log(np.sqrt(2 * np.pi) * sigma)

    def flat(tree):
        return jnp.concatenate([leaf.reshape(-1) for leaf in jax.tree_util.tree_leaves(tree)])

    if mode == "reverse":
        def objective(p):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(field), solver, 0.0, ts[-1], None, x0, p,
                saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller,
                max_steps=max_steps,
                adjoint=diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints))
            return nll(sol.ys)

        def value_and_grad(p):
            value, grad = jax.value_and_grad(objective)(p)
            return value, flat(grad)

        return value_and_grad, p0

    # forward sensitivities, one (n_x, *shape) block per parameter array
    def aug(t, y, p):
        x, s = y
        jx, jp = jax.jacrev(field, argnums=(1, 2))(t, x, p)
        ds = jax.tree_util.tree_map(
            lambda sk, jk: jnp.tensordot(jx, sk, axes=1) + jk, s, jp)
        return field(t, x, p), ds

    def value_and_grad(p):
        s0 = jax.tree_util.tree_map(lambda a: jnp.zeros((2,) + a.shape, a.dtype), p)
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(aug), solver, 0.0, ts[-1], None, (x0, s0), p,
            saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller,
            max_steps=max_steps)
        xs, s = sol.ys
        value, ct = jax.value_and_grad(nll)(xs)
        grad = jax.tree_util.tree_map(
            lambda sk: jnp.tensordot(ct, sk, axes=((0, 1), (0, 1))), s)
        return value, flat(grad)

    return value_and_grad, p0


# ----------------------------------------------------------------------------- products
def jax_products(widths, batches, rounds: int) -> list[dict]:
    """Forward and gradient of ``sum(tanh(L2(tanh(L1(x)))))`` (two ``width``-wide
    layers) with every product form, jitted with the objective's XLA options."""
    import jax
    import jax.numpy as jnp

    from petab_sciml.backends.jax import ops
    from petab_sciml.backends.jax.model import check_dtype
    from petab_sciml.backends.jax.xla_options import LARGE_COMPILER_OPTIONS

    check_dtype("float64")
    forms = {
        "x @ W.T": lambda x, w: jnp.matmul(x, w.T),
        "ops.linear": ops.linear,
        "W @ x": lambda x, w: jnp.moveaxis(
            jax.lax.dot_general(w, x, (((1,), (x.ndim - 1,)), ((), ()))), 0, -1),
        "einsum": lambda x, w: jnp.einsum("...i,oi->...o", x, w),
    }
    rng = np.random.default_rng(0)
    rows = []
    for width in widths:
        w1 = jnp.asarray(rng.normal(size=(width, width)) / np.sqrt(width))
        w2 = jnp.asarray(rng.normal(size=(width, width)) / np.sqrt(width))
        for batch in batches:
            if width >= 2048 and batch is not None and batch > 16:
                continue
            x = jnp.asarray(rng.normal(size=(width,) if batch is None else (batch, width)))
            for name, form in forms.items():
                def loss(w1, w2, x, form=form):
                    return jnp.sum(jnp.tanh(form(jnp.tanh(form(x, w1)), w2)))

                fwd = jax.jit(loss, compiler_options=LARGE_COMPILER_OPTIONS)
                grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)),
                               compiler_options=LARGE_COMPILER_OPTIONS)
                a = (w1, w2, x)
                rows.append({
                    "backend": "jax", "width": width, "batch": batch, "form": name,
                    "forward_us": 1e6 * best_of(
                        lambda f=fwd, a=a: jax.block_until_ready(f(*a)), rounds),
                    "gradient_us": 1e6 * best_of(
                        lambda f=grad, a=a: jax.block_until_ready(f(*a)), rounds)})
    return rows


def torch_products(widths, batches, rounds: int) -> list[dict]:
    """The same with PyTorch (eager, one thread): ``torch.nn.functional.linear`` (what
    ``torch.nn.Linear`` calls), ``x @ W.T`` and ``W @ x``."""
    import torch

    torch.set_num_threads(1)
    forms = {
        "F.linear": lambda x, w: torch.nn.functional.linear(x, w),
        "x @ W.T": lambda x, w: x @ w.T,
        "W @ x": lambda x, w: (w @ x.unsqueeze(-1)).squeeze(-1) if x.ndim == 1
        else (w @ x.T).T,
    }
    gen = torch.Generator().manual_seed(0)
    rows = []
    for width in widths:
        w1 = (torch.randn(width, width, generator=gen, dtype=torch.float64)
              / np.sqrt(width)).requires_grad_(True)
        w2 = (torch.randn(width, width, generator=gen, dtype=torch.float64)
              / np.sqrt(width)).requires_grad_(True)
        for batch in batches:
            if width >= 2048 and batch is not None and batch > 16:
                continue
            shape = (width,) if batch is None else (batch, width)
            x = torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_(True)
            for name, form in forms.items():
                def forward(form=form, x=x, w1=w1, w2=w2):
                    with torch.no_grad():
                        return torch.tanh(form(torch.tanh(form(x, w1)), w2)).sum()

                def gradient(form=form, x=x, w1=w1, w2=w2):
                    total = torch.tanh(form(torch.tanh(form(x, w1)), w2)).sum()
                    return torch.autograd.grad(total, (w1, w2, x))

                rows.append({"backend": "torch", "width": width, "batch": batch,
                             "form": name, "forward_us": 1e6 * best_of(forward, rounds),
                             "gradient_us": 1e6 * best_of(gradient, rounds)})
    return rows


def print_products(rows: list[dict]) -> None:
    print(f"{'backend':7} {'width':>5} {'batch':>5} {'form':12} {'forward us':>11} "
          f"{'gradient us':>12}")
    for r in rows:
        batch = "-" if r["batch"] is None else str(r["batch"])
        print(f"{r['backend']:7} {r['width']:5d} {batch:>5} {r['form']:12} "
              f"{r['forward_us']:11.0f} {r['gradient_us']:12.0f}")


# ----------------------------------------------------------------------------- worker
def worker(width: int, mode: str, evals: int, checkpoints: int | None = None,
           min_seconds: float = 2.0) -> dict:
    import diffrax  # noqa: F401 - imports are not part of the figures
    import jax

    from petab_sciml.problem import load_problem

    with tempfile.TemporaryDirectory(prefix="petab_sciml_width_") as tmp:
        arrays = write_widened_problem(width, Path(tmp), suite_case_dir())
        problem = load_problem(Path(tmp) / "problem.yaml", backend="jax")
        options = {} if checkpoints is None else {"checkpoints": checkpoints}
        sim = problem.simulator(cache=False, sensitivity=mode, **options)
        p = problem.parameters()
        n_parameters = int(sim.plan.n_w)
        t = time.perf_counter()
        ours_value, ours_grad = sim.value_and_grad(p)
        ours_first = time.perf_counter() - t
        peak_first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ids = list(sim.parameter_ids)
        mech = np.array([p["mech"][ids.index(n)] for n in ("alpha", "beta", "delta")])
        options = sim.executor.options
        fn, p0 = hand_written(arrays, mech, mode, options.checkpoints, options.max_steps)
        # the hand-written objective jitted as a user would (XLA's default options) and
        # with our compiler options: the ratio is taken against the faster of the two
        hands = [jax.jit(fn), jax.jit(fn, compiler_options=sim.executor.compiler_options)]
        hand_first = []
        for h in hands:
            t = time.perf_counter()
            hand_value, hand_grad = jax.block_until_ready(h(p0))
            hand_first.append(time.perf_counter() - t)
        # our compiled objective called like the hand-written one (arrays in, arrays
        # out): the Simulator's numpy conversions apart
        compiled = sim.executor.compiled("value_and_grad")
        w = sim.plan.pack(p)
        times: list[list[float]] = [[], [], [], []]
        calls = [lambda: sim.value_and_grad(p)] + [
            lambda h=h: jax.block_until_ready(h(p0)) for h in hands] + [
            lambda: jax.block_until_ready(compiled(*sim.executor.arguments(w)))]
        # at least ``evals`` rounds and ``min_seconds`` of each variant: the minimum of
        # calls of a few ms needs many of them on a loaded machine
        while len(times[0]) < evals or min(map(sum, times)) < min_seconds:
            for i, call in enumerate(calls):
                t = time.perf_counter()
                call()
                times[i].append(time.perf_counter() - t)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    g_ours = np.concatenate([[ours_grad["mech"][ids.index(n)] for n in
                              ("alpha", "beta", "delta")]]
                            + [ours_grad["nets"]["net1"][layer][name].ravel()
                               for layer in ("layer1", "layer2", "layer3")
                               for name in ("weight", "bias")])
    g_hand = np.asarray(hand_grad)
    return {"width": width, "mode": mode, "n_parameters": n_parameters,
            "ours_first_s": ours_first, "hand_first_s": hand_first[0],
            "hand_ours_options_first_s": hand_first[1],
            "ours_eval_s": min(times[0]), "hand_eval_s": min(times[1]),
            "hand_ours_options_eval_s": min(times[2]), "ours_compiled_eval_s": min(times[3]),
            "peak_after_first_mib": peak_first, "peak_mib": peak,
            "value_rel_diff": abs(ours_value - float(hand_value)) / abs(float(hand_value)),
            "grad_rel_diff": float(np.max(np.abs(g_ours - g_hand))
                                   / max(np.max(np.abs(g_hand)), 1e-300)),
            "sensitivity": sim.executor.sensitivity, "evals": len(times[0]),
            "checkpoints": checkpoints}


def run_worker(width: int, mode: str, evals: int, timeout: float,
               checkpoints: int | None = None) -> dict | None:
    cmd = [sys.executable, __file__, "--worker", str(width), mode, str(evals)]
    if checkpoints is not None:
        cmd += ["--checkpoints", str(checkpoints)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  width {width} {mode}: no result within {timeout:.0f} s", file=sys.stderr)
        return None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        print(f"  width {width} {mode}: failed: {tail[0]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", nargs="+", type=int, default=list(WIDTHS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--evals", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--products", action="store_true",
                        help="compare the product forms of a Linear layer instead")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--checkpoints", type=int, default=None,
                        help="reverse mode: RecursiveCheckpointAdjoint checkpoints, ours "
                        "and hand-written (default: diffrax's)")
    parser.add_argument("--worker", nargs=3)
    args = parser.parse_args()
    if args.products:
        widths = [w for w in args.widths if w > 5] or [64]
        batches = [None, 1, 2, 16, 256]
        rows = jax_products(widths, batches, args.rounds)
        rows += torch_products(widths, batches, args.rounds)
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            print(f"one Linear form, two {widths}-wide layers, float64 (load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs); batch '-': one "
                  "unbatched vector")
            print_products(rows)
        return
    if args.worker is not None:
        width, mode, evals = args.worker
        print(json.dumps(worker(int(width), mode, int(evals), args.checkpoints)))
        return

    rows = []
    if not args.json:
        print(f"objective + gradient, case 001 widened, float64, dopri8 1e-8 (load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)\nours: "
              "Simulator.value_and_grad (numpy in and out) / the compiled objective alone; "
              "hand: jitted with XLA's default options / with ours; ratios over the faster "
              "hand")
        print(f"{'width':>5} {'params':>9} {'mode':8} {'ours ms':>9} {'compiled':>9} "
              f"{'hand ms':>15} {'ratios':>12} {'ours 1st s':>10} {'hand 1st s':>11} "
              f"{'peak MiB':>9} {'rel diff value/grad':>20}")
    for width in args.widths:
        for mode in args.modes:
            evals = args.evals if width < 2048 else max(2, args.evals // 5)
            row = run_worker(width, mode, evals, args.timeout, args.checkpoints)
            if row is None:
                continue
            rows.append(row)
            if not args.json:
                print(format_row(row), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"load average at the end {os.getloadavg()[0]:.1f}")


def format_row(row: dict) -> str:
    hand = min(row["hand_eval_s"], row["hand_ours_options_eval_s"])
    return (f"{row['width']:5d} {row['n_parameters']:9d} {row['mode']:8} "
            f"{row['ours_eval_s'] * 1e3:9.1f} {row['ours_compiled_eval_s'] * 1e3:9.1f} "
            f"{row['hand_eval_s'] * 1e3:7.1f}/"
            f"{row['hand_ours_options_eval_s'] * 1e3:<7.1f} {row['ours_eval_s'] / hand:5.2f}x "
            f"{row['ours_compiled_eval_s'] / hand:5.2f}x "
            f"{row['ours_first_s']:10.1f} {row['hand_first_s']:5.1f}/"
            f"{row['hand_ours_options_first_s']:<5.1f} {row['peak_mib']:9.0f} "
            f"{row['value_rel_diff']:9.1e}/{row['grad_rel_diff']:.1e}")


if __name__ == "__main__":
    main()

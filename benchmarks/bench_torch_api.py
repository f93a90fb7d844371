"""PyTorch against JAX on every entry point a user calls, in CPU and wall time.

    python benchmarks/bench_torch_api.py [--cases 001 002 004] [--calls 20] [--json]

On the suite's problem-import cases 001 (network in the right-hand side), 002
(pre-initialization network) and 004 (network in an observable), each measurement in
a fresh process, one intra-op thread (``torch.set_num_threads(1)``, XLA single-threaded),
an empty inductor cache per process for the first-call figures:

* ``api``: ``problem.value_and_grad(p)`` (the numpy API); PyTorch starts eager and
  compiles once that pays (``backends/torch/auto_compile.py``): its first call, its eager
  calls, the call that compiles and the compiled calls are reported apart;
* ``native``: ``loss = module(); loss.backward()`` on ``problem.model()`` (PyTorch:
  compiled solves) and the equinox model's ``value_and_grad`` under ``eqx.filter_jit``;
* ``first``: load + first objective and gradient (CPU of the process and its
  compiler workers, and wall);
* ``two processes``: the numpy API's steady calls, two processes at once against one
  alone (target: within 3x), for PyTorch and for JAX.

Per-call figures are medians over ``--calls`` calls at perturbed parameters.  Ratios
are PyTorch over JAX in the same run.  Targets (issue 28): api <= 10x, native <= 5x,
first call <= 60 s CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def suite_case(case: str) -> Path:
    sys.path.insert(0, str(REPO))
    from petab_sciml.testcases import suite_problem

    return suite_problem(case)


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (inductor's compile
    workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Clock:
    """CPU and wall seconds since construction."""

    def __init__(self) -> None:
        self.cpu, self.wall = cpu_s(), time.perf_counter()

    def read(self) -> tuple[float, float]:
        return cpu_s() - self.cpu, time.perf_counter() - self.wall


def median_pair(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return (statistics.median(c for c, _ in samples),
            statistics.median(w for _, w in samples))


# ----------------------------------------------------------------------------- workers
def worker(case: str, backend: str, entry: str, calls: int) -> dict:
    import numpy as np

    if backend == "torch":
        import torch
        import torchdiffeq  # noqa: F401 - imports are not part of the figures

        torch.set_num_threads(1)
    else:
        import diffrax  # noqa: F401
        import equinox  # noqa: F401
    from petab_sciml.problem import load_problem

    rng = np.random.default_rng(0)
    clock = Clock()
    problem = load_problem(suite_case(case), backend=backend)
    w0 = problem.plan.w0
    if entry == "api":
        sim = problem.simulator(**({"cache": False} if backend == "jax" else {}))

        def call(w):
            return sim.value_and_grad(w)[0]
    else:
        call = native_call(problem, backend)
    call(w0)
    first = clock.read()
    phases: dict[str, list] = {"eager": [], "switch": [], "steady": []}
    executor = getattr(sim, "executor", None) if entry == "api" else None
    steady_needed = calls
    while steady_needed:
        was_compiled = getattr(executor, "compiled", True) is not None
        c = Clock()
        call(w0 * rng.uniform(0.99, 1.01, w0.shape))
        sample = c.read()
        now_compiled = getattr(executor, "compiled", True) is not None
        if backend == "torch" and entry == "api" and not now_compiled:
            phases["eager"].append(sample)
            if not executor.may_compile:   # stays eager: eager is steady
                phases["steady"].append(sample)
                steady_needed -= 1
        elif backend == "torch" and entry == "api" and not was_compiled:
            phases["switch"].append(sample)
        else:
            phases["steady"].append(sample)
            steady_needed -= 1
    out = {"case": case, "backend": backend, "entry": entry,
           "first_cpu": first[0], "first_wall": first[1]}
    for k, v in phases.items():
        if v:
            out[k + "_cpu"], out[k + "_wall"] = median_pair(v)
            out[k + "_n"] = len(v)
    return out


def native_call(problem, backend: str):
    """One objective + gradient of the native model at its parameters, as a training
    loop runs it (``w`` unused: the same point each call)."""
    if backend == "torch":

        module = problem.model()

        def call(w):
            module.zero_grad()
            loss = module()
            loss.backward()
            return float(loss)
        return call
    import equinox as eqx

    from petab_sciml.backends.jax.problem import loss

    model = problem.model()
    value_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(
        lambda m: loss(m)[0]))

    def call(w):
        v, g = value_and_grad(model)
        v.block_until_ready()
        return float(v)
    return call


def run_worker(args: list[str], cache: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                        " intra_op_parallelism_threads=1")
    env["TORCHINDUCTOR_CACHE_DIR"] = cache or tempfile.mkdtemp(prefix="inductor_")
    return subprocess.Popen([sys.executable, __file__, "--worker", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def result(proc: subprocess.Popen) -> dict | None:
    out, err = proc.communicate()
    if proc.returncode != 0:
        print(f"  worker failed: {(err or out).strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main
def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["001", "002", "004"])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        case, backend, entry, calls = args.worker
        print(json.dumps(worker(case, backend, entry, int(calls))))
        return
    rows = []
    print(f"load average at start {load()}", flush=True)
    for case in args.cases:
        for entry in ("api", "native"):
            got = {b: result(run_worker([case, b, entry, str(args.calls)]))
                   for b in ("jax", "torch")}
            rows.append({"case": case, "entry": entry, **got, "load": load()})
            print_row(rows[-1])
        warm = tempfile.mkdtemp(prefix="inductor_warm_")
        result(run_worker([case, "torch", "api", "3"], warm))   # fills the warm cache
        for backend in ("jax", "torch"):
            alone = result(run_worker([case, backend, "api", str(args.calls)], warm))
            pair = [run_worker([case, backend, "api", str(args.calls)], warm)
                    for _ in range(2)]
            both = [result(p) for p in pair]
            rows.append({"case": case, "entry": "two processes", "backend": backend,
                         "alone": alone, "both": both, "load": load()})
            print_pair(rows[-1])
    if args.json:
        print(json.dumps(rows, indent=1))


def print_row(row: dict) -> None:
    j, t = row["jax"], row["torch"]
    if not j or not t:
        return
    ratio = (f"{t['steady_cpu'] / j['steady_cpu']:.1f}x cpu, "
             f"{t['steady_wall'] / j['steady_wall']:.1f}x wall")
    extra = ""
    if "eager_cpu" in t:
        extra = (f"; torch eager {ms(t['eager_cpu'])} ms cpu x{t['eager_n']}, switch call "
                 f"{t.get('switch_cpu', 0):.1f} s cpu / {t.get('switch_wall', 0):.1f} s wall")
    print(f"{row['case']} {row['entry']:6s} jax {ms(j['steady_cpu'])} ms cpu / "
          f"{ms(j['steady_wall'])} ms wall, torch {ms(t['steady_cpu'])} / "
          f"{ms(t['steady_wall'])} ms: {ratio}; first call (load included) jax "
          f"{j['first_cpu']:.1f} s cpu / {j['first_wall']:.1f} s wall, torch "
          f"{t['first_cpu']:.1f} / {t['first_wall']:.1f} s{extra} (load {row['load']})",
          flush=True)


def print_pair(row: dict) -> None:
    alone, both = row["alone"], row["both"]
    if not alone or not all(both):
        return
    worst = max(b["steady_wall"] for b in both)
    print(f"{row['case']} two processes, {row['backend']}: alone {ms(alone['steady_wall'])} ms "
          f"wall, together {', '.join(ms(b['steady_wall']) for b in both)} ms: "
          f"{worst / alone['steady_wall']:.2f}x (target <= 3x; load {row['load']})",
          flush=True)


if __name__ == "__main__":
    main()

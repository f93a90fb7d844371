"""Rejected steps at kinks: diffrax's PID controller against an observed-order one
(tried for issue 42, not adopted; figures in benchmarks/FIGURES.md).

    python benchmarks/investigations/observed_order_rejections.py \
        [--cases 001 010 036 038] [--reps 15]

After a rejected step, a PID controller proposes ``0.9 * err^(-1/q)`` of it, ``q`` the
method's error order (8 for ``dopri8``).  At a ReLU kink in the right-hand side the
local error shrinks like ``h^2`` for the states and like ``h`` for forward
sensitivities (``dS/dt`` jumps there), so each rejection removes only part of the excess
error.  :class:`ObservedOrderPIDController` keeps the first rejection from a point as
is; a second and later one measures the order between the last two attempts
(``log(err_prev / err) / log(h_prev / h)``, clipped to ``[1, q]``) and shrinks by it.
Acceptance is unchanged.

For each official suite case and sensitivity mode (forward, reverse), the JAX objective +
gradient with diffrax's plain ``PIDController`` (``before``, the toolkit's controller)
and with :class:`ObservedOrderPIDController` (``after``): accepted and rejected steps of
every solve of one evaluation, the minimum wall time of ``--reps`` calls after warm-up,
and the suite's gradient check.  Both run in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

CASES = ("001", "010", "036", "038")
SMALLEST_SHRINK = 1e-3
"""The smallest factor by which a rejection shrinks the step."""


def _scaled(rtol: Any, atol: Any, y0: Any, y1: Any, err: Any) -> Any:
    # diffrax's PIDController scaling, so both controllers see the same error
    y1 = jnp.where(jnp.isnan(y1).any(), y0, y1)
    with jax.numpy_dtype_promotion("standard"):
        return err / (atol + jnp.maximum(jnp.abs(y0), jnp.abs(y1)) * rtol)


class ObservedOrderPIDController(diffrax.PIDController):  # noqa: D101
    """``diffrax.PIDController`` whose second and later consecutive rejections shrink the
    step by the observed order of the error (module docstring).  Its state is the PID
    state plus the scaled error and length of the last rejected step (zero after an
    accepted one)."""

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        t_next, pid_state = super().init(terms, t0, t1, y0, dt0, args, func, error_order)
        zero_err = jnp.zeros_like(pid_state[0])
        zero_dt = jnp.zeros((), jnp.result_type(t_next - t0))
        return t_next, (pid_state, zero_err, zero_dt)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order,
                        controller_state):
        pid_state, last_err, last_dt = controller_state
        keep, next_t0, next_t1, jump, pid_state, result = super().adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, pid_state)
        err = lax.stop_gradient(self.norm(jax.tree_util.tree_map(
            lambda a, b, e: _scaled(self.rtol, self.atol, a, b, e), y0, y1_candidate,
            y_error)))
        err = jnp.asarray(err, last_err.dtype)
        dt = lax.stop_gradient(jnp.asarray(t1 - t0, last_dt.dtype))
        q_max = self._get_error_order(error_order)
        repeated = (~keep) & (last_err > 0) & jnp.isfinite(err) & (err > 1) & \
            (dt < last_dt)
        safe_ratio = jnp.where(repeated, last_dt / dt, 2.0)
        safe_err = jnp.where(repeated, err, 2.0)
        observed = jnp.log(jnp.where(repeated, last_err, 4.0) / safe_err) / \
            jnp.log(safe_ratio)
        q = jnp.clip(jnp.where(jnp.isfinite(observed), observed, 1.0), 1.0, q_max)
        factor = jnp.clip(self.safety * safe_err ** (-1.0 / q),
                          SMALLEST_SHRINK, self.safety)
        factor = eqx.internal.nondifferentiable(lax.stop_gradient(factor))
        shrunk = t0 + (t1 - t0) * factor.astype(jnp.result_type(t1 - t0))
        if self.dtmin is not None:
            shrunk = jnp.maximum(shrunk, t0 + self.dtmin)
        next_t1 = jnp.where(repeated, shrunk, next_t1)
        last_err = jnp.where(keep, jnp.zeros_like(err), err)
        last_dt = jnp.where(keep, jnp.zeros_like(dt), dt)
        return keep, next_t0, next_t1, jump, (pid_state, last_err, last_dt), result


def case_dir(case: str) -> Path:
    from petab_sciml.testcases import default_suite

    return Path(default_suite()) / "test_cases" / "sciml_problem_import" / case


@contextmanager
def controller(kind: str):
    """The JAX backend builds diffrax's plain controller (``before``) or
    :class:`ObservedOrderPIDController` (``after``) while inside."""
    original = diffrax.PIDController
    if kind == "after":
        diffrax.PIDController = ObservedOrderPIDController
    try:
        yield
    finally:
        diffrax.PIDController = original


@contextmanager
def counted_steps(steps: list):
    """Append ``(accepted, rejected)`` of every solve run while inside."""
    original = diffrax.diffeqsolve

    def counting(*args, **kwargs):
        sol = original(*args, **kwargs)
        jax.debug.callback(lambda a, r: steps.append((int(a.sum()), int(r.sum()))),
                           sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"])
        return sol

    diffrax.diffeqsolve = counting
    try:
        yield
    finally:
        diffrax.diffeqsolve = original


def measure(case: str, sensitivity: str, kind: str, reps: int) -> dict:
    from petab_sciml.testcases import check_problem_case, evaluate_problem_case, load_problem_case

    problem_case = load_problem_case(case_dir(case))
    steps: list = []
    with controller(kind):
        with counted_steps(steps):
            sim, ev = evaluate_problem_case(problem_case, "jax", cache=False,
                                            sensitivity=sensitivity)
            jax.effects_barrier()
        errors, tols, _ = check_problem_case(problem_case, sim, ev)
        sim2, _ = evaluate_problem_case(problem_case, "jax", cache=False,
                                        sensitivity=sensitivity)
        sim2.evaluate(grad=True)
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            sim2.evaluate(grad=True)
            best = min(best, time.perf_counter() - t)
    return {"steps": steps, "ms": best * 1e3, "grad_err": errors.get("gradient"),
            "grad_tol": tols.get("gradient"),
            "passed": all(errors[k] <= tols[k] for k in errors)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--sensitivities", nargs="+", default=["forward", "reverse"])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    print("| case | sensitivity | steps before (rejected) | steps after (rejected) | "
          "before ms | after ms | before / after | gradient error before / after "
          "(tol) | suite passes before / after |")
    print("|---|---|---|---|---:|---:|---:|---|---|")
    for case in args.cases:
        for sens in args.sensitivities:
            r = {k: measure(case, sens, k, args.reps) for k in ("before", "after")}

            def steps(m):
                return " + ".join(f"{a + j} ({j})" for a, j in m["steps"])

            print(f"| {case} | {sens} | {steps(r['before'])} | {steps(r['after'])} | "
                  f"{r['before']['ms']:.2f} | {r['after']['ms']:.2f} | "
                  f"{r['before']['ms'] / r['after']['ms']:.2f} | "
                  f"{r['before']['grad_err']:.2g} / {r['after']['grad_err']:.2g} "
                  f"({r['after']['grad_tol']:g}) | {r['before']['passed']} / "
                  f"{r['after']['passed']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Adaptive explicit Runge-Kutta solves in PyTorch as one loop that ``torch.compile`` can
turn into native code.

torchdiffeq's solver loop is Python, a few dozen small tensor operations per stage, so a
small hybrid model pays Python overhead thousands of times per solve.  Here the whole
solve, step-size control and outputs included, is a single
``torch._higher_order_ops.while_loop`` whose body is pure tensor code: eager, it runs as
a Python loop; compiled (``torch.compile`` with inductor, ``fullgraph=True``), the loop
and the right-hand side (networks included) become one native function.  The Butcher
tableaus are torchdiffeq's (:mod:`~petab_sciml.backends.torch.tableau`), the controller
too (:mod:`~petab_sciml.backends.torch.step_size`).

Compiled, the stages of a step are a loop too
(:func:`~petab_sciml.backends.torch.runge_kutta.rk_step_looped`: the right-hand side,
with its networks and Jacobian, traced once) or unrolled
(:func:`~petab_sciml.backends.torch.runge_kutta.rk_step`: traced once per stage, no
per-stage loop bookkeeping, more compilation); the executor unrolls when the right-hand
side is symbolic formulas only (``TorchOptions.unroll_stages``).

Outputs are taken where steps end: a step is shortened to land exactly on the next output
time, so nothing is interpolated (batched solves,
:mod:`~petab_sciml.backends.torch.batched_ode`, may instead interpolate with the
method's dense output).  A solve fails (``ok`` false, outputs NaN) on more than
``max_steps`` steps, a collapsed step size or a non-finite state; it never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from petab_sciml.backends.torch.runge_kutta import (
    Field,
    coefficients,
    rk_step,
    rk_step_looped,
)
from petab_sciml.backends.torch.step_size import StepSizeController
from petab_sciml.backends.torch.tableau import Tableau, tableau


@dataclass(frozen=True)
class SolveOptions:
    method: str = "dopri8"
    rtol: float = 1e-8
    atol: float = 1e-8
    max_steps: int = 100_000


def make_solve(field: Field, options: SolveOptions, *, loop: str = "python",
               unroll_stages: bool = False) -> Callable[..., Any]:
    """``solve(y0, t0, t1, ts, args) -> (ys, y1, ok, n_steps)``: ``y`` at the sorted output
    times ``ts`` (``t0 <= ts <= t1``, at least one), at ``t1``, whether the solve
    succeeded, and the number of steps taken.  ``t0``, ``t1`` are 0-d tensors.

    ``loop="python"`` runs the steps in a Python loop (eager); ``loop="while_loop"`` as one
    ``while_loop`` for :func:`compiled` (the same step code), its stages a loop of their
    own (:func:`~petab_sciml.backends.torch.runge_kutta.rk_step_looped`) unless
    ``unroll_stages``: then the right-hand side is traced once per stage, which costs
    more compilation and less per step (the inner loop's bookkeeping, its carried
    tensors handed over, a few allocations and a host read per stage, is most of a
    stage's cost when the right-hand side is small)."""
    tab = tableau(options.method)
    control = StepSizeController(tab, options.rtol, options.atol)
    max_steps = int(options.max_steps)
    looped = loop == "while_loop" and not unroll_stages

    def solve(y0, t0, t1, ts, args):
        n_out = ts.shape[0]
        if y0.shape[0] == 0:   # no states: nothing to integrate (an error norm of
            # no entries would be NaN and fail every step)
            return (y0.new_zeros((n_out, 0)), y0, torch.ones((), dtype=torch.bool,
                    device=y0.device), torch.zeros((), dtype=torch.int64, device=y0.device))
        coeffs = coefficients(tab, y0) if looped else None
        f0 = field(t0, y0, args)
        h0 = control.initial_step(field, t0, y0, f0, args)
        ys0 = torch.full((n_out, y0.shape[0]), float("nan"), dtype=y0.dtype,
                         device=y0.device)
        zero = torch.zeros((), dtype=torch.int64, device=y0.device)
        good0 = torch.isfinite(h0) & torch.all(torch.isfinite(f0))

        def cond(t, h, y, f, ys, k, n, good):
            return ((t < t1) | (k < n_out)) & (n < max_steps) & good

        body = _step_body(field, tab, control, coeffs, ts, t1, args)
        state = (t0.clone(), h0, y0.clone(), f0, ys0, zero.clone(), zero.clone(), good0)
        if loop == "while_loop":
            from torch._higher_order_ops.while_loop import while_loop

            state = while_loop(cond, body, state)
        else:
            while bool(cond(*state)):
                state = body(*state)
        t, _, y, _, ys, k, n, good = state
        ok = good & (t >= t1) & (k >= n_out)
        return ys, y, ok, n

    return solve


def _step_body(field: Field, tab: Tableau, control: StepSizeController,
               coeffs: tuple[torch.Tensor, ...] | None, ts, t1, args):
    """The loop body of :func:`make_solve`: one step (stages looped over ``coeffs``
    when given, else unrolled), the output it lands on, and the next step size."""
    n_out = ts.shape[0]

    def body(t, h, y, f, ys, k, n, good):
        has_out = k < n_out
        kc = torch.clamp(k, max=n_out - 1)
        target = torch.where(has_out, ts.index_select(0, kc.reshape(1))[0], t1)
        gap = target - t
        clipped = gap <= h
        h_try = torch.where(clipped, gap, h)
        if coeffs is not None:
            y1, f1, err = rk_step_looped(field, coeffs, t, y, f, h_try, args)
        else:
            y1, f1, err = rk_step(field, tab, t, y, f, h_try, args)
        ratio = control.error_ratio(err, y, y1)
        accept = (ratio <= 1.0) & torch.all(torch.isfinite(y1))
        hit = accept & clipped & has_out
        t_new = torch.where(accept, torch.where(clipped, target, t + h_try), t)
        y_new = torch.where(accept, y1, y)
        f_new = torch.where(accept, f1, f)
        row = torch.where(hit, y1, ys.index_select(0, kc.reshape(1))[0])
        ys_new = ys.index_put((kc.reshape(1),), row.reshape(1, -1))
        h_new, h_ok = control.next_step(ratio, accept, clipped, h, h_try, t_new)
        good_new = good & (h_ok | (h_try == 0))
        h_new = torch.where(h_ok, h_new, h)
        return (t_new, h_new, y_new, f_new, ys_new, k + hit.to(k.dtype),
                n + (h_try > 0).to(n.dtype), good_new)

    return body


INDUCTOR_OPTIONS = {
    # concatenations (the stacked outputs of generated right-hand sides, the sensitivity
    # system) as fused pointwise code: on CPU inductor otherwise writes each input into
    # a view of the result, and every such view is a tensor created in the loop body
    # each iteration
    "force_pointwise_cat": True,
}
"""Inductor options of :func:`compiled` (``torch.compile(options=...)``: these
compilations only)."""
SIMD_MIN_ENTRIES = 1024
""":func:`compiled` generates SIMD kernels when its largest tensor argument has at least
this many entries, scalar kernels below: a solve of a few dozen states and
sensitivities gains nothing from SIMD, and scalar code compiles faster."""


def compiled(fn: Callable[..., Any], *, simd: bool | None = None) -> Callable[..., Any]:
    """``fn`` compiled whole by ``torch.compile`` (inductor, C++ wrapper, no graph breaks,
    :data:`INDUCTOR_OPTIONS`); SIMD kernels or not as ``simd`` says, ``None``: decided on
    the first call (:data:`SIMD_MIN_ENTRIES`).

    The first call per input signature traces and compiles (a one-time cost); later
    calls run native code."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp_wrapper = True
    # one compiled solve per problem and signature: many problems in one process
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)

    def build(vectorize: bool) -> Callable[..., Any]:
        options = dict(INDUCTOR_OPTIONS)
        if not vectorize:   # else inductor's default: the CPU's vector instructions
            options["cpp.vec_isa_ok"] = False
        return torch.compile(fn, fullgraph=True, dynamic=False, options=options)

    if simd is not None:
        return build(simd)
    built: list[Callable[..., Any]] = []

    def call(*args):
        if not built:
            leaves = torch.utils._pytree.tree_leaves(args)
            largest = max((x.numel() for x in leaves if isinstance(x, torch.Tensor)),
                          default=0)
            built.append(build(largest >= SIMD_MIN_ENTRIES))
        return built[0](*args)

    return call


def solver(field: Field, options: SolveOptions, *, compile: bool,
           unroll_stages: bool = False) -> Callable[..., Any]:
    """:func:`make_solve`, compiled (stages unrolled or looped) or eager."""
    if compile:
        return compiled(make_solve(field, options, loop="while_loop",
                                   unroll_stages=unroll_stages))
    return make_solve(field, options)

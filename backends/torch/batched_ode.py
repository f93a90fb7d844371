"""Batched adaptive Runge-Kutta solves in PyTorch: ``E`` independent problems (rows)
solved together, each with its own time, step size and error control.  An eager Python
loop through which autograd may flow (back-propagation through the steps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from petab_sciml.backends.torch.ode import SolveOptions
from petab_sciml.backends.torch.runge_kutta import Field, combine, weighted_sum
from petab_sciml.backends.torch.step_size import StepSizeController
from petab_sciml.backends.torch.tableau import DENSE_OUTPUT, Tableau, dense_output_at, tableau

COMPACT_ROWS = 8
"""Batched solves with ``restrict``: once at least this many rows (and an eighth of the
batch) have finished, steps evaluate only the rows still moving."""


def make_batched_solve(field: Field, options: SolveOptions, *,
                       stacked_stages: bool = False,
                       restrict: Callable[[Any, torch.Tensor], Any] | None = None,
                       dense_output: bool = False) -> Callable[..., Any]:
    """``solve(y0, t0, t1, ts, args) -> (ys, y1, ok, n_steps)`` for a batch of ``E``
    independent problems solved together: ``y0`` is ``(E, n)``, ``t0`` and ``t1`` are
    ``(E,)``, ``ts`` is ``(E, N)`` (each row sorted, in ``[t0, t1]``; pad a shorter grid
    with its ``t1``); ``field(t, y, args)`` takes ``t`` of shape ``(E,)`` and ``y`` of
    shape ``(E, n)``.  Returns ``ys`` ``(E, N, n)``, ``y1`` ``(E, n)``, ``ok`` ``(E,)``
    and the steps per problem ``(E,)``.

    Every problem keeps its **own** time, step size and error control, exactly as
    :func:`~petab_sciml.backends.torch.ode.make_solve` would solve it alone (same
    tableau, controller, initial step, steps shortened to land on its output times):
    only the right-hand side is evaluated for all problems at once.  A problem that has
    finished (or failed) stops moving while the others go on (its rows take zero-length
    steps, which cost nothing but the batched evaluation).  So results agree with
    one-at-a-time solves to rounding, not merely to the solver tolerance.

    Autograd may flow through the loop (back-propagation through the steps): the
    step-size decisions are taken on detached values, so gradients are those of the
    discrete solution for the step sequence taken.

    ``stacked_stages``: each stage's combination of the previous stages is one weighted
    sum of the stacked stages (a few tensor operations, and autograd nodes, per stage)
    instead of a product and a sum per nonzero coefficient, as ``make_solve``.  The same
    method, summed in another order: results differ from ``make_solve``'s in the last
    bits, which a step-size decision can amplify, so the forward-sensitivity path keeps
    the term-by-term sums; back-propagation through the steps, where the per-operation
    cost dominates small batches, stacks.

    ``restrict(args, rows)``: ``args`` for the given rows only (a tensor of row
    indices).  With it, once :data:`COMPACT_ROWS` rows or more (and at least an eighth
    of the batch) have finished or failed, a step evaluates the rows still moving only
    instead of giving the others zero-length steps; the results are the same.

    ``dense_output``: steps are not shortened to land on the output times; outputs
    inside a step come from the method's dense output
    (:attr:`~petab_sciml.backends.torch.tableau.Tableau.dense`; ``dopri8``: the
    interpolant diffrax's ``Dopri8`` and so the JAX backend use), from the step's
    stages, at a few operations per output.  Fewer steps (the step size follows the
    error alone), outputs accurate to the interpolant's order rather than the
    method's.  Each row's steps stay its own: results do not depend on the batch."""
    tab = tableau(options.method)
    if dense_output and tab.dense is None:
        raise ValueError(f"{tab.name} has no dense output here; methods with one: "
                         f"{', '.join(DENSE_OUTPUT)}")
    control = StepSizeController(tab, options.rtol, options.atol)
    max_steps = int(options.max_steps)
    step = _batched_step(field, tab, dense_output)
    dense_tables: dict[tuple, torch.Tensor] = {}

    def solve(y0, t0, t1, ts, args):
        if y0.shape[1] == 0:   # no states: nothing to integrate
            E = y0.shape[0]
            return (y0.new_zeros((E, ts.shape[1], 0)), y0,
                    torch.ones(E, dtype=torch.bool, device=y0.device),
                    torch.zeros(E, dtype=torch.int64, device=y0.device))
        coeffs = _stage_coefficients(tab, y0) if stacked_stages else None
        dense = None
        if dense_output:
            dense = dense_tables.get((y0.dtype, y0.device))
            if dense is None:
                dense = dense_tables[(y0.dtype, y0.device)] = torch.tensor(
                    tab.dense, dtype=y0.dtype, device=y0.device)
        moving_rows = _MovingRows(restrict, ts.shape[0]) if restrict is not None else None
        return _solve_rows(field, step, control, max_steps, coeffs, dense, moving_rows,
                           y0, t0, t1, ts, args)

    return solve


def _solve_rows(field: Field, step, control: StepSizeController, max_steps: int, coeffs,
                dense, moving_rows: _MovingRows | None, y0, t0, t1, ts, args):
    """The step loop of :func:`make_batched_solve`'s ``solve``: ``step``
    (:func:`_batched_step`) with stacked-stage coefficients ``coeffs`` (or None), outputs
    from the dense output when ``dense`` (the method's table as a tensor) is given."""
    E, n_out = ts.shape
    dense_output = dense is not None
    f0 = field(t0, y0, args)
    with torch.no_grad():
        h = control.initial_step(field, t0, y0.detach(), f0.detach(), args, rows=True)
    good = torch.isfinite(h) & torch.all(torch.isfinite(f0.detach()), dim=1)
    ys, k = _first_outputs(y0, t0, ts, dense_output)
    n = torch.zeros_like(k)
    t, y, f = t0.clone(), y0, f0
    slots = torch.arange(n_out, device=y0.device)
    rows = torch.arange(E, device=y0.device)
    while True:
        # dense output: every output is filled by the time t reaches t1 (outputs
        # past t1 are never filled: the solve fails, it does not loop)
        active = (((t < t1) if dense_output else ((t < t1) | (k < n_out)))
                  & (n < max_steps) & good)
        n_active = int(active.sum())
        if not n_active:
            break
        has_out = (k < n_out) if not dense_output else torch.zeros_like(active)
        kc = torch.clamp(k, max=n_out - 1)
        target = torch.where(has_out, ts[rows, kc], t1)
        gap = torch.where(active, target - t, torch.zeros_like(t))
        clipped = gap <= h
        h_try = torch.where(clipped, gap, h)
        sub = (moving_rows.select(active, n_active, args)
               if moving_rows is not None else None)
        if sub is not None:
            y1, f1, err, stages = _step_rows(step, sub, t, y, f, h_try, coeffs)
        else:
            y1, f1, err, stages = step(t, y, f, h_try, args, coeffs)
        with torch.no_grad():
            accept, hit, t_new, h, good = _control(control, active, clipped, has_out,
                                                   target, t, h, h_try, y, y1, err,
                                                   good)
            n = n + (active & (h_try > 0)).to(n.dtype)
            if dense_output:   # the outputs this step passed
                inside = (accept[:, None] & (slots[None, :] >= k[:, None])
                          & (ts <= t_new[:, None]))
                k = k + inside.sum(1)
            else:
                k = k + hit.to(k.dtype)
                at = hit[:, None] & (slots[None, :] == kc[:, None])
        if dense_output:
            ys = _write_dense_outputs(dense, ys, inside, y, stages, t, h_try, ts, sub)
        keep = accept[:, None]
        y = torch.where(keep, y1, y)
        f = torch.where(keep, f1, f)
        if not dense_output:
            ys = torch.where(at[:, :, None], y1[:, None, :], ys)
        t = t_new
    ok = good & (t >= t1) & (k >= n_out)
    return ys, y, ok, n


def _batched_step(field: Field, tab: Tableau, dense_output: bool):
    """``step(t, y, f0, h, args, coeffs) -> (y1, f1, err, stages)`` of rows ``y``:
    term by term as ``make_solve`` (``coeffs`` None), else with the stages stacked
    (:func:`_stage_coefficients`); ``stages`` (S, E, n) where needed (dense output, or
    stacked), else None."""

    def step(t, y, f0, h, args, coeffs):
        hc = h[:, None]
        if coeffs is None:   # term by term, as make_solve
            ks = [f0]
            for ci, ai in zip(tab.c, tab.a):
                yi = y + combine(hc, ks, ai)
                ks.append(field(t + ci * h, yi, args))
            stages = torch.stack(ks) if dense_output else None
            return yi, ks[-1], combine(hc, ks, tab.e), stages
        # the stages so far stacked (first axis) and combined by one weighted sum per
        # stage: a handful of operations (and autograd nodes) per stage instead of two
        # per nonzero coefficient, which is most of a step's cost when the batch is
        # small; a row takes the same steps alone as in any batch
        a_rows, c, e_row = coeffs
        with torch.no_grad():
            times = t[:, None] + hc * c
        ks = [f0]
        yi = y
        for i, ai in enumerate(a_rows):
            yi = torch.addcmul(y, hc, weighted_sum(ai, torch.stack(ks)))
            ks.append(field(times[:, i], yi, args))
        stages = torch.stack(ks)
        return yi, ks[-1], hc * weighted_sum(e_row, stages), stages

    return step


def _stage_coefficients(tab: Tableau, like: torch.Tensor):
    """``stacked_stages``: the rows of ``a``, ``c`` and the error weights as tensors."""
    as_t = lambda v: torch.tensor(v, dtype=like.dtype, device=like.device)  # noqa: E731
    return [as_t(ai) for ai in tab.a], as_t(tab.c), as_t(tab.e[: len(tab.a) + 1])


def _first_outputs(y0, t0, ts, dense_output: bool):
    """``(ys, k)``: the outputs, NaN until filled, and per row the first output not yet
    filled (dense output: outputs at the start are the start)."""
    E, n_out = ts.shape
    ys = torch.full((E, n_out, y0.shape[1]), float("nan"), dtype=y0.dtype,
                    device=y0.device)
    k = torch.zeros(E, dtype=torch.int64, device=y0.device)
    if dense_output:
        at_start = ts <= t0[:, None]
        ys = torch.where(at_start[:, :, None], y0[:, None, :], ys)
        k = at_start.sum(1)
    return ys, k


def _control(control: StepSizeController, active, clipped, has_out, target, t, h, h_try,
             y, y1, err, good):
    """Step-size decisions of the rows (no autograd): ``(accept, hit (landed on an
    output), t_new, h, good)``; inactive rows keep their step size."""
    yd, y1d = y.detach(), y1.detach()
    ratio = control.error_ratio(err.detach(), yd, y1d, rows=True)
    accept = active & (ratio <= 1.0) & torch.all(torch.isfinite(y1d), dim=1)
    hit = accept & clipped & has_out
    t_new = torch.where(accept, torch.where(clipped, target, t + h_try), t)
    h_new, h_ok = control.next_step(ratio, accept, clipped, h, h_try, t_new)
    good = good & (h_ok | (h_try == 0) | ~active)
    h = torch.where(active & h_ok, h_new, h)
    return accept, hit, t_new, h, good


class _MovingRows:
    """``restrict``: the rows still moving once enough have stopped, their own ``args``
    and each row's place among them, rebuilt when the set of moving rows changes."""

    def __init__(self, restrict: Callable[[Any, torch.Tensor], Any], n_rows: int):
        self.restrict = restrict
        self.n_rows = n_rows
        self.sub: tuple | None = None

    def select(self, active: torch.Tensor, n_active: int, args: Any):
        """``(moving rows, their args, local index per row)``, or None while too few
        rows have stopped for the restriction to pay off."""
        E = self.n_rows
        if E - n_active < max(COMPACT_ROWS, E // 8):
            return None
        # only the rows still moving (the others' zero-length step would give y1 = y,
        # f1 = f, err = 0: exactly what they get from _step_rows)
        moving = active.nonzero()[:, 0]
        if self.sub is None or not torch.equal(self.sub[0], moving):
            local = torch.full((E,), -1, dtype=torch.int64, device=active.device)
            local[moving] = torch.arange(moving.shape[0], device=active.device)
            self.sub = (moving, self.restrict(args, moving), local)
        return self.sub


def _step_rows(step, sub, t, y, f, h_try, coeffs):
    """``step`` of the moving rows ``sub`` (:class:`_MovingRows`) only, scattered back
    into full-size ``(y1, f1, err)``; the stages are those of the moving rows."""
    moving, args, _ = sub
    y1s, f1s, errs, stages = step(t[moving], y[moving], f[moving], h_try[moving], args,
                                  coeffs)
    y1 = y.index_put((moving,), y1s)
    f1 = f.index_put((moving,), f1s)
    err = y.detach().new_zeros(y.shape).index_put((moving,), errs.detach())
    return y1, f1, err, stages


def _write_dense_outputs(dense, ys, inside, y, stages, t, h, ts, sub):
    """``ys`` with the outputs ``inside`` this step (from ``t``, length ``h``) filled from
    the dense output of its ``stages`` (those of the moving rows ``sub`` if given)."""
    pairs = inside.nonzero()
    if not pairs.shape[0]:
        return ys
    if sub is None:
        r, j = pairs[:, 0], pairs[:, 1]
        rows_y, rows_t, rows_h, rows_ts = y, t, h, ts
    else:   # the stages are those of the moving rows only
        moving, _, local = sub
        r, j = local[pairs[:, 0]], pairs[:, 1]
        rows_y, rows_t, rows_h, rows_ts = y[moving], t[moving], h[moving], ts[moving]
    with torch.no_grad():
        theta = (rows_ts[r, j] - rows_t[r]) / rows_h[r]
    values = dense_output_at(dense, rows_y[r], stages[:, r], theta, rows_h[r])
    return ys.index_put((pairs[:, 0], pairs[:, 1]), values)

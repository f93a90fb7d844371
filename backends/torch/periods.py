"""Experiments solved one at a time, period by period (:class:`PeriodSolver`): forward
sensitivities (or none) with our Runge-Kutta loop, ``autograd`` / ``adjoint`` with
torchdiffeq, and steady-state periods (:mod:`~petab_sciml.backends.torch.steady_state`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from petab_sciml.backends.torch.events import Events, event_probe
from petab_sciml.backends.torch.fields import Fields
from petab_sciml.backends.torch.layout import PeriodLayout
from petab_sciml.backends.torch.networks import Networks
from petab_sciml.backends.torch.options import IMPLICIT_METHODS, TorchOptions
from petab_sciml.backends.torch.sensitivity import ForwardSensitivity
from petab_sciml.backends.torch.sensitivity_parameters import SensitivityParameters
from petab_sciml.backends.torch.solvers import Solvers
from petab_sciml.backends.torch.state_blocks import StateBlocks
from petab_sciml.backends.torch.steady_state import solve_steady
from petab_sciml.simulation.steps import MAX_STEP_GROWTH


@dataclass(frozen=True)
class Span:
    """An integration from ``start`` to ``end`` (finite) with ``n_times`` outputs:
    ``ts`` the output times padded with the end (our loop), ``grid`` the sorted distinct
    times from start to end and ``where`` each output's place in it (torchdiffeq)."""

    start: float
    end: float
    n_times: int
    ts: torch.Tensor
    grid: torch.Tensor
    where: torch.Tensor

    @classmethod
    def of_period(cls, period: PeriodLayout, d: dict[str, torch.Tensor]) -> Span:
        key = period.key
        return cls(period.start, period.end, period.n_times, d[f"{key}_ts"],
                   d[f"{key}_grid"], d[f"{key}_where"])

    @classmethod
    def between(cls, start: float, end: float, ts: torch.Tensor, n_times: int) -> Span:
        """From ``start`` to ``end`` with the outputs ``ts`` (within them)."""
        ends = ts.new_tensor([start, end])
        grid, where = torch.unique(torch.cat([ends, ts]), sorted=True, return_inverse=True)
        return cls(start, end, n_times, torch.cat([ts, ends[1:]]), grid, where[2:])

    @classmethod
    def to_end(cls, start: float, end: float, w: torch.Tensor) -> Span:
        """From ``start`` to ``end`` with the one output at the end."""
        return cls(start, end, 1, w.new_tensor([end]), w.new_tensor([start, end]),
                   torch.ones(1, dtype=torch.int64, device=w.device))


class PeriodSolver:
    """The periods of one experiment at a time."""

    def __init__(self, plan: Any, fns: Any, networks: Networks, sens: SensitivityParameters,
                 fields: Fields, solvers: Solvers, options: TorchOptions):
        self.plan = plan
        self.fns = fns
        self.networks = networks
        self.sens = sens
        self.fields = fields
        self.solvers = solvers
        self.options = options
        self.events = Events(plan, fns) if plan.events else None
        self.probes = plan.has_state_events
        """Some event is triggered by states: a probe finds where it fires."""

    def experiment(self, e: int, periods: list[PeriodLayout], theta, outs, arrays, d, w,
                   params, blocks: StateBlocks, ok):
        """Experiment ``e``'s periods from its group's constants ``theta``,
        pre-initialization outputs ``outs`` and array inputs ``arrays``, each period's
        condition changes applied at its start; its states and constants into
        ``blocks``.  Returns ``ok`` and-ed with every solve's success."""
        fns = self.fns
        events = self.events
        before = None if events is None else events.initial
        x = None
        for k, period in enumerate(periods):
            key = period.key
            start = w.new_tensor(period.start)
            th_t, th_s = d[f"{key}_th_t"], d[f"{key}_th_s"]
            st_t, st_s = d[f"{key}_st_t"], d[f"{key}_st_s"]
            if k == 0:
                x = fns.x0(start, theta, *outs)
                if st_t.numel():
                    vals = fns.changes(start, x, theta, *outs)
                    x = x.index_put((st_t,), vals[st_s])
            elif th_t.numel() or st_t.numel():
                vals = fns.changes(start, x, theta, *outs)
                if th_t.numel():
                    theta = theta.index_put((th_t,), vals[th_s])
                if st_t.numel():
                    x = x.index_put((st_t,), vals[st_s])
            span = Span.of_period(period, d)
            if events is not None:
                x = events.fire_at_start(start, x, theta, outs, before)
            if period.steady:
                y, x, good = solve_steady(self, x, theta, outs, arrays, period, span, w,
                                          params)
            elif self.fns.jumps is not None or self.probes:
                y, x, good = self.span_with_jumps(x, theta, outs, arrays, span, w, params)
            else:
                y, x, good = self.span(x, theta, outs, arrays, span, w, params)
            if events is not None:
                before = events.status(w.new_tensor(period.end), x, theta, outs, left=True)
            ok = ok & good
            blocks.add_period(e, k, y, theta)
        return ok

    def span(self, x0, theta, outs, arrays, span: Span, w, params):
        """``(x at the span's output times, x at its end, ok)``."""
        if self.options.method in IMPLICIT_METHODS:
            return self._implicit(x0, theta, outs, arrays, span, w)
        if self.options.sensitivity != "forward":
            return self._torchdiffeq(x0, theta, outs, arrays, span, w, params)
        t0, t1 = w.new_tensor(span.start), w.new_tensor(span.end)
        p = self.sens.vector(theta, outs, w)
        rhs_arrays = self.rhs_arrays(arrays)
        if torch.is_grad_enabled() and (p.requires_grad or x0.requires_grad):
            xs, x1, ok = ForwardSensitivity.apply(x0, p, self.solvers, rhs_arrays, t0, t1,
                                                  span.ts)
        else:
            ys, y1, ok, steps = self.solvers.get("plain", x0.dtype)(x0, t0, t1, span.ts,
                                                                   (p, rhs_arrays))
            self.solvers.n_steps += int(steps)
            xs, x1 = ys, y1
        return xs[: span.n_times], x1, ok

    def span_with_jumps(self, x0, theta, outs, arrays, span: Span, w, params):
        """:meth:`span` split at the right-hand side's jump times
        (:mod:`~petab_sciml.backends.torch.jumps`)."""
        from petab_sciml.backends.torch.jumps import JumpEvents, split_at_jumps

        n = span.n_times
        t0, t1 = w.new_tensor(span.start), w.new_tensor(span.end)
        taus = (self.fns.jumps(t0, theta, *outs).reshape(-1) if self.fns.jumps is not None
                else t0.new_zeros(0))
        p = self.sens.vector(theta, outs, w)
        rhs_arrays = self.rhs_arrays(arrays)

        def solve(x, start, end, ts):
            ys, x_end, ok = self.span(x, theta, outs, arrays,
                                      Span.between(float(start), float(end), ts, n),
                                      w, params)
            return ys, x_end, ok

        def field(t, x):
            return self.fields.field_p(t, x, p, rhs_arrays, functional=False)

        events = self.events
        jump_events = torch.tensor(self.fns.jump_events, dtype=torch.int64)
        if events is None or not (self.probes or bool((jump_events >= 0).any())):
            return split_at_jumps(solve, field, taus, x0, t0, t1, span.ts[:n])
        state = torch.zeros(taus.shape, dtype=torch.bool)
        ok = torch.ones((), dtype=torch.bool)
        if self.probes:
            found, ks, probed = event_probe(
                events, field, x0, span.start, span.end, theta, outs,
                implicit=self.options.method in IMPLICIT_METHODS,
                rtol=self.options.rtol, atol=self.options.atol)
            taus = torch.cat([taus, taus.new_tensor(found)])
            jump_events = torch.cat([jump_events, torch.tensor(ks, dtype=torch.int64)])
            state = torch.cat([state, torch.ones(len(found), dtype=torch.bool)])
            ok = ok & probed

        def root(k, t, x):
            return events.fns.triggers(t, x, theta, *outs)[..., k]

        y, x, good = split_at_jumps(
            solve, field, taus, x0, t0, t1, span.ts[:n],
            JumpEvents(jump_events, lambda k, t, x: events.apply(k, t, x, theta, outs),
                       state, root))
        return y, x, good & ok

    def _implicit(self, x0, theta, outs, arrays, span: Span, w):
        """:meth:`span` with an implicit method, back-propagation through its steps."""
        t0, t1 = w.new_tensor(span.start), w.new_tensor(span.end)
        p = self.sens.vector(theta, outs, w)
        solve = self.solvers.get("implicit", x0.dtype)
        ys, y1, ok, steps = solve(x0, t0, t1, span.ts, (p, self.rhs_arrays(arrays)))
        self.solvers.n_steps += int(steps)
        return ys[: span.n_times], y1, ok

    def span_to(self, x0, theta, outs, arrays, start: float, end: float, w, params):
        """:meth:`span` from ``start`` to ``end`` with the one output at the end."""
        return self.span(x0, theta, outs, arrays, Span.to_end(start, end, w), w, params)

    def rhs_arrays(self, arrays):
        """The array inputs of the right-hand-side networks (``{}`` for the others)."""
        return [arrays[j] if j in self.sens.rhs_nets else {} for j in range(len(arrays))]

    def _torchdiffeq(self, x0, theta, outs, arrays, span: Span, w, params):
        """:meth:`span` by ``torchdiffeq.odeint`` (``autograd``) or ``odeint_adjoint``."""
        import torchdiffeq

        opts = self.options
        grid, where = span.grid, span.where
        n_x = x0.shape[0]
        if grid.numel() < 2:
            return x0.unsqueeze(0).expand(where.numel(), n_x), x0, torch.ones((), dtype=bool)

        def func(t, y):
            o = list(outs)
            for j in self.sens.rhs_nets:
                o[j] = self.networks.out(j, t, y, theta, o, arrays, params[j])
            return self.fns.rhs(t, y, theta, *o)

        kwargs: dict[str, Any] = {}
        odeint = torchdiffeq.odeint
        if opts.sensitivity == "adjoint" and torch.is_grad_enabled():
            odeint = torchdiffeq.odeint_adjoint
            # theta, network arrays and pre-initialization outputs are functions of w:
            # the gradient with respect to w covers every path
            kwargs["adjoint_params"] = (w,) if w.requires_grad else ()
        try:
            options = {"max_num_steps": opts.max_steps, "step_t": grid}
            if opts.method.lower() in MAX_STEP_GROWTH:   # dopri8: the same growth limit
                options["ifactor"] = MAX_STEP_GROWTH[opts.method.lower()]
            sol = odeint(func, x0, grid, rtol=opts.rtol, atol=opts.atol, method=opts.method,
                         options=options, **kwargs)
        except AssertionError:  # torchdiffeq: too many steps, step size underflow
            nan = x0 * float("nan")
            return nan.expand(where.numel(), n_x), nan, torch.zeros((), dtype=bool)
        good = torch.all(torch.isfinite(sol))
        return sol[where], sol[-1], good

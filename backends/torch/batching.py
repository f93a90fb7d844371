"""Experiments solved together as one batched solve: which experiments form a batch
(:func:`plan_batches`) and the solve of a batch's periods (:class:`BatchSolver`): states
``(E, n_x)``, each experiment with its own step sizes, so results equal the
one-at-a-time path to rounding."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from petab_sciml.backends.torch.events import Events
from petab_sciml.backends.torch.fields import Fields
from petab_sciml.backends.torch.layout import PeriodLayout
from petab_sciml.backends.torch.networks import Networks
from petab_sciml.backends.torch.options import (
    FORWARD_BATCH_ENTRIES,
    FORWARD_METHODS,
    TorchOptions,
)
from petab_sciml.backends.torch.sensitivity import ForwardSensitivity
from petab_sciml.backends.torch.sensitivity_parameters import SensitivityParameters
from petab_sciml.backends.torch.solvers import Solvers
from petab_sciml.simulation.plan import SimulationPlan


def plan_batches(plan: SimulationPlan, options: TorchOptions,
                 periods: list[list[PeriodLayout]], layout: dict[str, np.ndarray],
                 n_p: int) -> tuple[list[tuple[int, list[int]]], dict[str, np.ndarray]]:
    """``(batches, arrays)``: the batches ``(number of periods, experiments)`` and their
    arrays.  Experiments of one number of periods and without a steady-state period
    form a batch when there are at least two (``autograd``: from one: our loop costs
    less per step than torchdiffeq's, and a lone experiment then takes the steps it
    takes inside a batch); forward sensitivities: at most
    :data:`~petab_sciml.backends.torch.options.FORWARD_BATCH_ENTRIES` states and
    sensitivities per batch.  Per batch ``b``, ``b{b}_group`` and per period ``k`` its
    start, end, padded output times and change indices (``b{b}p{k}_*``, targets padded
    with one index past the end: dropped).  ``autograd`` with
    ``batch_experiments=False``: every experiment a batch of its own (one solve after
    another with the same solver, the reference for the batched path).  ``layout``:
    the plan's arrays (:class:`~petab_sciml.backends.torch.layout.TorchLayout`)."""
    o = options
    # experiments with state-triggered events are solved one at a time (their probe
    # finds each one's event times)
    batchable = (not o.compile and o.method in FORWARD_METHODS
                 and o.sensitivity in ("forward", "autograd")
                 and not plan.has_state_events)
    if not batchable or not (o.batch_experiments or o.sensitivity == "autograd"):
        return [], {}
    by_p: dict[int, list[int]] = {}
    for e, exp in enumerate(plan.experiments):
        if not any(p.steady for p in periods[e]):
            by_p.setdefault(len(exp.periods), []).append(e)
    # entries (states and their sensitivities) per experiment; a model without states
    # (only parameters and assignment rules) has none, and batches any number
    size = max(1, len(plan.state_ids) * (1 + len(plan.state_ids) + n_p))
    most = (1 if not o.batch_experiments
            else max(1, FORWARD_BATCH_ENTRIES // size) if o.sensitivity == "forward"
            else len(plan.experiments))
    chunks = [(P, exps[i: i + most]) for P, exps in sorted(by_p.items())
              for i in range(0, len(exps), most)]
    least = 1 if o.sensitivity == "autograd" else 2
    batches: list[tuple[int, list[int]]] = []
    arrays: dict[str, np.ndarray] = {}
    for P, exps in chunks:
        if len(exps) < least:
            continue
        b = len(batches)
        batches.append((P, exps))
        arrays[f"b{b}_group"] = np.array([plan.experiments[e].group for e in exps],
                                         np.int64)
        for k in range(P):
            _batch_period_arrays(plan, arrays, f"b{b}p{k}",
                                 [periods[e][k] for e in exps], layout)
    return batches, arrays


def _batch_period_arrays(plan: SimulationPlan, arrays: dict[str, np.ndarray], key: str,
                         pers: list[PeriodLayout], layout: dict[str, np.ndarray]) -> None:
    """Period arrays of the experiments ``pers`` stacked under ``key``."""
    n_theta, n_x = len(plan.theta_ids), len(plan.state_ids)
    n = max(1, max(q.n_times for q in pers))
    arrays[f"{key}_start"] = np.array([q.start for q in pers], np.float64)
    arrays[f"{key}_end"] = np.array([q.end for q in pers], np.float64)
    arrays[f"{key}_ts"] = np.stack([layout[f"{q.key}_ts"][:n] for q in pers])
    for kind, dummy in (("th", n_theta), ("st", n_x)):
        tgts = [layout[f"{q.key}_{kind}_t"] for q in pers]
        srcs = [layout[f"{q.key}_{kind}_s"] for q in pers]
        width = max(t.size for t in tgts)
        tgt = np.full((len(pers), width), dummy, np.int64)
        src = np.zeros((len(pers), width), np.int64)
        for i, (t, s_) in enumerate(zip(tgts, srcs)):
            tgt[i, : t.size], src[i, : s_.size] = t, s_
        arrays[f"{key}_{kind}_t"], arrays[f"{key}_{kind}_s"] = tgt, src


class BatchSolver:
    """The periods of a batch of experiments (:func:`plan_batches`) solved together."""

    def __init__(self, plan: SimulationPlan, fns: Any, networks: Networks,
                 sens: SensitivityParameters, fields: Fields, solvers: Solvers,
                 sensitivity: str):
        self.plan = plan
        self.fns = fns
        self.networks = networks
        self.sens = sens
        self.fields = fields
        self.solvers = solvers
        self.sensitivity = sensitivity
        self._constants: dict[Any, Any] | None = None
        self.events = Events(plan, fns) if plan.events else None

    def solve(self, b, P, group_theta, group_outs, arrays_all, d, w):
        """Batch ``b`` of ``P`` periods: per period ``(x at the padded output times (E,
        N, n_x), theta (E, n_theta))`` and whether every solve succeeded."""
        fns = self.fns
        groups = d[f"b{b}_group"]
        theta = torch.stack(group_theta)[groups]
        n_nets = len(self.plan.networks)
        outs = [torch.stack([go[j] for go in group_outs])[groups] for j in range(n_nets)]
        arrays = [{k: v[groups] for k, v in a.items()} for a in arrays_all]
        ok = torch.ones((), dtype=torch.bool, device=w.device)
        ys, thetas = [], []
        events = self.events
        before = None if events is None else events.initial
        x = None
        for k in range(P):
            key = f"b{b}p{k}"
            start, end, ts = d[f"{key}_start"], d[f"{key}_end"], d[f"{key}_ts"]
            th_t, th_s = d[f"{key}_th_t"], d[f"{key}_th_s"]
            st_t, st_s = d[f"{key}_st_t"], d[f"{key}_st_s"]
            constant = self._constant_changes(w)
            if k == 0:
                x = fns.x0(start, theta, *outs)
                if st_t.shape[1]:
                    vals = (constant if constant is not None
                            else fns.changes(start, x, theta, *outs))
                    x = _scatter_rows(x, st_t, _pick(vals, st_s))
            elif th_t.shape[1] or st_t.shape[1]:
                vals = (constant if constant is not None
                        else fns.changes(start, x, theta, *outs))
                if th_t.shape[1]:
                    theta = _scatter_rows(theta, th_t, _pick(vals, th_s))
                if st_t.shape[1]:
                    x = _scatter_rows(x, st_t, _pick(vals, st_s))
            if events is not None:
                x = events.fire_at_start(start, x, theta, outs, before)
            if fns.jumps is None:
                y, x, good = self._span(x, theta, outs, arrays, start, end, ts, w)
            else:
                y, x, good = self._span_with_jumps(x, theta, outs, arrays, start, end, ts, w)
            if events is not None:
                before = events.status(end, x, theta, outs, left=True)
            ok = ok & torch.all(good)
            ys.append(y)
            thetas.append(theta)
        return ys, thetas, ok

    def _span(self, x0, theta, outs, arrays, t0, t1, ts, w):
        """One period of a batch of experiments (rows): ``(x at ts (E, N, n_x), x at the
        end (E, n_x), ok (E,))``.  Forward sensitivities: ``S`` per experiment with
        respect to ``(x0, p)`` (``p`` the experiment's own constants, pre-initialization
        outputs and the right-hand-side network arrays); ``autograd``: back-propagation
        through the batched steps."""
        sens = self.sens
        p_local = torch.cat([theta] + [outs[j] for j in sens.pre_ids], 1)
        shared = [w[base: base + size] for _, _, base, size in sens.p_nets]
        rhs_arrays = [arrays[j] if j in sens.rhs_nets else {} for j in range(len(arrays))]
        grad = torch.is_grad_enabled() and (x0.requires_grad or p_local.requires_grad
                                            or any(s.requires_grad for s in shared))
        if grad and self.sensitivity == "forward":
            E = x0.shape[0]
            p = torch.cat([p_local] + [s.expand(E, -1) for s in shared], 1)
            return ForwardSensitivity.apply(x0, p, self.solvers, rhs_arrays, t0, t1, ts)
        # the networks' arrays as views taken once per solve (a view per right-hand-side
        # call would cost a zero-filled copy of w per call in the backward pass)
        net_params = [(j, self.networks.params(j, s, base))
                      for (j, _, base, _), s in zip(sens.p_nets, shared)]
        solve = self.solvers.get("plain_batched", x0.dtype)
        field = self.fields.batched_rhs(p_local, net_params, rhs_arrays)
        ys, y1, ok, steps = solve(x0, t0, t1, ts, field)
        self.solvers.n_steps += int(steps.sum())
        return ys, y1, ok

    def _span_with_jumps(self, x0, theta, outs, arrays, t0, t1, ts, w):
        """:meth:`_span` split at the right-hand side's jump times
        (:mod:`~petab_sciml.backends.torch.jumps`)."""
        from petab_sciml.backends.torch.jumps import JumpEvents, split_at_jumps

        sens = self.sens
        taus = self.fns.jumps(t0, theta, *outs)
        taus = taus.expand(x0.shape[0], taus.shape[-1])
        with torch.no_grad():
            p_local = torch.cat([theta] + [outs[j] for j in sens.pre_ids], 1)
            net_params = [(j, self.networks.params(j, w[base: base + size], base))
                          for j, _, base, size in sens.p_nets]
            rhs_arrays = [arrays[j] if j in sens.rhs_nets else {} for j in range(len(arrays))]
            field = self.fields.batched_rhs(p_local, net_params, rhs_arrays)

        def solve(x, start, end, ts_):
            return self._span(x, theta, outs, arrays, start, end, ts_, w)

        event_map = None
        if self.events is not None and any(k >= 0 for k in self.fns.jump_events):
            events = self.events
            event_map = JumpEvents(torch.tensor(self.fns.jump_events),
                                   lambda k, t, x: events.apply(k, t, x, theta, outs))
        return split_at_jumps(solve, field, taus, x0, t0, t1, ts, event_map)

    def _constant_changes(self, like):
        """Every condition change's value when all of them are numbers (``like``'s dtype
        and device), else None.  A batch then picks its rows' values from this vector
        instead of evaluating every change of every condition for every row (a
        ``(n_experiments, n_changes)`` table, quadratic in the experiments when each has
        its own condition)."""
        found = self._constants
        if found is None:
            import sympy

            exprs = [sympy.sympify(e) for e in self.plan.change_exprs]
            try:
                values = (np.array([float(e) for e in exprs], np.float64)
                          if exprs and all(e.is_number for e in exprs) else None)
            except TypeError:   # a complex number: the generated formulas decide
                values = None
            found = self._constants = {"values": values}
        if found["values"] is None:
            return None
        key = (like.dtype, like.device)
        if key not in found:
            found[key] = torch.as_tensor(found["values"], dtype=like.dtype,
                                         device=like.device)
        return found[key]


def _pick(values, index):
    """``values[i, index[i, c]]`` per row ``i``; a vector ``values`` (the same for every
    row): ``values[index]``."""
    return values[index] if values.dim() == 1 else values.gather(1, index)


def _scatter_rows(base, targets, values):
    """``base`` (rows) with ``values[i, c]`` written to column ``targets[i, c]``; targets
    equal to ``base.shape[1]`` (padding) are dropped."""
    extended = torch.cat([base, base.new_zeros((base.shape[0], 1))], 1)
    return extended.scatter(1, targets, values)[:, : base.shape[1]]

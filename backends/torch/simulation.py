"""PyTorch simulation: the objective with autograd through ``torchdiffeq.odeint``.

Why torchdiffeq: it is the established differentiable ODE solver for PyTorch, pure
PyTorch (no compiled extension, CPU and GPU), with adaptive explicit Runge-Kutta methods
(``dopri5`` default, ``dopri8``, ``bosh3``, ...), direct back-propagation through the
solver steps (exact gradients of the discrete solution, like diffrax's
``RecursiveCheckpointAdjoint``) and an adjoint mode (``odeint_adjoint``, O(1) memory in
the number of steps) for large networks or long horizons.  It evaluates the right-hand
side at the requested output times directly (``t`` = measurement times), so nothing is
interpolated afterwards.  torchode and torchdyn were the alternatives: torchode batches
independent problems well but its solver loop is slower for one small problem, torchdyn
builds on the same algorithms with a larger API surface.

Networks are built once (``torch.fx.GraphModule`` from the IR, float64, eval mode) and
called with ``torch.func.functional_call`` on views of the parameter vector; formulas
are compiled once (straight-line torch code).  Experiments are looped in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from petab_sciml.simulation.compiled import compile_plan
from petab_sciml.simulation.likelihood import log_likelihood, log_prior
from petab_sciml.simulation.plan import SimulationError, SimulationPlan

SENSITIVITIES = ("forward", "autograd", "adjoint")
SYMBOLIC_JACOBIAN_MAX = 20_000
"""Largest right-hand-side Jacobian (entries) compiled from symbolic derivatives."""
BATCHED_JACOBIAN_MIN_STATES = 24
"""Right-hand-side Jacobians take one backward pass per state up to this many states,
a batched (vmapped) backward pass above."""
METHODS = ("dopri5", "dopri8", "bosh3", "adaptive_heun", "fehlberg2")


@dataclass(frozen=True)
class TorchOptions:
    method: str = "dopri8"
    rtol: float = 1e-9
    atol: float = 1e-9
    sensitivity: str = "forward"
    """``forward``: forward sensitivities integrated with the states (error control on
    both); ``autograd``: back-propagation through the solver steps; ``adjoint``:
    ``torchdiffeq.odeint_adjoint`` (continuous adjoint, O(1) memory in the steps)."""
    max_steps: int = 100_000


class TorchExecutor:
    """Objective, gradient and simulations of one plan in PyTorch."""

    backend = "torch"

    def __init__(self, plan: SimulationPlan, options: TorchOptions | None = None):
        import torch

        from petab_sciml.errors import require

        require("torchdiffeq", "torch")
        self.plan = plan
        self.options = options or TorchOptions()
        if self.options.sensitivity not in SENSITIVITIES:
            raise SimulationError(f"unknown sensitivity {self.options.sensitivity!r}; use "
                                  f"{', '.join(SENSITIVITIES)}")
        if self.options.method not in METHODS:
            raise SimulationError(f"unknown torch ODE method {self.options.method!r}; "
                                  f"known: {', '.join(METHODS)}")
        self.fns = compile_plan(plan, "torch")
        self._jacobian = self._symbolic_jacobian() or self._hybrid_jacobian()
        self.dtype = torch.float64
        self.modules = self._networks()
        self._prepare()

    # ------------------------------------------------------------------ setup
    def _networks(self) -> list[Any]:
        """One module per network whose arrays are plain tensor attributes, so that an
        evaluation points them at views of the parameter vector once (no per-call
        re-parametrization as with ``functional_call``)."""
        from petab_sciml.backends.torch import BACKEND

        modules = []
        for net in self.plan.networks:
            module = BACKEND.build(net.network, dtype="float64")
            module.eval()
            slots = []
            for s in net.arrays:
                owner = module.get_submodule(s.layer)
                owner._parameters.pop(s.array, None)
                owner._buffers.pop(s.array, None)
                setattr(owner, s.array, None)
                slots.append((owner, s.array, s))
            modules.append((module, slots))
        return modules

    def _symbolic_jacobian(self):
        """Without networks in the right-hand side, ``f`` and its Jacobian with respect
        to ``(x, theta, pre-initialization outputs)`` compiled from sympy derivatives:
        the forward-sensitivity system then runs without autograd."""
        import sympy

        from petab_sciml.expressions import compile_expressions

        plan = self.plan
        if self.options.sensitivity != "forward" or any(n.in_rhs for n in plan.networks):
            return None
        pre = [n for n in plan.networks if n.pre_initialization]
        symbols = [sympy.Symbol(s) for s in (*plan.state_ids, *plan.theta_ids,
                                             *(o for n in pre for o in n.output_ids))]
        if len(plan.state_ids) * len(symbols) > SYMBOLIC_JACOBIAN_MAX:
            return None
        rhs = list(plan.rhs_exprs)
        exprs = rhs + [sympy.diff(f, s) for f in rhs for s in symbols]
        return compile_expressions(exprs, plan.groups(), backend="torch", name="jacobian",
                                   broadcast=False)

    def _bind(self, w) -> None:
        """Point every network array at its slice of ``w``."""
        for _, slots in self.modules:
            for owner, name, s in slots:
                object.__setattr__(owner, name, w[s.offset: s.offset + s.size].view(s.shape))

    def _prepare(self) -> None:
        import torch

        plan = self.plan
        t = lambda a, dt=torch.float64: torch.as_tensor(np.asarray(a), dtype=dt)  # noqa: E731
        self.theta0 = t(plan.theta0)
        self.mech_theta = t(plan.mech_theta_index, torch.long)
        self.free = t(plan.free_index, torch.long)
        self.arrays = [{inp.arg: t(inp.data) for inp in net.inputs if inp.kind == "array"}
                       for net in plan.networks]
        self.group_changes = [(t([a for a, _ in c], torch.long), t([b for _, b in c],
                                                                     torch.long))
                              for c in plan.group_theta_changes]
        self.periods = []
        for exp in plan.experiments:
            per = []
            for p in exp.periods:
                grid = sorted({p.start, p.end, *p.times.tolist()})
                where = [grid.index(x) for x in p.times.tolist()]
                per.append((
                    t(grid), torch.as_tensor(where, dtype=torch.long),
                    t([a for a, _ in p.theta_changes], torch.long),
                    t([b for _, b in p.theta_changes], torch.long),
                    t([a for a, _ in p.state_changes], torch.long),
                    t([b for _, b in p.state_changes], torch.long),
                ))
            self.periods.append(per)
        m = plan.measurements
        offsets, th_offsets, x_off, th_off = {}, {}, 0, 0
        for e, exp in enumerate(plan.experiments):
            for k, p in enumerate(exp.periods):
                offsets[(e, k)] = x_off
                th_offsets[(e, k)] = th_off
                x_off += len(p.times)
                th_off += 1
        self.m_x = t([offsets[(int(e), int(k))] + int(j) for e, k, j in
                      zip(m.experiment, m.period, m.time_index)], torch.long)
        self.m_th = t([th_offsets[(int(e), int(k))] for e, k in zip(m.experiment, m.period)],
                      torch.long)
        self.m_group = t([plan.experiments[int(e)].group for e in m.experiment], torch.long)
        self.m_time = t(m.time)
        self.m_value = t(m.value)
        self.m_opt, self.m_opv = t(m.obs_par_theta, torch.long), t(m.obs_par_value)
        self.m_npt, self.m_npv = t(m.noise_par_theta, torch.long), t(m.noise_par_value)
        self.obs_rows = []
        rows = []
        for i in range(len(plan.observable_ids)):
            idx = np.flatnonzero(m.observable == i)
            if idx.size:
                self.obs_rows.append((i, t(idx, torch.long)))
                rows.append(idx)
        self.m_order = t(np.argsort(np.concatenate(rows)) if rows else np.zeros(0),
                         torch.long)
        self.llh_groups = []
        for tr in range(3):
            for di in range(2):
                idx = np.flatnonzero((m.transform == tr) & (m.distribution == di))
                if idx.size:
                    self.llh_groups.append((tr, di, t(idx, torch.long)))
        self.prior_index = [t(idx, torch.long) for _, idx, _, _ in plan.priors]

    # ------------------------------------------------------------------ networks
    def _net_out(self, j, t, x, theta, outs, arrays, batched: bool = False):
        fn = self.fns.net_inputs[j]
        values = fn(t, x, theta, *outs) if fn is not None else None
        return self._net_forward(j, values, arrays, batched)

    def _net_forward(self, j, values, arrays, batched: bool = False):
        """Mapped outputs of network ``j`` from its element inputs ``values`` (all
        ``elements`` arguments concatenated) and its array inputs."""
        import torch
        from torch.func import vmap

        plan = self.plan.networks[j]
        inputs = []
        for inp in plan.inputs:
            if inp.kind == "array":
                inputs.append(arrays[j][inp.arg])
            else:
                v = values[..., inp.start: inp.start + inp.size]
                inputs.append(v.reshape(v.shape[:-1] + tuple(inp.shape)))
        module = self.modules[j][0]

        def call(*xs):
            result = module(*xs)
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            picked = []
            for arg, index in plan.output_index:
                block = result[arg] if index is None else result[arg][index]
                if block.numel() != 1:
                    raise SimulationError(f"network {plan.id!r}: output {arg} has "
                                          f"{block.numel()} elements; map single elements")
                picked.append(block.reshape(()))
            return torch.stack(picked) if picked else result[0].new_zeros((0,))

        if batched:
            return vmap(call)(*inputs)
        return call(*inputs)

    # ------------------------------------------------------------------ Jacobians
    def _hybrid_jacobian(self):
        """With networks in the right-hand side: symbolic derivatives of the formulas
        (right-hand side, network inputs) compiled once, and only the networks
        differentiated by autograd (one backward pass per network output), instead of
        one backward pass per state through everything."""
        import sympy

        from petab_sciml.expressions import compile_expressions

        plan = self.plan
        rhs_nets = [j for j, n in enumerate(plan.networks) if n.in_rhs]
        if self.options.sensitivity != "forward" or not rhs_nets:
            return None
        pre = [n for n in plan.networks if n.pre_initialization]
        base = [sympy.Symbol(s) for s in (*plan.state_ids, *plan.theta_ids,
                                          *(o for n in pre for o in n.output_ids))]
        sim_outputs = {o for n in plan.networks if not n.pre_initialization
                       for o in n.output_ids}
        for j in rhs_nets:
            used = {s.name for e in plan.networks[j].input_exprs for s in e.free_symbols}
            if used & sim_outputs:
                return None   # networks feeding each other: plain autograd
        o_rhs = [sympy.Symbol(o) for j in rhs_nets for o in plan.networks[j].output_ids]
        n_x = len(plan.state_ids)
        if n_x * (len(base) + len(o_rhs)) > SYMBOLIC_JACOBIAN_MAX:
            return None
        rhs = list(plan.rhs_exprs)
        every = base + o_rhs
        rhs_fn = compile_expressions(rhs + [sympy.diff(f, s) for f in rhs for s in every],
                                     plan.groups(), backend="torch", name="rhs_jacobian",
                                     broadcast=False)
        inputs = {}
        for j in rhs_nets:
            exprs = list(plan.networks[j].input_exprs)
            inputs[j] = compile_expressions(
                exprs + [sympy.diff(e, s) for e in exprs for s in base], plan.groups(),
                backend="torch", name=f"inputs_jacobian_{j}", broadcast=False)
        return {"rhs": rhs_fn, "inputs": inputs, "nets": rhs_nets, "m": len(base),
                "n_o": [plan.networks[j].n_outputs for j in rhs_nets]}

    def _hybrid_jac_p(self, t, y, th, outs, arrays, q, ranges, n_x, n):
        """``[f, J]`` (flat) for the forward-sensitivity system; ``J`` over ``(x, p)``."""
        import torch

        hj = self._jacobian
        m = hj["m"]
        outs = list(outs)
        pieces = {}
        for j, (a, b, start) in zip(hj["nets"], ranges):
            vals = hj["inputs"][j](t, y, th, *outs)
            n_in = self.plan.networks[j].input_exprs.__len__()
            inp = vals[:n_in].detach().requires_grad_(True)
            jac_in = vals[n_in:].view(n_in, m)
            wj = q[start: start + (b - a)].detach().requires_grad_(True)
            with torch.enable_grad():
                self._bind_net(j, wj, a)
                out = self._net_forward(j, inp, arrays)
                rows_in, rows_w = [], []
                for k in range(out.shape[0]):
                    g_in, g_w = torch.autograd.grad(out[k], (inp, wj),
                                                    retain_graph=k + 1 < out.shape[0],
                                                    allow_unused=True)
                    rows_in.append(g_in if g_in is not None else torch.zeros_like(inp))
                    rows_w.append(g_w if g_w is not None else torch.zeros_like(wj))
            outs[j] = out.detach()
            n_o = out.shape[0]
            pieces[j] = (torch.stack(rows_in) @ jac_in if n_in else
                         torch.zeros(n_o, m, dtype=y.dtype),
                         torch.stack(rows_w), start, b - a)
        vals = hj["rhs"](t, y, th, *outs)
        f = vals[:n_x]
        n_o_total = sum(hj["n_o"])
        r = vals[n_x:].view(n_x, m + n_o_total)
        jac = torch.zeros(n_x, n, dtype=y.dtype)
        jac[:, :m] = r[:, :m]
        col = m
        for j in hj["nets"]:
            d_in, d_w, start, size = pieces[j]
            n_o = d_in.shape[0]
            r_o = r[:, col: col + n_o]
            col += n_o
            jac[:, :m] += r_o @ d_in
            jac[:, n_x + start: n_x + start + size] = r_o @ d_w
        return torch.cat([f, jac.reshape(-1)])

    # ------------------------------------------------------------------ objective
    def evaluate(self, w) -> dict[str, Any]:
        """Everything at parameter vector ``w`` (a float64 tensor): ``value`` (negative
        log-posterior), ``llh``, ``logprior``, ``simulations``, ``ok``."""
        import torch

        plan = self.plan
        fns = self.fns
        n_x = len(plan.state_ids)
        n_out = [n.n_outputs for n in plan.networks]
        self._bind(w)
        theta_base = self.theta0.index_put((self.mech_theta,), w[: plan.n_mech])
        zeros_x = w.new_zeros((n_x,))

        def empty_outs(lead=()):
            return [w.new_zeros(lead + (k,)) for k in n_out]

        pre_ids = [j for j, n in enumerate(plan.networks) if n.pre_initialization]
        rhs_nets = [j for j, n in enumerate(plan.networks) if n.in_rhs]
        obs_nets = [j for j, n in enumerate(plan.networks) if n.in_observables]
        group_theta, group_outs = [], []
        for g in range(len(plan.groups_conditions)):
            t0 = float(plan.group_t0[g])
            outs = empty_outs()
            tgt, src = self.group_changes[g]
            theta = theta_base
            if tgt.numel():
                vals = fns.changes(t0, zeros_x, theta_base, *outs)
                theta = theta_base.index_put((tgt,), vals[src])
            arrays = [{k: v[g] for k, v in a.items()} for a in self.arrays]
            for j in pre_ids:
                outs[j] = self._net_out(j, t0, zeros_x, theta, outs, arrays)
            group_theta.append(theta)
            group_outs.append(outs)

        xs, thetas = [], []
        ok = True
        for e, exp in enumerate(plan.experiments):
            theta = group_theta[exp.group]
            outs = list(group_outs[exp.group])
            arrays = [{k: v[exp.group] for k, v in a.items()} for a in self.arrays]
            t0 = exp.t0
            x = fns.x0(t0, theta, *outs)
            for k, (grid, where, th_t, th_s, st_t, st_s) in enumerate(self.periods[e]):
                start = float(grid[0])
                if k == 0:
                    if st_t.numel():
                        vals = fns.changes(start, x, theta, *outs)
                        x = x.index_put((st_t,), vals[st_s])
                elif th_t.numel() or st_t.numel():
                    vals = fns.changes(start, x, theta, *outs)
                    if th_t.numel():
                        theta = theta.index_put((th_t,), vals[th_s])
                    if st_t.numel():
                        x = x.index_put((st_t,), vals[st_s])

                if grid.numel() > 1:
                    y, x, good = self._solve(x, theta, outs, arrays, grid, where, w,
                                             rhs_nets, pre_ids)
                    ok = ok and good
                    xs.append(y)
                else:
                    xs.append(x.unsqueeze(0).expand(where.numel(), n_x))
                thetas.append(theta)
        if not thetas:   # no measurements
            xs, thetas = [w.new_zeros((0, n_x))], [self.theta0[:0]]
            X, TH = xs[0], w.new_zeros((0, self.theta0.shape[0]))
        else:
            X = torch.cat(xs)[self.m_x]
            TH = torch.stack(thetas)[self.m_th]
        t_m = self.m_time
        outs_m = empty_outs((t_m.shape[0],))
        for j in pre_ids:
            outs_m[j] = torch.stack([group_outs[g][j] for g in range(len(group_outs))])[
                self.m_group]
        if obs_nets:
            arrays_m = [{k: v[self.m_group] for k, v in a.items()} for a in self.arrays]
            for j in obs_nets:
                outs_m[j] = self._net_out(j, t_m, X, TH, outs_m, arrays_m, batched=True)
        op = _overrides(TH, self.m_opt, self.m_opv)
        npar = _overrides(TH, self.m_npt, self.m_npv)
        ys, sigmas = [], []
        for i, idx in self.obs_rows:
            args = (t_m[idx], X[idx], TH[idx], *(o[idx] for o in outs_m))
            ys.append(fns.observables[i](*args, op[idx])[:, 0])
            sigmas.append(fns.noise[i](*args, npar[idx])[:, 0])
        y = torch.cat(ys)[self.m_order] if ys else w.new_zeros((0,))
        sigma = torch.cat(sigmas)[self.m_order] if sigmas else w.new_zeros((0,))
        llh = w.new_zeros(())
        for tr, di, idx in self.llh_groups:
            llh = llh + torch.sum(log_likelihood(torch, self.m_value[idx], y[idx], sigma[idx],
                                                 tr, di))
        logprior = w.new_tensor(plan.logprior_const)
        for (prior, _, _, _), idx in zip(plan.priors, self.prior_index):
            logprior = logprior + torch.sum(log_prior(torch, w[idx], prior))
        value = -(llh + logprior)
        if not ok:
            value = value * float("nan") + float("inf")
        return {"value": value, "llh": llh, "logprior": logprior, "simulations": y,
                "ok": ok}

    # ------------------------------------------------------------------ ODE solves
    def _field(self, rhs_nets, theta, outs, arrays):
        fns = self.fns

        def func(t, y):
            o = list(outs)
            for j in rhs_nets:
                o[j] = self._net_out(j, t, y, theta, o, arrays)
            return fns.rhs(t, y, theta, *o)

        return func

    def _solve(self, x0, theta, outs, arrays, grid, where, w, rhs_nets, pre_ids):
        """One period: ``(x at grid[where], x at grid[-1], ok)``."""
        import torch
        import torchdiffeq

        opts = self.options
        n_x = x0.shape[0]
        odeint_options = {"max_num_steps": opts.max_steps, "step_t": grid}
        if opts.sensitivity != "forward" or not torch.is_grad_enabled():
            kwargs: dict[str, Any] = {}
            odeint = torchdiffeq.odeint
            if opts.sensitivity == "adjoint" and torch.is_grad_enabled():
                odeint = torchdiffeq.odeint_adjoint
                # theta, network arrays and pre-initialization outputs are functions of w:
                # the gradient with respect to w covers every path
                kwargs["adjoint_params"] = (w,) if w.requires_grad else ()
            try:
                sol = odeint(self._field(rhs_nets, theta, outs, arrays), x0, grid,
                             rtol=opts.rtol, atol=opts.atol, method=opts.method,
                             options=odeint_options, **kwargs)
            except AssertionError:  # torchdiffeq: too many steps, step size underflow
                nan = x0.new_full((n_x,), float("nan"))
                return nan.expand(where.numel(), n_x), nan, False
            return sol[where], sol[-1], True
        # forward sensitivities: p = (theta, pre-initialization outputs, rhs arrays)
        n_theta = theta.shape[0]
        pieces = [theta] + [outs[j] for j in pre_ids]
        ranges = []
        for j in rhs_nets:
            slots = self.plan.networks[j].arrays
            if slots:
                a, b = slots[0].offset, slots[-1].offset + slots[-1].size
                ranges.append((j, a, b, sum(t.numel() for t in pieces)))
                pieces.append(w[a:b])
        p = torch.cat(pieces)
        pre_offsets = np.cumsum([n_theta] + [outs[j].numel() for j in pre_ids])

        def field_p(t, y, q):
            th = q[:n_theta]
            o = list(outs)
            for i, j in enumerate(pre_ids):
                o[j] = q[pre_offsets[i]: pre_offsets[i + 1]]
            for j, a, b, start in ranges:
                self._bind_net(j, q[start: start + (b - a)], a)
            return self._field(rhs_nets, th, o, arrays)(t, y)

        try:
            jac_p = None
            n = n_x + p.shape[0]
            if isinstance(self._jacobian, dict):
                net_ranges = [(a, b, start) for _, a, b, start in ranges]

                def jac_p(t, y, q):
                    th = q[:n_theta]
                    o = list(outs)
                    for i, j in enumerate(pre_ids):
                        o[j] = q[pre_offsets[i]: pre_offsets[i + 1]]
                    return self._hybrid_jac_p(t, y, th, o, arrays, q, net_ranges, n_x, n)
            elif self._jacobian is not None:
                def jac_p(t, y, q):
                    th = q[:n_theta]
                    o = list(outs)
                    for i, j in enumerate(pre_ids):
                        o[j] = q[pre_offsets[i]: pre_offsets[i + 1]]
                    return self._jacobian(t, y, th, *o)

            ys, y1 = _ForwardSensitivity.apply(x0, p, field_p, jac_p, grid, where, opts,
                                               odeint_options)
            good = True
        except AssertionError:
            nan = x0.new_full((n_x,), float("nan"))
            ys, y1, good = nan.expand(where.numel(), n_x), nan, False
        self._bind(w)
        return ys, y1, good

    def _bind_net(self, j, flat, base) -> None:
        for owner, name, s in self.modules[j][1]:
            start = s.offset - base
            object.__setattr__(owner, name, flat[start: start + s.size].view(s.shape))

    # ------------------------------------------------------------------ entry points
    def run(self, kind: str, w: np.ndarray) -> tuple[dict, Any] | dict:
        """``value``: outputs dict; ``value_and_grad``: (outputs dict, gradient wrt the
        free parameters).  Runs single-threaded: the tensors are tiny, and intra-op
        threads only wait for each other (badly so on a busy machine)."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._run(kind, w)
        finally:
            torch.set_num_threads(threads)

    def _run(self, kind: str, w: np.ndarray) -> tuple[dict, Any] | dict:
        import torch

        w = torch.as_tensor(np.asarray(w, np.float64))
        if kind == "value":
            with torch.no_grad():
                return self.evaluate(w)
        z = w[self.free].clone().requires_grad_(True)
        full = w.index_put((self.free,), z)
        out = self.evaluate(full)
        if z.numel():
            (grad,) = torch.autograd.grad(out["value"], z, allow_unused=True)
            if grad is None:
                grad = torch.zeros_like(z)
        else:
            grad = torch.zeros((0,), dtype=torch.float64)
        return out, grad


def _overrides(theta, index, values):
    import torch

    if index.shape[1] == 0:
        return theta.new_zeros((theta.shape[0], 0))
    picked = torch.gather(theta, 1, index.clamp(min=0))
    return torch.where(index >= 0, picked, values)


class _ForwardSensitivity:
    """``torch.autograd.Function`` (created lazily so that importing this module does
    not import torch): integrates ``x`` and ``S = dx/d(x0, p)`` together and contracts
    cotangents with ``S`` in the backward pass."""

    _fn = None

    @classmethod
    def apply(cls, *args):
        if cls._fn is None:
            cls._fn = _make_forward_sensitivity()
        return cls._fn.apply(*args)


def _make_forward_sensitivity():
    import torch
    import torchdiffeq

    class ForwardSensitivity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x0, p, field_p, jac_p, grid, where, opts, odeint_options):
            n_x, n_p = x0.shape[0], p.shape[0]
            n = n_x + n_p
            x0d, pd = x0.detach(), p.detach()
            eye = torch.eye(n_x, dtype=x0.dtype)

            def aug(t, state):
                x = state[:n_x]
                sens = state[n_x:].view(n_x, n)
                if jac_p is not None:   # compiled symbolic Jacobian, no autograd
                    values = jac_p(t, x, pd)
                    fx = values[:n_x]
                    jac = values[n_x:].view(n_x, n)
                    ds = jac[:, :n_x] @ sens
                    ds[:, n_x:] += jac[:, n_x:]
                    return torch.cat([fx, ds.reshape(-1)])
                with torch.enable_grad():
                    xr = x.detach().requires_grad_(True)
                    pr = pd.detach().requires_grad_(True)
                    fx = field_p(t, xr, pr)
                    if not fx.requires_grad:   # the right-hand side is constant
                        jx, jp = None, None
                    elif n_x <= BATCHED_JACOBIAN_MIN_STATES:
                        # one backward pass per state: cheaper than a vmapped backward
                        # for small models
                        rows = [torch.autograd.grad(fx[i], (xr, pr), retain_graph=True,
                                                    allow_unused=True) for i in range(n_x)]
                        jx = torch.stack([r[0] if r[0] is not None else torch.zeros_like(x)
                                          for r in rows])
                        jp = torch.stack([r[1] if r[1] is not None else torch.zeros_like(pd)
                                          for r in rows])
                    else:
                        jx, jp = torch.autograd.grad(fx, (xr, pr), eye, is_grads_batched=True,
                                                     allow_unused=True)
                jx = torch.zeros(n_x, n_x, dtype=x.dtype) if jx is None else jx
                jp = torch.zeros(n_x, n_p, dtype=x.dtype) if jp is None else jp
                ds = jx @ sens
                ds[:, n_x:] += jp
                return torch.cat([fx.detach(), ds.reshape(-1)])

            s0 = torch.zeros(n_x, n, dtype=x0.dtype)
            s0[:, :n_x] = eye
            sol = torchdiffeq.odeint(aug, torch.cat([x0d, s0.reshape(-1)]), grid,
                                     rtol=opts.rtol, atol=opts.atol, method=opts.method,
                                     options=odeint_options)
            ys = sol[where, :n_x]
            s_ts = sol[where, n_x:].reshape(-1, n_x, n)
            y1 = sol[-1, :n_x]
            s1 = sol[-1, n_x:].reshape(n_x, n)
            ctx.save_for_backward(s_ts, s1)
            ctx.n_x = n_x
            return ys, y1

        @staticmethod
        def backward(ctx, ct_ys, ct_end):
            s_ts, s1 = ctx.saved_tensors
            g = torch.einsum("ti,tij->j", ct_ys, s_ts) + ct_end @ s1
            n_x = ctx.n_x
            return g[:n_x], g[n_x:], None, None, None, None, None, None

    return ForwardSensitivity

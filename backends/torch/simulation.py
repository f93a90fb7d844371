"""PyTorch simulation: the objective of a PEtab SciML problem with autograd.

Gradients (``sensitivity``):

* ``"forward"`` (default): forward sensitivities ``S = dx/d(x0, p)`` integrated with the
  states in one solve of :mod:`petab_sciml.backends.torch.ode` (our adaptive
  Runge-Kutta loop, eager or compiled whole by ``torch.compile``; error control covers
  ``S`` too, as in CVODES/AMICI), inside a ``torch.autograd.Function`` whose backward
  contracts the cotangents with ``S``.  The right-hand side Jacobian comes from symbolic
  derivatives when no network sits in the right-hand side, else from ``torch.func.vjp``
  (one reverse pass per state, vmapped).  ``p`` gathers everything the right-hand side
  reads: the constants ``theta``, the pre-initialization network outputs and the arrays
  of the networks inside the right-hand side.
* ``"autograd"``: back-propagation through the solver steps: experiments in batches
  (:func:`~petab_sciml.backends.torch.ode.make_batched_solve`, even a single one; the
  right-hand side a closure of a few operations, :meth:`TorchExecutor._batched_rhs`;
  ``dopri8`` outputs from its dense output, as the JAX backend's), torchdiffeq's
  solver where they are not batched;
* ``"adjoint"``: ``torchdiffeq.odeint_adjoint`` (continuous adjoint, O(1) memory in the
  steps).

``compile=True`` compiles each solve (``torch.compile``, inductor) on first use: seconds
to tens of seconds once per problem, then solves cost milliseconds instead of a Python
loop of tensor operations per step.  Networks are called with
``torch.func.functional_call`` on views of the parameter vector ``w``, so the same code
serves the numpy API (``run``) and the native module (gradients flow to ``w``).
Networks inside the right-hand side run in eval mode during solves (an adaptive solver
needs a deterministic right-hand side); the others in their module's mode.

Experiments of one structure are solved as one batched solve (``batch_experiments``,
:func:`~petab_sciml.backends.torch.ode.make_batched_solve`): states ``(E, n_x)``, each
experiment with its own step sizes, so results equal the one-at-a-time path to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from petab_sciml.backends.torch.ordered import order_small_products, small_matmul
from petab_sciml.simulation.compiled import compile_plan
from petab_sciml.simulation.likelihood import log_likelihood, log_prior_at
from petab_sciml.simulation.plan import SimulationError, SimulationPlan

SENSITIVITIES = ("forward", "autograd", "adjoint")
SYMBOLIC_JACOBIAN_MAX = 20_000
"""Largest right-hand-side Jacobian (entries) compiled from symbolic derivatives."""
UNROLL_STAGES_MAX = 256
"""``unroll_stages=None``: compiled solves unroll their stages when the right-hand side
has symbolic derivatives (no network in it) and it and its Jacobian are at most this
many expressions."""
FORWARD_METHODS = ("dopri5", "dopri8")
TORCHDIFFEQ_METHODS = ("dopri5", "dopri8", "bosh3", "adaptive_heun", "fehlberg2")
FLOAT32_TOLERANCE = 1e-5
FORWARD_BATCH_ENTRIES = 2**21
"""Most states and forward sensitivities (entries) of one batched solve: larger batches
are split (about 16 MB per state vector in float64, of which a step holds ~15)."""
STEADY_STATE_DOUBLINGS = 60
"""A steady-state period gives up (a failed solve) after horizons 1, 2, ..., 2**59."""
"""Smallest ``rtol``/``atol`` used when the problem runs in float32 (tighter tolerances
are below float32's resolution and make the step size collapse)."""


@dataclass(frozen=True)
class TorchOptions:
    method: str = "dopri8"
    rtol: float = 1e-8
    atol: float = 1e-8
    sensitivity: str = "forward"
    """``forward``: forward sensitivities integrated with the states (error control on
    both); ``autograd``: back-propagation through the solver's steps (batched solves,
    else torchdiffeq's); ``adjoint``:
    ``torchdiffeq.odeint_adjoint``."""
    max_steps: int = 100_000
    compile: bool = False
    """Compile every solve with ``torch.compile`` (``forward`` sensitivities only)."""
    unroll_stages: bool | None = None
    """Compiled solves (``compile=True``): trace the right-hand side once per Runge-Kutta
    stage (``True``) instead of looping over the stages (``False``); ``None``: unrolled
    when the right-hand side has no network and symbolic derivatives (at most
    :data:`UNROLL_STAGES_MAX` expressions with its Jacobian), else looped.  Unrolled,
    a step saves the stage loop's bookkeeping (suite cases 002/004: objective +
    gradient 1.4-1.6x faster) for more compilation, which grows with the right-hand
    side (a network in it is traced once per stage: 001 compiles about 3x longer,
    ``benchmarks/bench_torch_stages.py``)."""
    ordered_products: bool | None = None
    """Compute the networks' small Linear products
    (:func:`petab_sciml.batch_invariance.takes_ordered_product`) as elementwise products
    summed in one fixed order (``backends/torch/ordered.py``), so that a batched solve
    gives each experiment the bits it gets solved alone.  ``None``: where the solves are
    eager and the right-hand side may have kinks (``SimulationPlan.rhs_smooth`` false:
    a ReLU network, a piecewise formula); there a last-bit difference can flip the step
    controller's decisions (suite case 038: batched and unbatched were 1e-9 apart in the
    value and 0.04 in the ``autograd`` gradient, now 0).  Smooth right-hand sides keep
    ``torch.nn.Linear``: ordered products cost more in eager PyTorch (the Lotka-Volterra
    UDE with ``autograd``: 1.05x at one experiment, 1.5x at 1,000,
    ``benchmarks/bench_ordered_products.py``), and without kinks batched and unbatched
    agree to 1e-10 with the library's products."""
    batch_experiments: bool = True
    """Solve experiments of the same structure (same number of periods, no steady state)
    as one batched solve (:func:`~petab_sciml.backends.torch.ode.make_batched_solve`:
    states ``(n_experiments, n_states)``, each experiment with its own step sizes) when
    there are at least two of them (``autograd``: from one), the solves are eager
    (``compile=False``) and the sensitivity is ``forward`` or ``autograd`` with
    ``dopri5``/``dopri8``; with forward sensitivities, batches of at most
    :data:`FORWARD_BATCH_ENTRIES` states and sensitivities.  False: one solve after
    another (the unbatched reference path; ``autograd``: each experiment a batch of
    one, the same solver)."""


class TorchExecutor:
    """Objective, gradient and simulations of one plan in PyTorch.

    ``modules`` (one ``torch.nn.Module`` per network of the plan, in plan order), when
    given, decide each network's train/eval mode (the native module passes its own);
    their parameters are never read: every call takes its arrays from ``w``.  The
    networks called are built here from the IR: plain modules for ``functional_call``
    inside compiled solves, and copies whose arrays are plain attributes pointed at views
    of ``w`` for eager code (no per-call re-parametrisation).
    """

    backend = "torch"

    def __init__(self, plan: SimulationPlan, options: TorchOptions | None = None,
                 modules: list[Any] | None = None):
        from petab_sciml.errors import require

        require("torchdiffeq", "torch")
        self.plan = plan
        self.options = opts = options or TorchOptions()
        if opts.sensitivity not in SENSITIVITIES:
            raise SimulationError(f"unknown sensitivity {opts.sensitivity!r}; use "
                                  f"{', '.join(SENSITIVITIES)}")
        methods = FORWARD_METHODS if opts.sensitivity == "forward" else TORCHDIFFEQ_METHODS
        if opts.method not in methods:
            raise SimulationError(f"unknown torch ODE method {opts.method!r} for "
                                  f"sensitivity {opts.sensitivity!r}; known: "
                                  f"{', '.join(methods)}")
        if opts.compile and opts.sensitivity != "forward":
            raise SimulationError("compile=True needs sensitivity='forward'")
        self.fns = compile_plan(plan, "torch")
        self.modules = self._build_networks()
        self.bound = self._bound_networks()
        self.ordered_products = (opts.ordered_products if opts.ordered_products is not None
                                 else not opts.compile and not plan.rhs_smooth)
        if self.ordered_products:
            for module in (*self.modules, *(m for m, _ in self.bound)):
                order_small_products(module)
        self.mode_of = list(modules) if modules is not None else list(self.modules)
        self.pre_ids = [j for j, n in enumerate(plan.networks) if n.pre_initialization]
        self.rhs_nets = [j for j, n in enumerate(plan.networks) if n.in_rhs]
        self.obs_nets = [j for j, n in enumerate(plan.networks) if n.in_observables]
        self._jacobian = self._symbolic_jacobian()
        if opts.unroll_stages is None:
            small = (self._jacobian is not None
                     and len(self._jacobian.expressions) <= UNROLL_STAGES_MAX)
            self.options = opts = replace(opts, unroll_stages=small)
        self._p_layout()
        self._prepare()
        self._prepare_batches()
        self._solvers: dict[tuple, Any] = {}
        self._transparent: dict[int, bool] = {}
        self._tensor_cache: dict[tuple, dict[str, Any]] = {}
        self.n_steps = 0
        """Steps of the last evaluation's solves (forward sensitivities)."""

    # ------------------------------------------------------------------ setup
    def _build_networks(self) -> list[Any]:
        from petab_sciml.backends.torch import BACKEND

        modules = []
        for net in self.plan.networks:
            module = BACKEND.build(net.network, dtype="float64")
            module.eval()
            modules.append(module)
        return modules

    def _bound_networks(self) -> list[tuple[Any, list]]:
        """Per network: a module whose arrays are plain tensor attributes, and its slots."""
        from petab_sciml.backends.torch import BACKEND

        out = []
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
            out.append((module, slots))
        return out

    def _sync_modes(self) -> None:
        for (module, _), plain, source in zip(self.bound, self.modules, self.mode_of):
            if module.training != source.training:
                module.train(source.training)
                plain.train(source.training)

    def _symbolic_jacobian(self):
        """Without networks in the right-hand side, ``[f, J]`` with ``J`` the Jacobian with
        respect to ``(x, theta, pre-initialization outputs)``, compiled from sympy
        derivatives: the sensitivity system then needs no autograd."""
        import sympy

        from petab_sciml.expressions import compile_expressions

        plan = self.plan
        if self.options.sensitivity != "forward" or self.rhs_nets:
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

    def _p_layout(self) -> None:
        """Where ``theta``, the pre-initialization outputs and the right-hand-side network
        arrays sit in the sensitivity parameter vector ``p``."""
        plan = self.plan
        n_theta = len(plan.theta_ids)
        offset = n_theta
        self.p_pre = []
        for j in self.pre_ids:
            self.p_pre.append((j, offset, offset + plan.networks[j].n_outputs))
            offset += plan.networks[j].n_outputs
        self.p_nets = []   # (net index, start in p, start in w, size)
        for j in self.rhs_nets:
            slots = plan.networks[j].arrays
            if slots:
                a, b = slots[0].offset, slots[-1].offset + slots[-1].size
                self.p_nets.append((j, offset, a, b - a))
                offset += b - a
        self.n_p = offset

    def _prepare(self) -> None:
        """Index and data arrays (numpy; turned into tensors per device and dtype)."""
        plan = self.plan
        d: dict[str, Any] = {}
        d["theta0"] = plan.theta0.astype(np.float64)
        d["mech_theta"] = plan.mech_theta_index.astype(np.int64)
        d["free"] = plan.free_index.astype(np.int64)
        self.array_keys = []
        for j, net in enumerate(plan.networks):
            for inp in net.inputs:
                if inp.kind == "array":
                    d[f"arr_{j}_{inp.arg}"] = np.asarray(inp.data, np.float64)
                    self.array_keys.append((j, inp.arg))
        for g, changes in enumerate(plan.group_theta_changes):
            d[f"g{g}_tgt"] = np.array([a for a, _ in changes], np.int64)
            d[f"g{g}_src"] = np.array([b for _, b in changes], np.int64)
        n_out = max((len(p.times) for e in plan.experiments for p in e.periods), default=0)
        self.n_out_max = max(1, n_out)
        self.periods: list[list[dict[str, Any]]] = []
        for e, exp in enumerate(plan.experiments):
            per = []
            for k, p in enumerate(exp.periods):
                key = f"e{e}p{k}"
                times = np.asarray(p.times, np.float64)
                n_times = int(times.size)
                end = p.end
                if p.steady_state:
                    # integrate to the last finite time here; _solve_steady goes on to
                    # the steady state, where the inf points are read
                    times = times[np.isfinite(times)]
                    end = float(times[-1]) if times.size else p.start
                padded = np.full(self.n_out_max, end, np.float64)
                padded[: times.size] = np.clip(times, p.start, end)
                d[f"{key}_ts"] = padded
                d[f"{key}_grid"] = np.array(sorted({p.start, end, *times.tolist()}))
                d[f"{key}_where"] = np.array([sorted({p.start, end, *times.tolist()})
                                              .index(x) for x in times.tolist()], np.int64)
                d[f"{key}_th_t"] = np.array([a for a, _ in p.theta_changes], np.int64)
                d[f"{key}_th_s"] = np.array([b for _, b in p.theta_changes], np.int64)
                d[f"{key}_st_t"] = np.array([a for a, _ in p.state_changes], np.int64)
                d[f"{key}_st_s"] = np.array([b for _, b in p.state_changes], np.int64)
                per.append({"key": key, "start": float(p.start), "end": float(end),
                            "n_times": int(times.size), "steady": p.steady_state,
                            "n_inf": n_times - int(times.size)})
            self.periods.append(per)
        m = plan.measurements
        offsets, th_offsets, x_off, th_off = {}, {}, 0, 0
        for e, exp in enumerate(plan.experiments):
            for k, p in enumerate(exp.periods):
                offsets[(e, k)] = x_off
                th_offsets[(e, k)] = th_off
                x_off += len(p.times)
                th_off += 1
        d["m_x"] = np.array([offsets[(int(e), int(k))] + int(j) for e, k, j in
                             zip(m.experiment, m.period, m.time_index)], np.int64)
        d["m_th"] = np.array([th_offsets[(int(e), int(k))] for e, k in
                              zip(m.experiment, m.period)], np.int64)
        d["m_group"] = np.array([plan.experiments[int(e)].group for e in m.experiment],
                                np.int64)
        d["m_time"] = m.time.astype(np.float64)
        d["m_value"] = m.value.astype(np.float64)
        d["m_opt"], d["m_opv"] = m.obs_par_theta.astype(np.int64), m.obs_par_value
        d["m_npt"], d["m_npv"] = m.noise_par_theta.astype(np.int64), m.noise_par_value
        self.obs_rows = []
        rows = []
        for i in range(len(plan.observable_ids)):
            idx = np.flatnonzero(m.observable == i)
            if idx.size:
                d[f"obs_{i}"] = idx.astype(np.int64)
                self.obs_rows.append((i, f"obs_{i}"))
                rows.append(idx)
        d["m_order"] = (np.argsort(np.concatenate(rows)) if rows else
                        np.zeros(0)).astype(np.int64)
        self.llh_groups = []
        for tr in range(3):
            for di in range(2):
                idx = np.flatnonzero((m.transform == tr) & (m.distribution == di))
                if idx.size:
                    d[f"llh_{tr}_{di}"] = idx.astype(np.int64)
                    self.llh_groups.append((tr, di, f"llh_{tr}_{di}"))
        for i, (_, idx, *_) in enumerate(plan.priors):
            d[f"prior_{i}"] = np.asarray(idx, np.int64)
        self._numpy_data = d

    def _prepare_batches(self) -> None:
        """Experiments solved together (``batch_experiments``): those of one number of
        periods and without a steady-state period form a batch when there are at least
        two; each period's start, end, padded output times and change indices stacked
        per batch (targets padded with one index past the end: dropped).  ``autograd``
        with ``batch_experiments=False``: every experiment a batch of its own (one solve
        after another with the same solver, the reference for the batched path)."""
        plan, o = self.plan, self.options
        self.batches: list[tuple[int, list[int]]] = []
        batchable = (not o.compile and o.method in FORWARD_METHODS
                     and o.sensitivity in ("forward", "autograd"))
        if not batchable or not (o.batch_experiments or o.sensitivity == "autograd"):
            return
        by_p: dict[int, list[int]] = {}
        for e, exp in enumerate(plan.experiments):
            if not any(p["steady"] for p in self.periods[e]):
                by_p.setdefault(len(exp.periods), []).append(e)
        d = self._numpy_data
        n_theta, n_x = len(plan.theta_ids), len(plan.state_ids)
        size = len(plan.state_ids) * (1 + len(plan.state_ids) + self.n_p)
        most = (1 if not o.batch_experiments
                else max(1, FORWARD_BATCH_ENTRIES // size) if o.sensitivity == "forward"
                else len(plan.experiments))
        chunks = [(P, exps[i: i + most]) for P, exps in sorted(by_p.items())
                  for i in range(0, len(exps), most)]
        # autograd: even one experiment goes through the batched solver (our loop costs
        # less per step than torchdiffeq's, and a lone experiment then takes the steps it
        # takes inside a batch); forward sensitivities: from two on
        least = 1 if o.sensitivity == "autograd" else 2
        for P, exps in chunks:
            if len(exps) < least:
                continue
            b = len(self.batches)
            self.batches.append((P, exps))
            d[f"b{b}_group"] = np.array([plan.experiments[e].group for e in exps], np.int64)
            for k in range(P):
                pers = [self.periods[e][k] for e in exps]
                n = max(1, max(q["n_times"] for q in pers))
                d[f"b{b}p{k}_start"] = np.array([q["start"] for q in pers], np.float64)
                d[f"b{b}p{k}_end"] = np.array([q["end"] for q in pers], np.float64)
                d[f"b{b}p{k}_ts"] = np.stack([d[f"{q['key']}_ts"][:n] for q in pers])
                for kind, dummy in (("th", n_theta), ("st", n_x)):
                    tgts = [d[f"{q['key']}_{kind}_t"] for q in pers]
                    srcs = [d[f"{q['key']}_{kind}_s"] for q in pers]
                    width = max(t.size for t in tgts)
                    tgt = np.full((len(exps), width), dummy, np.int64)
                    src = np.zeros((len(exps), width), np.int64)
                    for i, (t, s_) in enumerate(zip(tgts, srcs)):
                        tgt[i, : t.size], src[i, : s_.size] = t, s_
                    d[f"b{b}p{k}_{kind}_t"], d[f"b{b}p{k}_{kind}_s"] = tgt, src

    def tensors(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        """The data arrays on ``like``'s device, floats in its dtype (cached)."""
        key = (like.device, like.dtype)
        found = self._tensor_cache.get(key)
        if found is None:
            found = {}
            for name, value in self._numpy_data.items():
                value = np.asarray(value)
                dtype = like.dtype if value.dtype.kind == "f" else torch.int64
                found[name] = torch.as_tensor(value, dtype=dtype, device=like.device)
            self._tensor_cache[key] = found
        return found

    # ------------------------------------------------------------------ networks
    def _net_params(self, j: int, flat: torch.Tensor, base: int) -> dict[str, torch.Tensor]:
        """``{"layer.array": view}`` of network ``j``'s arrays in ``flat`` (which starts at
        offset ``base`` of ``w``)."""
        out = {}
        for s in self.plan.networks[j].arrays:
            start = s.offset - base
            view = flat[start: start + s.size].view(s.shape)
            if s.array == "num_batches_tracked":
                view = view.round().to(torch.int64)
            out[s.key] = view
        return out

    def _net_out(self, j, t, x, theta, outs, arrays, params, batched: bool = False,
                 functional: bool = False):
        fn = self.fns.net_inputs[j]
        values = fn(t, x, theta, *outs) if fn is not None else None
        return self._net_forward(j, values, arrays, params, batched, functional)

    def _net_forward(self, j, values, arrays, params, batched: bool = False,
                     functional: bool = False):
        """Mapped outputs of network ``j`` from its element inputs ``values`` (every
        ``elements`` argument concatenated) and its array inputs ``arrays[j]``, with its
        arrays ``params`` (``{"layer.array": tensor}``).  ``functional`` calls
        ``functional_call`` (traceable by ``torch.compile``), else the bound copy."""
        from torch.func import functional_call, vmap

        plan = self.plan.networks[j]
        inputs = []
        for inp in plan.inputs:
            if inp.kind == "array":
                inputs.append(arrays[j][inp.arg])
            else:
                v = values[..., inp.start: inp.start + inp.size]
                inputs.append(v.reshape(v.shape[:-1] + tuple(inp.shape)))
        if functional:
            module = self.modules[j]
        else:
            module = self.bound[j][0]
            for owner, name, slot in self.bound[j][1]:
                object.__setattr__(owner, name, params[slot.key])

        def call(*xs):
            result = (functional_call(module, params, xs, strict=False) if functional
                      else module(*xs))
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
            return vmap(call, randomness="different")(*inputs)
        return call(*inputs)

    # ------------------------------------------------------------------ right-hand sides
    def _field_p(self, t, x, p, arrays, functional: bool = True):
        """``dx/dt`` with everything read from the sensitivity parameters ``p``."""
        plan = self.plan
        n_theta = len(plan.theta_ids)
        theta = p[:n_theta]
        outs = [p.new_zeros((n.n_outputs,)) for n in plan.networks]
        for j, a, b in self.p_pre:
            outs[j] = p[a:b]
        for j, start, base, size in self.p_nets:
            params = self._net_params(j, p[start: start + size], base)
            outs[j] = self._net_out(j, t, x, theta, outs, arrays, params,
                                    functional=functional)
        return self.fns.rhs(t, x, theta, *outs)

    def _plain_field(self, t, y, args):
        p, arrays = args
        return self._field_p(t, y, p, arrays, functional=self.options.compile)

    def _aug_field(self, t, y, args):
        """The forward-sensitivity system: ``[f, (J_x S + [0 | J_p]).ravel()]``."""
        from torch.func import vjp, vmap

        p, arrays = args
        n_x = len(self.plan.state_ids)
        n = n_x + p.shape[0]
        x = y[:n_x]
        sens = y[n_x:].view(n_x, n)
        if self._jacobian is not None:
            plan = self.plan
            theta = p[: len(plan.theta_ids)]
            outs = [p.new_zeros((net.n_outputs,)) for net in plan.networks]
            for j, a, b in self.p_pre:
                outs[j] = p[a:b]
            values = self._jacobian(t, x, theta, *outs)
            fx = values[:n_x]
            jac = values[n_x:].view(n_x, n)
            jx, jp = jac[:, :n_x], jac[:, n_x:]
        elif not self.options.compile:
            fx, jx, jp = self._eager_jacobian(t, x, p, arrays)
        else:
            fx, pull = vjp(lambda x_, p_: self._field_p(t, x_, p_, arrays), x, p)
            jx, jp = vmap(pull)(torch.eye(n_x, dtype=y.dtype, device=y.device))
        # J_x S as a broadcast product and sum, which inductor fuses with the rest (a
        # matmul is a separate library call per stage)
        ds = (jx[:, :, None] * sens[None]).sum(1) + torch.cat([torch.zeros_like(jx), jp], 1)
        return torch.cat([fx, ds.reshape(-1)])

    def _eager_jacobian(self, t, x, p, arrays):
        """``f``, ``df/dx``, ``df/dp`` for eager solves with networks in the right-hand
        side: symbolic derivatives of the formulas (compiled once, :meth:`_hybrid`) and
        autograd through the networks only, one backward pass per network output (much
        cheaper in eager mode than ``torch.func`` transforms of the whole field)."""
        hyb = self._hybrid()
        plan = self.plan
        n_x, n_theta = len(plan.state_ids), len(plan.theta_ids)
        m = hyb["m"]
        theta = p[:n_theta]
        outs = [p.new_zeros((net.n_outputs,)) for net in plan.networks]
        for j, a, b in self.p_pre:
            outs[j] = p[a:b]
        pieces = []
        for j, start, base, size in self.p_nets:
            vals = hyb["inputs"][j](t, x, theta, *outs)
            n_in = len(plan.networks[j].input_exprs)
            inp = vals[:n_in].detach().requires_grad_(True)
            jac_in = vals[n_in:].view(n_in, m)
            wj = p[start: start + size].detach().requires_grad_(True)
            with torch.enable_grad():
                out = self._net_forward(j, inp, arrays, self._net_params(j, wj, base))
                rows_in, rows_w = [], []
                for k in range(out.shape[0]):
                    g_in, g_w = torch.autograd.grad(out[k], (inp, wj),
                                                    retain_graph=k + 1 < out.shape[0],
                                                    allow_unused=True)
                    rows_in.append(g_in if g_in is not None else torch.zeros_like(inp))
                    rows_w.append(g_w if g_w is not None else torch.zeros_like(wj))
            outs[j] = out.detach()
            n_o = out.shape[0]
            d_in = (small_matmul(torch.stack(rows_in), jac_in) if n_in else
                    x.new_zeros((n_o, m)))
            pieces.append((d_in, torch.stack(rows_w) if n_o else x.new_zeros((0, size)),
                           start, size, n_o))
        vals = hyb["rhs"](t, x, theta, *outs)
        fx = vals[:n_x]
        r = vals[n_x:].view(n_x, m + sum(pc[4] for pc in pieces))
        jac = x.new_zeros((n_x, n_x + p.shape[0]))
        jac[:, :m] = r[:, :m]
        col = m
        for d_in, d_w, start, size, n_o in pieces:
            r_o = r[:, col: col + n_o]
            col += n_o
            jac[:, :m] += small_matmul(r_o, d_in)
            jac[:, n_x + start: n_x + start + size] = small_matmul(r_o, d_w)
        return fx, jac[:, :n_x], jac[:, n_x:]

    def _hybrid_ok(self) -> bool:
        """Whether :meth:`_hybrid` applies (no network reads another's outputs inside
        the right-hand side)."""
        try:
            self._hybrid()
        except SimulationError:
            return False
        return True

    def _eager_jacobian_batched(self, t, x, p, arrays):
        """:meth:`_eager_jacobian` of a batch of experiments (rows of ``x`` and ``p``):
        the networks run once on the batch with per-experiment copies of their arrays
        (``vmap``), so one backward pass per network output gives every experiment's
        derivatives."""
        from torch.func import vmap

        hyb = self._hybrid()
        plan = self.plan
        E = x.shape[0]
        n_x, n_theta = len(plan.state_ids), len(plan.theta_ids)
        m = hyb["m"]
        theta = p[:, :n_theta]
        outs = [p.new_zeros((E, net.n_outputs)) for net in plan.networks]
        for j, a, b in self.p_pre:
            outs[j] = p[:, a:b]
        pieces = []
        for j, start, base, size in self.p_nets:
            vals = hyb["inputs"][j](t, x, theta, *outs)
            n_in = len(plan.networks[j].input_exprs)
            inp = vals[:, :n_in].detach().requires_grad_(True)
            jac_in = vals[:, n_in:].reshape(E, n_in, m)
            wj = p[:, start: start + size].detach().requires_grad_(True)

            def forward(inp_, w_, arrays_, j=j, base=base):
                return self._net_forward(j, inp_, arrays_, self._net_params(j, w_, base),
                                         functional=True)

            with torch.enable_grad():
                out = vmap(forward, randomness="different")(inp, wj, arrays)
                n_o = out.shape[1]
                rows_in, rows_w = [], []
                for k in range(n_o):
                    g_in, g_w = torch.autograd.grad(out[:, k].sum(), (inp, wj),
                                                    retain_graph=k + 1 < n_o,
                                                    allow_unused=True)
                    rows_in.append(g_in if g_in is not None else torch.zeros_like(inp))
                    rows_w.append(g_w if g_w is not None else torch.zeros_like(wj))
            outs[j] = out.detach()
            d_in = (small_matmul(torch.stack(rows_in, 1), jac_in) if n_in
                    else x.new_zeros((E, n_o, m)))
            d_w = torch.stack(rows_w, 1) if n_o else x.new_zeros((E, 0, size))
            pieces.append((d_in, d_w, start, size, n_o))
        vals = hyb["rhs"](t, x, theta, *outs)
        fx = vals[:, :n_x]
        r = vals[:, n_x:].reshape(E, n_x, m + sum(pc[4] for pc in pieces))
        jac = x.new_zeros((E, n_x, n_x + p.shape[1]))
        jac[:, :, :m] = r[:, :, :m]
        col = m
        for d_in, d_w, start, size, n_o in pieces:
            r_o = r[:, :, col: col + n_o]
            col += n_o
            jac[:, :, :m] += small_matmul(r_o, d_in)
            jac[:, :, n_x + start: n_x + start + size] = small_matmul(r_o, d_w)
        return fx, jac[:, :, :n_x], jac[:, :, n_x:]

    def _hybrid(self) -> dict[str, Any]:
        """Symbolic derivatives for :meth:`_eager_jacobian` (compiled on first use): the
        right-hand side with respect to ``(x, theta, pre-initialization outputs)`` and to
        the right-hand-side networks' outputs, and each such network's element inputs
        with respect to ``(x, theta, pre-initialization outputs)``."""
        found = getattr(self, "_hybrid_fns", None)
        if found is not None:
            return found
        import sympy

        from petab_sciml.expressions import compile_expressions

        plan = self.plan
        sim_outputs = {o for n in plan.networks if not n.pre_initialization
                       for o in n.output_ids}
        for j in self.rhs_nets:
            used = {s.name for e in plan.networks[j].input_exprs for s in e.free_symbols}
            if used & sim_outputs:
                raise SimulationError(f"network {plan.networks[j].id!r} reads the outputs "
                                      "of another network inside the right-hand side: use "
                                      "compile=True (torch.func derivatives)")
        pre = [n for n in plan.networks if n.pre_initialization]
        base = [sympy.Symbol(s) for s in (*plan.state_ids, *plan.theta_ids,
                                          *(o for n in pre for o in n.output_ids))]
        o_rhs = [sympy.Symbol(o) for j in self.rhs_nets for o in plan.networks[j].output_ids]
        rhs = list(plan.rhs_exprs)
        every = base + o_rhs
        rhs_fn = compile_expressions(rhs + [sympy.diff(f, s) for f in rhs for s in every],
                                     plan.groups(), backend="torch", name="rhs_jacobian",
                                     broadcast=False)
        inputs = {}
        for j in self.rhs_nets:
            exprs = list(plan.networks[j].input_exprs)
            inputs[j] = compile_expressions(
                exprs + [sympy.diff(e, s) for e in exprs for s in base], plan.groups(),
                backend="torch", name=f"inputs_jacobian_{j}", broadcast=False)
        self._hybrid_fns = {"rhs": rhs_fn, "inputs": inputs, "m": len(base)}
        return self._hybrid_fns

    def _solver(self, kind: str, dtype: torch.dtype):
        from petab_sciml.backends.torch.ode import (
            DENSE_OUTPUT,
            SolveOptions,
            make_batched_solve,
            solver,
        )

        key = (kind, dtype)
        found = self._solvers.get(key)
        if found is None:
            o = self.options
            rtol, atol = o.rtol, o.atol
            if dtype == torch.float32:
                rtol, atol = max(rtol, FLOAT32_TOLERANCE), max(atol, FLOAT32_TOLERANCE)
            fields = {"aug": self._aug_field, "plain": self._plain_field,
                      "aug_batched": self._aug_field_batched,
                      "plain_batched": _call_closure}
            solve_options = SolveOptions(o.method, rtol, atol, o.max_steps)
            if kind.endswith("_batched"):
                plain = kind == "plain_batched"
                # back-propagation through the steps: outputs from the dense output
                # (as the JAX backend's), so output times do not shorten steps
                found = make_batched_solve(fields[kind], solve_options, stacked_stages=plain,
                                           restrict=_restrict_closure if plain else None,
                                           dense_output=plain and o.method in DENSE_OUTPUT)
            else:
                found = solver(fields[kind], solve_options, compile=o.compile,
                               unroll_stages=o.unroll_stages)
            self._solvers[key] = found
        return found

    # ------------------------------------------------------------------ objective
    def evaluate(self, w: torch.Tensor) -> dict[str, Any]:
        """Everything at parameter vector ``w`` (a tensor; gradients flow to it): ``value``
        (negative log-posterior, ``inf`` if a solve failed), ``llh``, ``logprior``,
        ``simulations`` (measurement order) and ``ok``."""
        plan = self.plan
        fns = self.fns
        d = self.tensors(w)
        n_x = len(plan.state_ids)
        n_out = [n.n_outputs for n in plan.networks]
        self._sync_modes()
        theta_base = d["theta0"].index_put((d["mech_theta"],), w[: plan.n_mech])
        zeros_x = w.new_zeros((n_x,))
        params = [self._net_params(j, w, 0) for j in range(len(plan.networks))]

        def empty_outs(lead=()):
            return [w.new_zeros(lead + (k,)) for k in n_out]

        arrays_all = [{arg: d[f"arr_{j}_{arg}"] for jj, arg in self.array_keys if jj == j}
                      for j in range(len(plan.networks))]
        group_theta, group_outs = [], []
        for g in range(len(plan.groups_conditions)):
            t0 = w.new_tensor(float(plan.group_t0[g]))
            outs = empty_outs()
            tgt, src = d[f"g{g}_tgt"], d[f"g{g}_src"]
            theta = theta_base
            if tgt.numel():
                vals = fns.changes(t0, zeros_x, theta_base, *outs)
                theta = theta_base.index_put((tgt,), vals[src])
            arrays = [{k: v[g] for k, v in a.items()} for a in arrays_all]
            for j in self.pre_ids:
                outs[j] = self._net_out(j, t0, zeros_x, theta, outs, arrays, params[j])
            group_theta.append(theta)
            group_outs.append(outs)

        # the states at the output times and the constants of every (experiment, period),
        # as row blocks of a few tensors (a batch's period: one block for all its
        # experiments; slicing out each experiment would cost autograd nodes, and
        # full-size zero-filled gradients, per experiment)
        x_blocks: list[torch.Tensor] = []
        th_blocks: list[torch.Tensor] = []
        x_at: dict[tuple[int, int], int] = {}
        th_at: dict[tuple[int, int], int] = {}
        rows_x = rows_th = 0
        ok = torch.ones((), dtype=torch.bool, device=w.device)
        self.n_steps = 0
        batched = {e for _, exps in self.batches for e in exps}
        with _rhs_networks_in_eval_mode(self):
            for b, (P, exps) in enumerate(self.batches):
                ys, ths, good = self._solve_batch(b, P, group_theta, group_outs, arrays_all,
                                                  d, w)
                ok = ok & good
                for k in range(P):
                    N = ys[k].shape[1]
                    x_blocks.append(ys[k].reshape(-1, n_x))
                    th_blocks.append(ths[k])
                    for i, e in enumerate(exps):
                        x_at[(e, k)] = rows_x + i * N
                        th_at[(e, k)] = rows_th + i
                    rows_x += len(exps) * N
                    rows_th += len(exps)
            for e, exp in enumerate(plan.experiments):
                if e in batched:
                    continue
                theta = group_theta[exp.group]
                outs = list(group_outs[exp.group])
                arrays = [{k: v[exp.group] for k, v in a.items()} for a in arrays_all]
                x = None
                for k, period in enumerate(self.periods[e]):
                    key = period["key"]
                    start = w.new_tensor(period["start"])
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
                    y, x, good = self._solve(x, theta, outs, arrays, period, d, w, params)
                    ok = ok & good
                    x_blocks.append(y)
                    th_blocks.append(theta.unsqueeze(0))
                    x_at[(e, k)], th_at[(e, k)] = rows_x, rows_th
                    rows_x += y.shape[0]
                    rows_th += 1
        if not th_blocks:   # no measurements
            X = w.new_zeros((0, n_x))
            TH = w.new_zeros((0, d["theta0"].shape[0]))
        else:
            pick_x, pick_th = self._measurement_rows(x_at, th_at, (rows_x, rows_th), d)
            X = torch.cat(x_blocks)[pick_x]
            TH = torch.cat(th_blocks)[pick_th]
        t_m = d["m_time"]
        outs_m = empty_outs((t_m.shape[0],))
        for j in self.pre_ids:
            outs_m[j] = torch.stack([go[j] for go in group_outs])[d["m_group"]]
        if self.obs_nets:
            arrays_m = [{k: v[d["m_group"]] for k, v in a.items()} for a in arrays_all]
            for j in self.obs_nets:
                outs_m[j] = self._net_out(j, t_m, X, TH, outs_m, arrays_m, params[j],
                                          batched=True)
        op = _overrides(TH, d["m_opt"], d["m_opv"])
        npar = _overrides(TH, d["m_npt"], d["m_npv"])
        ys, sigmas = [], []
        for i, key in self.obs_rows:
            idx = d[key]
            args = (t_m[idx], X[idx], TH[idx], *(o[idx] for o in outs_m))
            ys.append(fns.observables[i](*args, op[idx])[:, 0])
            sigmas.append(fns.noise[i](*args, npar[idx])[:, 0])
        y = torch.cat(ys)[d["m_order"]] if ys else w.new_zeros((0,))
        sigma = torch.cat(sigmas)[d["m_order"]] if sigmas else w.new_zeros((0,))
        llh = w.new_zeros(())
        for tr, di, key in self.llh_groups:
            idx = d[key]
            llh = llh + torch.sum(log_likelihood(torch, d["m_value"][idx], y[idx], sigma[idx],
                                                 tr, di))
        logprior = w.new_tensor(plan.logprior_const)
        for i, (prior, _, _, _, scale) in enumerate(plan.priors):
            logprior = logprior + torch.sum(log_prior_at(torch, w[d[f"prior_{i}"]], prior,
                                                         scale))
        value = torch.where(ok, -(llh + logprior), w.new_tensor(float("inf")))
        return {"value": value, "llh": llh, "logprior": logprior, "simulations": y, "sigma": sigma,
                "ok": ok}

    def _constant_changes(self, like):
        """Every condition change's value when all of them are numbers (``like``'s dtype
        and device), else None.  A batch then picks its rows' values from this vector
        instead of evaluating every change of every condition for every row (a
        ``(n_experiments, n_changes)`` table, quadratic in the experiments when each has
        its own condition)."""
        found = getattr(self, "_constants", None)
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

    def _measurement_rows(self, x_at, th_at, sizes, d):
        """Per measurement, its row in the concatenated state blocks and in the
        concatenated constant blocks of :meth:`evaluate` (``x_at``/``th_at``: the first
        row of each (experiment, period)).  The layout is fixed by the plan and the
        batches, so this is worked out once (per device)."""
        key = (d["m_x"].device, sizes)
        found = getattr(self, "_measurement_index", {}).get(key)
        if found is None:
            first = []
            for e, exp in enumerate(self.plan.experiments):
                for k, p in enumerate(exp.periods):
                    first.append(np.arange(len(p.times)) + x_at[(e, k)])
            x_rows = np.concatenate(first) if first else np.zeros(0, np.int64)
            th_rows = np.array([th_at[(e, k)] for e, exp in enumerate(self.plan.experiments)
                                for k in range(len(exp.periods))], np.int64)
            m_x, m_th = d["m_x"].cpu().numpy(), d["m_th"].cpu().numpy()
            device = d["m_x"].device
            found = (torch.as_tensor(x_rows[m_x], device=device),
                     torch.as_tensor(th_rows[m_th], device=device))
            self._measurement_index = {key: found}
        return found

    # ------------------------------------------------------------------ ODE solves
    def _solve_batch(self, b, P, group_theta, group_outs, arrays_all, d, w):
        """Batch ``b`` (``self.batches``): its experiments' periods solved together;
        per period ``(x at the padded output times (E, N, n_x), theta (E, n_theta))``
        and whether every solve succeeded."""
        fns = self.fns
        groups = d[f"b{b}_group"]
        theta = torch.stack(group_theta)[groups]
        n_nets = len(self.plan.networks)
        outs = [torch.stack([go[j] for go in group_outs])[groups] for j in range(n_nets)]
        arrays = [{k: v[groups] for k, v in a.items()} for a in arrays_all]
        ok = torch.ones((), dtype=torch.bool, device=w.device)
        ys, thetas = [], []
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
            y, x, good = self._solve_span_batched(x, theta, outs, arrays, start, end, ts, w)
            ok = ok & torch.all(good)
            ys.append(y)
            thetas.append(theta)
        return ys, thetas, ok

    def _solve_span_batched(self, x0, theta, outs, arrays, t0, t1, ts, w):
        """One period of a batch of experiments (rows): ``(x at ts (E, N, n_x), x at the
        end (E, n_x), ok (E,))``.  Forward sensitivities: ``S`` per experiment with
        respect to ``(x0, p)`` (``p`` the experiment's own constants, pre-initialization
        outputs and the right-hand-side network arrays); ``autograd``: back-propagation
        through the batched steps."""
        local = [theta] + [outs[j] for j in self.pre_ids]
        p_local = torch.cat(local, 1)
        shared = [w[base: base + size] for _, _, base, size in self.p_nets]
        rhs_arrays = [arrays[j] if j in self.rhs_nets else {} for j in range(len(arrays))]
        grad = torch.is_grad_enabled() and (x0.requires_grad or p_local.requires_grad
                                            or any(s.requires_grad for s in shared))
        if grad and self.options.sensitivity == "forward":
            E = x0.shape[0]
            p = torch.cat([p_local] + [s.expand(E, -1) for s in shared], 1)
            return _BatchedForwardSensitivity.apply(x0, p, self, rhs_arrays, t0, t1, ts)
        # the networks' arrays as views taken once per solve (a view per right-hand-side
        # call would cost a zero-filled copy of w per call in the backward pass)
        net_params = [(j, self._net_params(j, s, base))
                      for (j, _, base, _), s in zip(self.p_nets, shared)]
        solve = self._solver("plain_batched", x0.dtype)
        field = self._batched_rhs(p_local, net_params, rhs_arrays)
        ys, y1, ok, steps = solve(x0, t0, t1, ts, field)
        self.n_steps += int(steps.sum())
        return ys, y1, ok

    def _batched_rhs(self, p_local, net_params, arrays):
        """``dx/dt`` of a batch of experiments as a closure ``field(t, x)`` (rows of ``x``;
        ``t`` per row), built once per solve: their own constants and pre-initialization
        outputs ``p_local``, the right-hand-side networks' arrays ``net_params``
        (``[(network index, {"layer.array": tensor})]``) shared: the networks are applied
        to the batch.  Everything that does not depend on ``(t, x)`` (the constants'
        slices, the zero outputs, the networks' bindings) is done here, not per call:
        a solve calls the field a dozen times per step."""
        plan = self.plan
        E = p_local.shape[0]
        theta = p_local[:, : len(plan.theta_ids)]
        outs = [p_local.new_zeros((E, n.n_outputs)) for n in plan.networks]
        for j, a, b in self.p_pre:
            outs[j] = p_local[:, a:b]
        rhs, inputs = self._vectorized_formulas()
        nets = [(j, inputs[j], self._batched_network(j, params, arrays))
                for j, params in net_params]
        if isinstance(rhs, _PolynomialFormula):
            # the constants and the outputs of networks not called here are fixed for
            # the solve: their part of the coefficients is worked out once
            varying = {0} | {2 + j for j, _, _ in nets}
            rhs = rhs.bind(varying, [None, theta, *outs]) or rhs

        def field(t, x):
            if not nets:
                return rhs(t, x, theta, *outs)
            o = list(outs)
            for j, inputs, forward in nets:
                o[j] = forward(inputs(t, x, theta, *o) if inputs is not None else None)
            return rhs(t, x, theta, *o)

        field.restrict = lambda rows: self._batched_rhs(
            p_local[rows], net_params, [{k: v[rows] for k, v in a.items()} for a in arrays])
        return field

    def _vectorized_formulas(self):
        """The right-hand side and each network's inputs as :class:`_PolynomialFormula`
        where they are polynomials, else the compiled formulas (built once)."""
        found = getattr(self, "_vectorized", None)
        if found is None:
            plan, fns = self.plan, self.fns
            groups = plan.groups()
            rhs = _PolynomialFormula.build(list(plan.rhs_exprs), groups) or fns.rhs
            inputs = []
            for j, net in enumerate(plan.networks):
                fast = (_PolynomialFormula.build(list(net.input_exprs), groups)
                        if fns.net_inputs[j] is not None else None)
                inputs.append(fast or fns.net_inputs[j])
            found = self._vectorized = (rhs, inputs)
        return found

    def _batched_network(self, j, params, arrays):
        """``forward(values) -> (E, n_outputs)``: network ``j`` applied to a batch (element
        inputs ``values`` (E, ...), array inputs ``arrays[j]`` (E, ...)) with its arrays
        ``params``.  A network that maps a batch row by row (:meth:`_batch_transparent`)
        is called once on the batch (the bound copy, no ``vmap``, no
        ``functional_call``); others go through :meth:`_net_forward` (``vmap``)."""
        if not self._batch_transparent(j):
            return lambda values: self._net_forward(j, values, arrays, params, batched=True,
                                                    functional=True)
        return self._direct_network(j, params, arrays)

    def _direct_network(self, j, params, arrays):
        """:meth:`_batched_network` as one call of the bound copy on the batch."""
        net = self.plan.networks[j]
        module, slots = self.bound[j]
        bindings = [(owner, name, params[slot.key]) for owner, name, slot in slots]
        fixed = {i: arrays[j][inp.arg] for i, inp in enumerate(net.inputs)
                 if inp.kind == "array"}
        elements = [(i, inp.start, inp.start + inp.size, tuple(inp.shape))
                    for i, inp in enumerate(net.inputs) if inp.kind != "array"]
        n_in = len(net.inputs)
        n_out = len(net.output_index)
        whole = net.output_index == tuple((0, (i,)) for i in range(n_out))

        def forward(values):
            for owner, name, tensor in bindings:
                object.__setattr__(owner, name, tensor)
            inputs = [None] * n_in
            for i, tensor in fixed.items():
                inputs[i] = tensor
            for i, a, b, shape in elements:
                v = values[:, a:b]
                inputs[i] = v.reshape((v.shape[0],) + shape)
            result = module(*inputs)
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            first = result[0]
            if whole and first.dim() == 2 and first.shape[1] == n_out:
                return first
            picked = [result[arg].reshape(result[arg].shape[0], -1)[:, 0] if index is None
                      else result[arg][(slice(None), *index)]
                      for arg, index in net.output_index]
            return torch.stack(picked, 1) if picked else first.new_zeros((first.shape[0], 0))

        return forward

    def _batch_transparent(self, j: int) -> bool:
        """Whether network ``j`` maps a batch row by row: called on inputs with a leading
        batch axis, it gives what ``vmap`` over the rows gives (same shapes, values to
        1e-12).  Found once per network by a probe with random inputs and arrays; a
        network that fails the probe (or raises) is always vmapped."""
        found = self._transparent.get(j)
        if found is not None:
            return found
        net = self.plan.networks[j]
        gen = torch.Generator().manual_seed(0)
        E, dt = 3, torch.float64
        n_el = max((inp.start + inp.size for inp in net.inputs if inp.kind != "array"),
                   default=0)
        values = torch.randn((E, n_el), generator=gen, dtype=dt)
        arrays = [{} for _ in self.plan.networks]
        for inp in net.inputs:
            if inp.kind == "array":
                shape = np.asarray(inp.data).shape[1:]
                arrays[j][inp.arg] = torch.randn((E, *shape), generator=gen, dtype=dt)
        flat = torch.rand((self.plan.n_w,), generator=gen, dtype=dt) + 0.5
        params = self._net_params(j, flat, 0)
        try:
            with torch.no_grad():
                ref = self._net_forward(j, values, arrays, params, batched=True,
                                        functional=True)
                got = self._direct_network(j, params, arrays)(values)
            found = (got.shape == ref.shape and bool(torch.all(torch.isfinite(ref)))
                     and bool(torch.all(torch.abs(got - ref)
                                        <= 1e-12 * torch.clamp(ref.abs(), min=1.0))))
        except Exception:   # noqa: BLE001 - any failure: keep the general path
            found = False
        self._transparent[j] = found
        return found

    def _aug_field_batched(self, t, y, args):
        """:meth:`_aug_field` of a batch of experiments (rows of ``y``, ``p``)."""
        from torch.func import vjp, vmap

        p, arrays = args
        E = y.shape[0]
        n_x = len(self.plan.state_ids)
        n = n_x + p.shape[1]
        x = y[:, :n_x]
        sens = y[:, n_x:].reshape(E, n_x, n)
        if self._jacobian is not None:
            plan = self.plan
            theta = p[:, : len(plan.theta_ids)]
            outs = [p.new_zeros((E, net.n_outputs)) for net in plan.networks]
            for j, a, b in self.p_pre:
                outs[j] = p[:, a:b]
            values = self._jacobian(t, x, theta, *outs)
            fx = values[:, :n_x]
            jac = values[:, n_x:].reshape(E, n_x, n)
            jx, jp = jac[:, :, :n_x], jac[:, :, n_x:]
        elif self._hybrid_ok():
            fx, jx, jp = self._eager_jacobian_batched(t, x, p, arrays)
        else:
            eye = torch.eye(n_x, dtype=y.dtype, device=y.device)

            def one(t_, x_, p_, arrays_):
                f, pull = vjp(lambda a, b: self._field_p(t_, a, b, arrays_), x_, p_)
                jx_, jp_ = vmap(pull)(eye)
                return f, jx_, jp_

            fx, jx, jp = vmap(one, randomness="different")(t, x, p, arrays)
        ds = (jx[:, :, :, None] * sens[:, None]).sum(2) + torch.cat([torch.zeros_like(jx),
                                                                     jp], 2)
        return torch.cat([fx, ds.reshape(E, -1)], 1)

    def _solve(self, x0, theta, outs, arrays, period, d, w, params):
        """One period: ``(x at its measurement times, x at its end, ok)``."""
        if period["steady"]:
            return self._solve_steady(x0, theta, outs, arrays, period, d, w, params)
        return self._solve_span(x0, theta, outs, arrays, period, d, w, params)

    def _solve_steady(self, x0, theta, outs, arrays, period, d, w, params):
        """A period that runs to steady state: its finite times first, then horizons of
        1, 2, 4, ... time units until the weighted RMS of ``dx/dt`` (``atol``, ``rtol``:
        AMICI's criterion) is below 1 at a horizon's end; ``inf`` points read the state
        there.  Gradients flow through every piece (the simulation itself, as in the
        JAX backend).  Not settled after :data:`STEADY_STATE_DOUBLINGS` horizons, or a
        failed piece: ``ok`` is False."""
        xs, x, ok = self._solve_span(x0, theta, outs, arrays, period, d, w, params)
        opts = self.options
        pieces = [theta] + [outs[j] for j in self.pre_ids]
        pieces += [w[base: base + size] for _, _, base, size in self.p_nets]
        p = torch.cat(pieces).detach() if pieces else w.new_zeros((0,))
        rhs_arrays = [arrays[j] if j in self.rhs_nets else {} for j in range(len(arrays))]
        t, horizon = period["end"], 1.0
        for _ in range(STEADY_STATE_DOUBLINGS):
            if not bool(ok):
                break
            with torch.no_grad():
                rate = self._field_p(w.new_tensor(t), x.detach(), p, rhs_arrays,
                                     functional=False)
                scale = opts.atol + opts.rtol * x.detach().abs()
                if float(torch.sqrt(torch.mean((rate / scale) ** 2))) < 1.0:
                    break
            piece = {"key": None, "start": t, "end": t + horizon, "n_times": 1}
            _, x, good = self._solve_span(x, theta, outs, arrays, piece, d, w, params)
            ok = ok & good
            t, horizon = t + horizon, 2.0 * horizon
        else:
            ok = torch.zeros_like(ok)
        n_x = x.shape[0]
        return torch.cat([xs, x.unsqueeze(0).expand(period["n_inf"], n_x)]), x, ok

    def _solve_span(self, x0, theta, outs, arrays, period, d, w, params):
        """``period`` from its start to its (finite) end; ``key`` None: no stored time
        grid, the one output is at the end."""
        if period["key"] is None:
            end = w.new_tensor([period["end"]])
            d = {**d, "None_ts": end, "None_grid": w.new_tensor([period["start"],
                                                                 period["end"]]),
                 "None_where": torch.ones(1, dtype=torch.int64, device=w.device)}
            period = {**period, "key": "None"}
        if self.options.sensitivity != "forward":
            return self._solve_torchdiffeq(x0, theta, outs, arrays, period, d, w, params)
        key = period["key"]
        t0, t1 = w.new_tensor(period["start"]), w.new_tensor(period["end"])
        ts = d[f"{key}_ts"]
        pieces = [theta] + [outs[j] for j in self.pre_ids]
        pieces += [w[base: base + size] for _, _, base, size in self.p_nets]
        p = torch.cat(pieces) if pieces else w.new_zeros((0,))
        rhs_arrays = [arrays[j] if j in self.rhs_nets else {} for j in range(len(arrays))]
        n = period["n_times"]
        if torch.is_grad_enabled() and (p.requires_grad or x0.requires_grad):
            xs, x1, ok = _ForwardSensitivity.apply(x0, p, self, rhs_arrays, t0, t1, ts)
        else:
            ys, y1, ok, steps = self._solver("plain", x0.dtype)(x0, t0, t1, ts,
                                                               (p, rhs_arrays))
            self.n_steps += int(steps)
            xs, x1 = ys, y1
        return xs[:n], x1, ok

    def _solve_torchdiffeq(self, x0, theta, outs, arrays, period, d, w, params):
        import torchdiffeq

        opts = self.options
        key = period["key"]
        grid, where = d[f"{key}_grid"], d[f"{key}_where"]
        n_x = x0.shape[0]
        if grid.numel() < 2:
            return x0.unsqueeze(0).expand(where.numel(), n_x), x0, torch.ones((), dtype=bool)

        def func(t, y):
            o = list(outs)
            for j in self.rhs_nets:
                o[j] = self._net_out(j, t, y, theta, o, arrays, params[j])
            return self.fns.rhs(t, y, theta, *o)

        from petab_sciml.simulation.steps import MAX_STEP_GROWTH

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

    # ------------------------------------------------------------------ entry points
    def run(self, kind: str, w: np.ndarray) -> tuple[dict, Any] | dict:
        """``value``: outputs dict; ``value_and_grad``: (outputs dict, gradient wrt the
        free parameters).  Runs single-threaded: the tensors are tiny, and intra-op
        threads only wait for each other (badly so on a busy machine)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._run(kind, w)
        finally:
            torch.set_num_threads(threads)

    def _run(self, kind: str, w: np.ndarray) -> tuple[dict, Any] | dict:
        w = torch.as_tensor(np.asarray(w, np.float64))
        if kind == "value":
            with torch.no_grad():
                return self.evaluate(w)
        free = self.tensors(w)["free"]
        z = w[free].clone().requires_grad_(True)
        full = w.index_put((free,), z)
        out = self.evaluate(full)
        if z.numel() and out["value"].requires_grad and bool(out["ok"]):
            (grad,) = torch.autograd.grad(out["value"], z, allow_unused=True)
            if grad is None:
                grad = torch.zeros_like(z)
        else:
            grad = torch.zeros_like(z)
        return out, grad


class _rhs_networks_in_eval_mode:
    """Networks inside the right-hand side run in eval mode during solves."""

    def __init__(self, executor: TorchExecutor):
        self.modules = [m for j in executor.rhs_nets
                        for m in (executor.modules[j], executor.bound[j][0]) if m.training]

    def __enter__(self):
        for m in self.modules:
            m.train(False)

    def __exit__(self, *exc):
        for m in self.modules:
            m.train(True)


class _PolynomialFormula:
    """Formulas that are polynomials with numeric coefficients in their arguments' symbols
    (mass action, linear maps, a network's inputs taken from the states), evaluated
    vectorized: the arguments concatenated (with a column of ones), the monomials
    gathered by index and multiplied, and one weighted sum with the coefficients.
    A handful of tensor operations (and autograd nodes) per call instead of a few per
    symbol and term, which is most of a small right-hand side's cost when autograd
    records every step.  ``f(t, *arrays)`` with every array ``(E, group size)``; the
    result is ``(E, n_exprs)``.  :meth:`build` returns None when an expression is not
    such a polynomial (or uses time)."""

    MAX_MONOMIALS = 512
    MAX_DEGREE = 4
    MAX_COEFFICIENTS = 4096
    """The weighted sum materializes ``(E, n_monomials, n_exprs)``: larger coefficient
    tables (big models) keep the generated code."""

    def __init__(self, sizes, selection, factors, coefficients, monomials=()):
        self.monomials = list(monomials)   # per monomial: its factors' columns
        self.sizes = sizes                 # columns per argument group
        self.selection = selection         # (group, columns) when a pure column pick
        self.factors = factors             # per degree slot: column of each monomial
        self.coefficients = coefficients   # (n_exprs, n_monomials) numpy
        self._tensors: dict[tuple, tuple] = {}

    @classmethod
    def build(cls, exprs, groups) -> _PolynomialFormula | None:
        import sympy

        symbols = [sympy.Symbol(s) for g in groups for s in g]
        column = {s: i for i, s in enumerate(symbols)}
        if not exprs:
            return None
        monomials: dict[tuple[int, ...], int] = {}
        entries = []
        for r, expr in enumerate(exprs):
            expr = sympy.sympify(expr)
            free = sorted(expr.free_symbols, key=lambda s: column.get(s, -1))
            if any(s not in column for s in free):
                return None
            try:
                terms = (sympy.Poly(expr, *free).terms() if free
                         else [((), expr)])
            except Exception:   # noqa: BLE001 - sympy's polynomial errors: not a polynomial
                return None
            for powers, coeff in terms:
                if not coeff.is_number or not coeff.is_real:
                    return None
                mono = tuple(sorted(column[g] for g, p in zip(free, powers)
                                    for _ in range(int(p))))
                if len(mono) > cls.MAX_DEGREE:
                    return None
                m = monomials.setdefault(mono, len(monomials))
                entries.append((r, m, float(coeff)))
        if len(monomials) > cls.MAX_MONOMIALS:
            return None
        coefficients = np.zeros((len(exprs), len(monomials)))
        for r, m, c in entries:
            coefficients[r, m] += c
        sizes = [len(g) for g in groups]
        n_z = sum(sizes)
        selection = None
        order = sorted(monomials, key=monomials.get)
        if (len(order) == len(exprs) and all(len(m) == 1 for m in order)
                and np.array_equal(coefficients, np.eye(len(exprs)))):
            cols = [m[0] for m in order]
            starts = np.cumsum([0] + sizes)
            g = int(np.searchsorted(starts, cols[0], side="right") - 1)
            if all(starts[g] <= c < starts[g + 1] for c in cols):
                local = [c - int(starts[g]) for c in cols]
                selection = (g, None if local == list(range(sizes[g])) else local)
        degree = max((len(m) for m in order), default=0)
        factors = [np.array([m[d] if d < len(m) else n_z for m in order], np.int64)
                   for d in range(degree)]
        if selection is None and len(order) * len(exprs) > cls.MAX_COEFFICIENTS:
            return None
        return cls(sizes, selection, factors, coefficients, order)

    def bind(self, varying, arrays):
        """This formula with every argument group not in ``varying`` fixed at
        ``arrays[g]`` (``(E, size)``; a solve's constants): their factors are multiplied
        into per-row coefficients ``(E, n_exprs, n_varying_monomials)`` once, so a call
        only gathers the varying columns and takes one weighted sum (three operations
        when the formula is linear in them).  Same signature (the fixed groups'
        arguments are ignored); None where this does not apply (a pick, or a table too
        large)."""
        if self.selection is not None:
            return None
        starts = np.cumsum([0] + list(self.sizes))
        vary_cols = [c for g in sorted(varying) for c in range(starts[g], starts[g + 1])]
        fixed_groups = [g for g in range(len(self.sizes)) if g not in varying]
        fixed_cols = [c for g in fixed_groups for c in range(starts[g], starts[g + 1])]
        vpos = {c: i for i, c in enumerate(vary_cols)}
        fpos = {c: i for i, c in enumerate(fixed_cols)}
        parts = [(tuple(vpos[c] for c in mono if c in vpos),
                  tuple(fpos[c] for c in mono if c in fpos)) for mono in self.monomials]
        v_keys = sorted({v for v, _ in parts})
        f_keys = sorted({f for _, f in parts})
        n_out, n_v = self.coefficients.shape[0], len(v_keys)
        if n_out * n_v > self.MAX_COEFFICIENTS:
            return None
        v_at = {k: i for i, k in enumerate(v_keys)}
        f_at = {k: i for i, k in enumerate(f_keys)}
        flat, f_of, coef = [], [], []
        for m, (v, f) in enumerate(parts):
            for r in np.flatnonzero(self.coefficients[:, m]):
                flat.append(int(r) * n_v + v_at[v])
                f_of.append(f_at[f])
                coef.append(float(self.coefficients[r, m]))
        if not fixed_groups:
            return None
        a0 = arrays[fixed_groups[0]]
        dev, dt, E = a0.device, a0.dtype, a0.shape[0]
        ones = a0.new_ones((E, 1))

        def products(z, keys, n_cols):
            """Per key (a tuple of columns of ``z``; ``n_cols``: the ones column), the
            product of its columns."""
            degree = max((len(k) for k in keys), default=0)
            if degree == 0:
                return z[:, n_cols:].expand(E, len(keys))
            slots = [torch.as_tensor([k[d] if d < len(k) else n_cols for k in keys],
                                     device=dev) for d in range(degree)]
            out = z[:, slots[0]]
            for sl in slots[1:]:
                out = out * z[:, sl]
            return out

        zf = torch.cat([arrays[g] for g in fixed_groups] + [ones], 1)
        phi = products(zf, f_keys, len(fixed_cols))
        values = phi[:, torch.as_tensor(f_of, device=dev)] * torch.as_tensor(coef, dtype=dt,
                                                                              device=dev)
        table = a0.new_zeros((E, n_out * n_v)).index_add(
            1, torch.as_tensor(flat, device=dev), values).view(E, n_out, n_v)
        identity = v_keys == [(i,) for i in range(len(vary_cols))]
        order = sorted(varying)

        def bound(t, *args):
            zv = torch.cat([args[g] for g in order] + ([] if identity else [ones]), 1)
            mv = zv if identity else products(zv, v_keys, len(vary_cols))
            return (table * mv[:, None, :]).sum(-1)

        return bound

    def __call__(self, t, *arrays):
        if self.selection is not None:
            g, cols = self.selection
            a = arrays[g]
            return a if cols is None else a[:, cols]
        a0 = arrays[0]
        key = (a0.dtype, a0.device)
        found = self._tensors.get(key)
        if found is None:
            found = (tuple(torch.as_tensor(f, device=a0.device) for f in self.factors),
                     torch.as_tensor(self.coefficients.T, dtype=a0.dtype, device=a0.device))
            self._tensors[key] = found
        factors, coefficients = found
        z = torch.cat([*arrays, a0.new_ones((a0.shape[0], 1))], 1)
        m = z[:, factors[0]] if factors else z[:, -1:]
        for f in factors[1:]:
            m = m * z[:, f]
        # a product and a sum, not a matrix product: BLAS rounds a row differently
        # depending on how many rows there are, this does not
        return (m[:, :, None] * coefficients).sum(1)


def _call_closure(t, x, field):
    """A solver field whose argument is the right-hand side itself (a closure built once
    per solve, :meth:`TorchExecutor._batched_rhs`)."""
    return field(t, x)


def _restrict_closure(field, rows):
    """:meth:`TorchExecutor._batched_rhs`'s closure for some of its rows."""
    return field.restrict(rows)


def _pick(values, index):
    """``values[i, index[i, c]]`` per row ``i``; a vector ``values`` (the same for every
    row): ``values[index]``."""
    return values[index] if values.dim() == 1 else values.gather(1, index)


def _scatter_rows(base, targets, values):
    """``base`` (rows) with ``values[i, c]`` written to column ``targets[i, c]``; targets
    equal to ``base.shape[1]`` (padding) are dropped."""
    extended = torch.cat([base, base.new_zeros((base.shape[0], 1))], 1)
    return extended.scatter(1, targets, values)[:, : base.shape[1]]


def _overrides(theta, index, values):
    if index.shape[1] == 0:
        return theta.new_zeros((theta.shape[0], 0))
    picked = torch.gather(theta, 1, index.clamp(min=0))
    return torch.where(index >= 0, picked, values)


class _ForwardSensitivity(torch.autograd.Function):
    """Integrates ``x`` and ``S = dx/d(x0, p)`` together; the backward pass contracts the
    cotangents with ``S``.  A failed solve gives NaN states and a zero ``S``."""

    @staticmethod
    def forward(ctx, x0, p, executor, arrays, t0, t1, ts):
        n_x, n_p = x0.shape[0], p.shape[0]
        n = n_x + n_p
        s0 = torch.eye(n_x, n, dtype=x0.dtype, device=x0.device)
        y0 = torch.cat([x0.detach(), s0.reshape(-1)])
        solve = executor._solver("aug", x0.dtype)
        ys, y1, ok, steps = solve(y0, t0, t1, ts, (p.detach(), arrays))
        executor.n_steps += int(steps)
        xs, x1 = ys[:, :n_x], y1[:n_x]
        s_ts = ys[:, n_x:].reshape(-1, n_x, n)
        s1 = y1[n_x:].reshape(n_x, n)
        if not bool(ok):
            s_ts, s1 = torch.zeros_like(s_ts), torch.zeros_like(s1)
        ctx.save_for_backward(s_ts, s1)
        ctx.n_x = n_x
        ctx.mark_non_differentiable(ok)
        return xs, x1, ok

    @staticmethod
    def backward(ctx, ct_xs, ct_x1, _):
        s_ts, s1 = ctx.saved_tensors
        g = torch.einsum("ti,tij->j", ct_xs, s_ts) + ct_x1 @ s1
        n_x = ctx.n_x
        return g[:n_x], g[n_x:], None, None, None, None, None


class _BatchedForwardSensitivity(torch.autograd.Function):
    """:class:`_ForwardSensitivity` for a batch of experiments (rows of ``x0`` and
    ``p``), solved together by :func:`~petab_sciml.backends.torch.ode.make_batched_solve`.
    An experiment whose solve failed gets NaN states and a zero ``S``."""

    @staticmethod
    def forward(ctx, x0, p, executor, arrays, t0, t1, ts):
        E, n_x = x0.shape
        n = n_x + p.shape[1]
        s0 = torch.eye(n_x, n, dtype=x0.dtype, device=x0.device).reshape(1, -1)
        y0 = torch.cat([x0.detach(), s0.expand(E, -1)], 1)
        solve = executor._solver("aug_batched", x0.dtype)
        ys, y1, ok, steps = solve(y0, t0, t1, ts, (p.detach(), arrays))
        executor.n_steps += int(steps.sum())
        xs, x1 = ys[:, :, :n_x], y1[:, :n_x]
        s_ts = ys[:, :, n_x:].reshape(E, -1, n_x, n)
        s1 = y1[:, n_x:].reshape(E, n_x, n)
        s_ts = torch.where(ok[:, None, None, None], s_ts, torch.zeros_like(s_ts))
        s1 = torch.where(ok[:, None, None], s1, torch.zeros_like(s1))
        ctx.save_for_backward(s_ts, s1)
        ctx.n_x = n_x
        ctx.mark_non_differentiable(ok)
        return xs, x1, ok

    @staticmethod
    def backward(ctx, ct_xs, ct_x1, _):
        s_ts, s1 = ctx.saved_tensors
        g = torch.einsum("eti,etij->ej", ct_xs, s_ts) + torch.einsum("ei,eij->ej", ct_x1, s1)
        n_x = ctx.n_x
        return g[:, :n_x], g[:, n_x:], None, None, None, None, None

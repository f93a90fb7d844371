"""PyTorch simulation: the objective of a PEtab SciML problem with autograd
(:class:`TorchExecutor`).

Gradients (``sensitivity``):

* ``"forward"`` (default): forward sensitivities ``S = dx/d(x0, p)`` integrated with the
  states in one solve of our adaptive Runge-Kutta loop (:mod:`~.ode`, eager or compiled
  whole by ``torch.compile``; error control covers ``S`` too, as in CVODES/AMICI),
  inside a ``torch.autograd.Function`` whose backward contracts the cotangents with
  ``S`` (:mod:`~.sensitivity`).  The right-hand side Jacobian comes from symbolic
  derivatives when no network sits in the right-hand side, else from symbolic
  derivatives of the formulas and autograd through the networks (eager), or from
  ``torch.func.vjp`` (compiled) (:mod:`~.jacobians`).  ``p`` gathers everything the
  right-hand side reads (:mod:`~.sensitivity_parameters`).
* ``"autograd"``: back-propagation through the solver steps: experiments in batches
  (:mod:`~.batched_ode`, even a single one; the right-hand side a closure of a few
  operations, :meth:`~.fields.Fields.batched_rhs`; ``dopri8`` outputs from its dense
  output, as the JAX backend's), torchdiffeq's solver where they are not batched;
* ``"adjoint"``: ``torchdiffeq.odeint_adjoint`` (continuous adjoint, O(1) memory in the
  steps).

``compile=True`` compiles each solve (``torch.compile``, inductor) on first use, then
solves run native code instead of a Python loop of tensor operations per step.
Networks are called with their arrays as views of the parameter vector ``w``
(:mod:`~.networks`), so the same code serves the numpy API (``run``) and the native
module (gradients flow to ``w``).  Networks inside the right-hand side run in eval mode
during solves (an adaptive solver needs a deterministic right-hand side); the others in
their module's mode.

Experiments of one structure are solved as one batched solve (``batch_experiments``,
:mod:`~.batching`): states ``(E, n_x)``, each experiment with its own step sizes, so
results equal the one-at-a-time path (:mod:`~.periods`) to rounding.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from petab_sciml.backends.torch.batching import BatchSolver, plan_batches
from petab_sciml.backends.torch.fields import Fields
from petab_sciml.backends.torch.jacobians import symbolic_jacobian
from petab_sciml.backends.torch.layout import TensorCache, named_layout
from petab_sciml.backends.torch.networks import Networks, rhs_networks_in_eval_mode
from petab_sciml.backends.torch.observables import (
    log_likelihood_sum,
    log_prior_sum,
    measurement_outputs,
    observables_and_noise,
)
from petab_sciml.backends.torch.options import (
    IMPLICIT_METHODS,
    UNROLL_STAGES_MAX,
    TorchOptions,
    check_options,
    resolved_options,
)
from petab_sciml.backends.torch.periods import PeriodSolver
from petab_sciml.backends.torch.sensitivity_parameters import sensitivity_parameters
from petab_sciml.backends.torch.solvers import Solvers
from petab_sciml.backends.torch.state_blocks import StateBlocks
from petab_sciml.simulation.compiled import compile_plan
from petab_sciml.simulation.layout import data_layout
from petab_sciml.simulation.plan import SimulationPlan

__all__ = ["TorchExecutor", "TorchOptions"]


class TorchExecutor:
    """Objective, gradient and simulations of one plan in PyTorch.

    ``modules`` (one ``torch.nn.Module`` per network of the plan, in plan order), when
    given, decide each network's train/eval mode (the native module passes its own);
    their parameters are never read: every call takes its arrays from ``w``.
    """

    backend = "torch"

    def __init__(self, plan: SimulationPlan, options: TorchOptions | None = None,
                 modules: list[Any] | None = None):
        from petab_sciml.errors import require

        require("torchdiffeq", "torch")
        self.plan = plan
        self.options = opts = resolved_options(options or TorchOptions())
        check_options(opts)
        self.fns = compile_plan(plan, "torch", term_sums=opts.term_sums)
        self.ordered_products = (opts.ordered_products if opts.ordered_products is not None
                                 else not opts.compile and not plan.rhs_smooth)
        self.networks = Networks(plan, self.fns.net_inputs, modes_from=modules,
                                 ordered_products=self.ordered_products)
        self.sens = sens = sensitivity_parameters(plan)
        jacobian = (symbolic_jacobian(plan)
                    if (opts.sensitivity == "forward" or opts.method in IMPLICIT_METHODS)
                    and not sens.rhs_nets else None)
        if opts.unroll_stages is None:
            small = jacobian is not None and len(jacobian.expressions) <= UNROLL_STAGES_MAX
            self.options = opts = replace(opts, unroll_stages=small)
        self.layout = named_layout(plan, data_layout(plan))
        self.batches, batch_arrays = plan_batches(plan, opts, self.layout.periods,
                                                  self.layout.arrays, sens.n_p)
        self._tensors = TensorCache({**self.layout.arrays, **batch_arrays})
        fields = Fields(plan, self.fns, self.networks, sens, jacobian, opts.compile)
        self.solvers = Solvers(fields, opts)
        self.batch_solver = BatchSolver(plan, self.fns, self.networks, sens, fields,
                                        self.solvers, opts.sensitivity)
        self.period_solver = PeriodSolver(plan, self.fns, self.networks, sens, fields,
                                          self.solvers, opts)
        self._measurement_index: dict = {}

    # ------------------------------------------------------------------ attributes
    @property
    def modules(self) -> list[Any]:
        """The plain module of each network (``functional_call`` inside compiled solves)."""
        return self.networks.modules

    @property
    def rhs_nets(self) -> list[int]:
        """Indices of the networks inside the right-hand side."""
        return self.sens.rhs_nets

    @property
    def n_p(self) -> int:
        """Entries of the sensitivity parameter vector ``p`` of one experiment."""
        return self.sens.n_p

    @property
    def n_steps(self) -> int:
        """Steps of the last evaluation's solves (our Runge-Kutta loop)."""
        return self.solvers.n_steps

    def tensors(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        """The data arrays on ``like``'s device, floats in its dtype (cached)."""
        return self._tensors.get(like)

    # ------------------------------------------------------------------ objective
    def evaluate(self, w: torch.Tensor) -> dict[str, Any]:
        """Everything at parameter vector ``w`` (a tensor; gradients flow to it): ``value``
        (negative log-posterior, ``inf`` unless ``ok``), ``llh``, ``logprior``,
        ``simulations`` (measurement order), ``sigma``, ``solved`` (all solves succeeded)
        and ``ok`` (solved, every ``sigma`` > 0 and a finite log-likelihood)."""
        plan = self.plan
        d = self.tensors(w)
        self.networks.sync_modes()
        params = [self.networks.params(j, w, 0) for j in range(len(plan.networks))]
        arrays_all = [{arg: d[f"arr_{j}_{arg}"] for jj, arg in self.layout.network_arrays
                       if jj == j} for j in range(len(plan.networks))]
        group_theta, group_outs = self._groups(w, d, params, arrays_all)
        blocks = StateBlocks(self._measurement_index)
        ok = self._solve(w, d, params, arrays_all, group_theta, group_outs, blocks)
        X, TH = blocks.measured(plan, d, w)
        outs_m = measurement_outputs(plan, self.networks, self.sens, d, X, TH, group_outs,
                                     arrays_all, params, w)
        y, sigma = observables_and_noise(self.fns, self.layout, d, X, TH, outs_m, w)
        llh = log_likelihood_sum(self.layout, d, y, sigma, w)
        logprior = log_prior_sum(plan, d, w)
        solved = ok
        # a noise sd <= 0 (or NaN) or a log of a value <= 0 fails like a solve
        ok = solved & torch.all(sigma > 0) & torch.isfinite(llh)
        value = torch.where(ok, -(llh + logprior), w.new_tensor(float("inf")))
        return {"value": value, "llh": llh, "logprior": logprior, "simulations": y,
                "sigma": sigma, "ok": ok, "solved": solved}

    def _groups(self, w, d, params, arrays_all):
        """Per condition group, its constants ``theta`` (the mechanistic parameters of
        ``w`` and the group's condition changes) and network outputs (pre-initialization
        networks evaluated, zeros for the others)."""
        plan, fns = self.plan, self.fns
        theta_base = d["theta0"].index_put((d["mech_theta"],), w[: plan.n_mech])
        zeros_x = w.new_zeros((len(plan.state_ids),))
        group_theta, group_outs = [], []
        for g in range(len(plan.groups_conditions)):
            t0 = w.new_tensor(float(plan.group_t0[g]))
            outs = [w.new_zeros((n.n_outputs,)) for n in plan.networks]
            tgt, src = d[f"g{g}_tgt"], d[f"g{g}_src"]
            theta = theta_base
            if tgt.numel():
                vals = fns.changes(t0, zeros_x, theta_base, *outs)
                theta = theta_base.index_put((tgt,), vals[src])
            arrays = [{k: v[g] for k, v in a.items()} for a in arrays_all]
            for j in self.sens.pre_ids:
                outs[j] = self.networks.out(j, t0, zeros_x, theta, outs, arrays, params[j])
            group_theta.append(theta)
            group_outs.append(outs)
        return group_theta, group_outs

    def _solve(self, w, d, params, arrays_all, group_theta, group_outs,
               blocks: StateBlocks):
        """Every experiment's periods, the batches first, into ``blocks``; whether every
        solve succeeded."""
        ok = torch.ones((), dtype=torch.bool, device=w.device)
        self.solvers.n_steps = 0
        batched = {e for _, exps in self.batches for e in exps}
        with rhs_networks_in_eval_mode(self.networks, self.sens.rhs_nets):
            for b, (P, exps) in enumerate(self.batches):
                ys, ths, good = self.batch_solver.solve(b, P, group_theta, group_outs,
                                                        arrays_all, d, w)
                ok = ok & good
                blocks.add_batch(exps, ys, ths)
            for e, exp in enumerate(self.plan.experiments):
                if e in batched:
                    continue
                arrays = [{k: v[exp.group] for k, v in a.items()} for a in arrays_all]
                ok = self.period_solver.experiment(
                    e, self.layout.periods[e], group_theta[exp.group],
                    list(group_outs[exp.group]), arrays, d, w, params, blocks, ok)
        return ok

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

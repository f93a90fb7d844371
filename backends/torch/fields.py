"""The right-hand sides the solves integrate (:class:`Fields`): ``dx/dt`` with everything
read from the sensitivity parameters ``p``, the forward-sensitivity system
``[f, J_x S + [0 | J_p]]`` (one experiment or a batch), and the batched ``dx/dt``
closure of back-propagation through the steps."""

from __future__ import annotations

from typing import Any

import torch

from petab_sciml.backends.torch.jacobians import HybridJacobian
from petab_sciml.backends.torch.networks import Networks
from petab_sciml.backends.torch.polynomial import PolynomialFormula
from petab_sciml.backends.torch.sensitivity_parameters import SensitivityParameters
from petab_sciml.simulation.plan import SimulationPlan


class Fields:
    """Right-hand sides of one plan.  ``fns``: the plan's compiled formulas
    (:func:`petab_sciml.simulation.compiled.compile_plan`); ``jacobian``: the symbolic
    ``[f, J]`` (:func:`~petab_sciml.backends.torch.jacobians.symbolic_jacobian`) or
    None; ``compile``: the solves are compiled (networks through ``functional_call``,
    Jacobians through ``torch.func``)."""

    def __init__(self, plan: SimulationPlan, fns: Any, networks: Networks,
                 sens: SensitivityParameters, jacobian: Any, compile: bool):
        self.plan = plan
        self.fns = fns
        self.networks = networks
        self.sens = sens
        self.jacobian = jacobian
        self.hybrid = HybridJacobian(plan, networks, sens)
        self.compile = compile
        self.n_outputs = [n.n_outputs for n in plan.networks]
        self._vectorized: tuple[Any, list[Any]] | None = None
        self._kept: tuple[Any, Any, Any] | None = None

    def field_p(self, t, x, p, arrays, functional: bool = True):
        """``dx/dt`` of one experiment with everything read from ``p``."""
        theta, outs, params = (self._views(p) if functional else self._kept_views(p))
        outs = list(outs)
        for j, net_params in params:
            outs[j] = self.networks.out(j, t, x, theta, outs, arrays, net_params,
                                        functional=functional)
        return self.fns.rhs(t, x, theta, *outs)

    def _views(self, p):
        """``(theta, outs, [(network, {"layer.array": view})])`` of ``p``."""
        theta, outs = self.sens.split(p, self.n_outputs)
        params = [(j, self.networks.params(j, p[start: start + size], base))
                  for j, start, base, size in self.sens.p_nets]
        return theta, outs, params

    def _kept_views(self, p):
        """:meth:`_views`, kept while the eager right-hand side is called with the same
        ``p`` (a solve calls it thousands of times; building the views was 15% of each
        call).  Kept per ``p`` object, its in-place version and the grad mode (views made
        without grad would cut ``p``'s gradient); not under ``torch.func`` transforms or
        ``torch.compile`` (``functional``), whose ``p`` is a new wrapper each call."""
        if p.is_inference():      # no version counter: nothing tells an in-place change
            return self._views(p)
        key = (p._version, torch.is_grad_enabled())
        kept = self._kept
        if kept is not None and kept[0] is p and kept[1] == key:
            return kept[2]
        views = self._views(p)
        self._kept = (p, key, views)
        return views

    def plain(self, t, y, args):
        """Solver field ``dx/dt``; ``args = (p, arrays)``."""
        p, arrays = args
        return self.field_p(t, y, p, arrays, functional=self.compile)

    def state_jacobian(self, t, y, args):
        """``d plain / d y`` at ``(t, y)`` (``args = (p, arrays)``), without gradient:
        symbolic derivatives where the right-hand side has no network
        (:attr:`jacobian`, the states' columns), the hybrid Jacobian where it applies,
        else one backward pass per state."""
        p, arrays = args
        n_x = len(self.plan.state_ids)
        with torch.no_grad():
            if self.jacobian is not None:
                theta, outs = self.sens.split(p, self.n_outputs)
                values = self.jacobian(t, y, theta, *outs)
                return values[n_x:].view(n_x, -1)[:, :n_x]
            if self.hybrid.applies():
                return self.hybrid(t, y, p, arrays)[1]
        from petab_sciml.backends.torch.implicit import autograd_jacobian

        return autograd_jacobian(self.plain, t, y, args)

    def augmented(self, t, y, args):
        """Solver field of the forward-sensitivity system: ``[f, (J_x S + [0 |
        J_p]).ravel()]`` with ``y = [x, S.ravel()]``, ``S`` ``(n_x, n_x + n_p)``."""
        from torch.func import vjp, vmap

        p, arrays = args
        n_x = len(self.plan.state_ids)
        n = n_x + p.shape[0]
        x = y[:n_x]
        sens = y[n_x:].view(n_x, n)
        if self.jacobian is not None:
            theta, outs = self.sens.split(p, self.n_outputs)
            values = self.jacobian(t, x, theta, *outs)
            fx = values[:n_x]
            jac = values[n_x:].view(n_x, n)
            jx, jp = jac[:, :n_x], jac[:, n_x:]
        elif not self.compile:
            fx, jx, jp = self.hybrid(t, x, p, arrays)
        else:
            fx, pull = vjp(lambda x_, p_: self.field_p(t, x_, p_, arrays), x, p)
            jx, jp = vmap(pull)(torch.eye(n_x, dtype=y.dtype, device=y.device))
        # J_x S as a broadcast product and sum, which inductor fuses with the rest (a
        # matmul is a separate library call per stage)
        ds = (jx[:, :, None] * sens[None]).sum(1) + torch.cat([torch.zeros_like(jx), jp], 1)
        return torch.cat([fx, ds.reshape(-1)])

    def augmented_batched(self, t, y, args):
        """:meth:`augmented` of a batch of experiments (rows of ``y``, ``p``)."""
        from torch.func import vjp, vmap

        p, arrays = args
        E = y.shape[0]
        n_x = len(self.plan.state_ids)
        n = n_x + p.shape[1]
        x = y[:, :n_x]
        sens = y[:, n_x:].reshape(E, n_x, n)
        if self.jacobian is not None:
            theta, outs = self.sens.split_rows(p, self.n_outputs)
            values = self.jacobian(t, x, theta, *outs)
            fx = values[:, :n_x]
            jac = values[:, n_x:].reshape(E, n_x, n)
            jx, jp = jac[:, :, :n_x], jac[:, :, n_x:]
        elif self.hybrid.applies():
            fx, jx, jp = self.hybrid.batched(t, x, p, arrays)
        else:
            eye = torch.eye(n_x, dtype=y.dtype, device=y.device)

            def one(t_, x_, p_, arrays_):
                f, pull = vjp(lambda a, b: self.field_p(t_, a, b, arrays_), x_, p_)
                jx_, jp_ = vmap(pull)(eye)
                return f, jx_, jp_

            fx, jx, jp = vmap(one, randomness="different")(t, x, p, arrays)
        ds = (jx[:, :, :, None] * sens[:, None]).sum(2) + torch.cat([torch.zeros_like(jx),
                                                                     jp], 2)
        return torch.cat([fx, ds.reshape(E, -1)], 1)

    def batched_rhs(self, p_local, net_params, arrays):
        """``dx/dt`` of a batch of experiments as a closure ``field(t, x)`` (rows of ``x``;
        ``t`` per row), built once per solve: their own constants and pre-initialization
        outputs ``p_local``, the right-hand-side networks' arrays ``net_params``
        (``[(network index, {"layer.array": tensor})]``) shared: the networks are applied
        to the batch.  Everything that does not depend on ``(t, x)`` (the constants'
        slices, the zero outputs, the networks' bindings) is done here, not per call:
        a solve calls the field a dozen times per step.  ``field.restrict(rows)``: the
        closure of some of the rows."""
        theta, outs = self.sens.split_rows(p_local, self.n_outputs)
        rhs, inputs = self._vectorized_formulas()
        nets = [(j, inputs[j], self.networks.batched(j, params, arrays))
                for j, params in net_params]
        if isinstance(rhs, PolynomialFormula):
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

        field.restrict = lambda rows: self.batched_rhs(
            p_local[rows], net_params, [{k: v[rows] for k, v in a.items()} for a in arrays])
        return field

    def _vectorized_formulas(self):
        """The right-hand side and each network's inputs as :class:`PolynomialFormula`
        where they are polynomials, else the compiled formulas (built once)."""
        if self._vectorized is None:
            plan, fns = self.plan, self.fns
            groups = plan.groups()
            rhs = PolynomialFormula.build(list(plan.rhs_exprs), groups) or fns.rhs
            inputs = []
            for j, net in enumerate(plan.networks):
                fast = (PolynomialFormula.build(list(net.input_exprs), groups)
                        if fns.net_inputs[j] is not None else None)
                inputs.append(fast or fns.net_inputs[j])
            self._vectorized = (rhs, inputs)
        return self._vectorized


def call_closure(t, x, field):
    """A solver field whose argument is the right-hand side itself (a closure built once
    per solve, :meth:`Fields.batched_rhs`)."""
    return field(t, x)


def restrict_closure(field, rows):
    """:meth:`Fields.batched_rhs`'s closure for some of its rows."""
    return field.restrict(rows)

"""Right-hand-side Jacobians for forward sensitivities from symbolic derivatives.

* :func:`symbolic_jacobian`: without networks in the right-hand side, ``[f, J]`` compiled
  from sympy derivatives; the sensitivity system then needs no autograd.
* :class:`HybridJacobian`: with networks in it (eager solves), symbolic derivatives of
  the formulas and autograd through the networks only, one backward pass per network
  output (much cheaper in eager mode than ``torch.func`` transforms of the whole field).
"""

from __future__ import annotations

from typing import Any

import torch

from petab_sciml.backends.torch.networks import Networks
from petab_sciml.backends.torch.options import SYMBOLIC_JACOBIAN_MAX
from petab_sciml.backends.torch.ordered import small_matmul
from petab_sciml.backends.torch.sensitivity_parameters import SensitivityParameters
from petab_sciml.simulation.plan import SimulationError, SimulationPlan


def symbolic_jacobian(plan: SimulationPlan) -> Any:
    """``[f, J]`` (``f(t, x, theta, *outs)`` stacked, ``J`` row-major) with ``J`` the
    Jacobian with respect to ``(x, theta, pre-initialization outputs)``, compiled from
    sympy derivatives; None when it has more than :data:`SYMBOLIC_JACOBIAN_MAX`
    entries.  For right-hand sides without networks."""
    import sympy

    from petab_sciml.expressions import compile_expressions

    pre = [n for n in plan.networks if n.pre_initialization]
    symbols = [sympy.Symbol(s) for s in (*plan.state_ids, *plan.theta_ids,
                                         *(o for n in pre for o in n.output_ids))]
    if len(plan.state_ids) * len(symbols) > SYMBOLIC_JACOBIAN_MAX:
        return None
    rhs = list(plan.rhs_exprs)
    exprs = rhs + [sympy.diff(f, s) for f in rhs for s in symbols]
    return compile_expressions(exprs, plan.groups(), backend="torch", name="jacobian",
                               broadcast=False)


class HybridJacobian:
    """``f``, ``df/dx``, ``df/dp`` of right-hand sides with networks in them (see the
    module docstring).  Applies unless a network reads another's outputs inside the
    right-hand side (:meth:`applies`)."""

    def __init__(self, plan: SimulationPlan, networks: Networks,
                 sens: SensitivityParameters):
        self.plan = plan
        self.networks = networks
        self.sens = sens
        self.n_outputs = [n.n_outputs for n in plan.networks]
        self._fns: dict[str, Any] | None = None

    def functions(self) -> dict[str, Any]:
        """Symbolic derivatives (compiled on first use): the right-hand side with respect
        to ``(x, theta, pre-initialization outputs)`` and to the right-hand-side
        networks' outputs (``rhs``), and each such network's element inputs with respect
        to ``(x, theta, pre-initialization outputs)`` (``inputs``); ``m`` the number of
        those base symbols.  Raises :class:`SimulationError` where it does not apply."""
        if self._fns is not None:
            return self._fns
        import sympy

        from petab_sciml.expressions import compile_expressions

        plan = self.plan
        sim_outputs = {o for n in plan.networks if not n.pre_initialization
                       for o in n.output_ids}
        for j in self.sens.rhs_nets:
            used = {s.name for e in plan.networks[j].input_exprs for s in e.free_symbols}
            if used & sim_outputs:
                raise SimulationError(f"network {plan.networks[j].id!r} reads the outputs "
                                      "of another network inside the right-hand side: use "
                                      "compile=True (torch.func derivatives)")
        pre = [n for n in plan.networks if n.pre_initialization]
        base = [sympy.Symbol(s) for s in (*plan.state_ids, *plan.theta_ids,
                                          *(o for n in pre for o in n.output_ids))]
        o_rhs = [sympy.Symbol(o) for j in self.sens.rhs_nets
                 for o in plan.networks[j].output_ids]
        rhs = list(plan.rhs_exprs)
        every = base + o_rhs
        rhs_fn = compile_expressions(rhs + [sympy.diff(f, s) for f in rhs for s in every],
                                     plan.groups(), backend="torch", name="rhs_jacobian",
                                     broadcast=False)
        inputs = {}
        for j in self.sens.rhs_nets:
            exprs = list(plan.networks[j].input_exprs)
            inputs[j] = compile_expressions(
                exprs + [sympy.diff(e, s) for e in exprs for s in base], plan.groups(),
                backend="torch", name=f"inputs_jacobian_{j}", broadcast=False)
        self._fns = {"rhs": rhs_fn, "inputs": inputs, "m": len(base)}
        return self._fns

    def applies(self) -> bool:
        """Whether :meth:`functions` applies (no network reads another's outputs inside
        the right-hand side)."""
        try:
            self.functions()
        except SimulationError:
            return False
        return True

    def __call__(self, t, x, p, arrays):
        """``(f, df/dx, df/dp)`` of one experiment (vectors ``x``, ``p``)."""
        hyb = self.functions()
        n_x = x.shape[0]
        m = hyb["m"]
        theta, outs = self.sens.split(p, self.n_outputs)
        pieces = []
        for j, start, base, size in self.sens.p_nets:
            vals = hyb["inputs"][j](t, x, theta, *outs)
            n_in = len(self.plan.networks[j].input_exprs)
            inp = vals[:n_in].detach().requires_grad_(True)
            jac_in = vals[n_in:].view(n_in, m)
            wj = p[start: start + size].detach().requires_grad_(True)
            with torch.enable_grad():
                out = self.networks.forward(j, inp, arrays, self.networks.params(j, wj, base))
                rows_in, rows_w = _output_gradients(out, inp, wj)
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

    def batched(self, t, x, p, arrays):
        """:meth:`__call__` of a batch of experiments (rows of ``x`` and ``p``): the
        networks run once on the batch with per-experiment copies of their arrays
        (``vmap``), so one backward pass per network output gives every experiment's
        derivatives."""
        from torch.func import vmap

        hyb = self.functions()
        E, n_x = x.shape
        m = hyb["m"]
        theta, outs = self.sens.split_rows(p, self.n_outputs)
        pieces = []
        for j, start, base, size in self.sens.p_nets:
            vals = hyb["inputs"][j](t, x, theta, *outs)
            n_in = len(self.plan.networks[j].input_exprs)
            inp = vals[:, :n_in].detach().requires_grad_(True)
            jac_in = vals[:, n_in:].reshape(E, n_in, m)
            wj = p[:, start: start + size].detach().requires_grad_(True)

            def forward(inp_, w_, arrays_, j=j, base=base):
                return self.networks.forward(j, inp_, arrays_,
                                             self.networks.params(j, w_, base),
                                             functional=True)

            with torch.enable_grad():
                out = vmap(forward, randomness="different")(inp, wj, arrays)
                n_o = out.shape[1]
                rows_in, rows_w = _output_gradients(out, inp, wj)
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


def _output_gradients(out, inp, wj):
    """Per network output ``k``, its gradients with respect to the network's inputs
    ``inp`` and arrays ``wj`` (zeros where unused); ``out`` ``(n_outputs,)``, or
    ``(E, n_outputs)`` for a batch (rows independent: the gradient of a column's
    sum)."""
    n_o = out.shape[-1]
    rows_in, rows_w = [], []
    for k in range(n_o):
        output = out[:, k].sum() if out.dim() == 2 else out[k]
        g_in, g_w = torch.autograd.grad(output, (inp, wj), retain_graph=k + 1 < n_o,
                                        allow_unused=True)
        rows_in.append(g_in if g_in is not None else torch.zeros_like(inp))
        rows_w.append(g_w if g_w is not None else torch.zeros_like(wj))
    return rows_in, rows_w

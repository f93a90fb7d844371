"""Every formula of a plan compiled once for one backend (straight-line code from
:func:`petab_sciml.expressions.compile_expressions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from petab_sciml.expressions import compile_expressions
from petab_sciml.simulation.jumps import jump_time_exprs
from petab_sciml.simulation.plan import SimulationPlan


@dataclass
class CompiledFormulas:
    rhs: Any
    """``rhs(t, x, theta, *o) -> dx/dt``."""
    x0: Any
    """``x0(t0, theta, *o) -> x(t0)``."""
    changes: Any
    """``changes(t, x, theta, *o) -> value of every condition change``."""
    net_inputs: list[Any]
    """Per network (plan order): ``f(t, x, theta, *o) -> element inputs`` or None."""
    observables: list[Any]
    """Per observable: ``f(t, x, theta, *o, obs_pars) -> (value,)``."""
    jumps: Any
    """``jumps(t, theta, *o) -> times`` at which the right-hand side jumps
    (:mod:`petab_sciml.simulation.jumps`), or None when it has none."""
    noise: list[Any]
    """Per observable: ``f(t, x, theta, *o, observable_pars, noise_pars) -> (sigma,)``.

    Each observable is evaluated on its own measurements only, so a formula never sees
    another observable's placeholders (or their NaN padding) and contributes no NaN
    gradients there."""


def compile_plan(plan: SimulationPlan, backend: str) -> CompiledFormulas:
    groups = plan.groups()
    no_x = plan.groups(with_states=False)
    op = [f"__op{k}" for k in range(plan.n_obs_par)]
    np_ = [f"__np{k}" for k in range(plan.n_noise_par)]

    def comp(exprs, args, name):
        # the executors pass arrays of one batch shape: no explicit broadcasting
        return compile_expressions(list(exprs), args, backend=backend, name=name,
                                   broadcast=False)

    jumps = jump_time_exprs([*plan.rhs_exprs, *(e for n in plan.networks if n.in_rhs
                                                 for e in n.input_exprs)], plan.theta_ids)
    return CompiledFormulas(
        rhs=comp(plan.rhs_exprs, groups, "rhs"),
        x0=comp(plan.x0_exprs, no_x, "initial"),
        changes=comp(plan.change_exprs, groups, "changes"),
        net_inputs=[comp(n.input_exprs, groups, f"inputs_{n.id}") if n.input_exprs else None
                    for n in plan.networks],
        observables=[comp([e], [*groups, op], f"observable_{i}")
                     for i, e in enumerate(plan.obs_exprs)],
        noise=[comp([e], [*groups, op, np_], f"noise_{i}") for i, e in enumerate(plan.noise_exprs)],
        jumps=comp(jumps, no_x, "jumps") if jumps else None,
    )

"""Condition changes: the values that experimental conditions assign to parameters and
states at the start of a period (``plan.change_exprs``).

Changes that are numbers are read from a table (``chg_const`` of
:mod:`.data_layout`); only the formulas are compiled and evaluated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from petab_sciml.simulation.plan import SimulationPlan

ChangeValues = Callable[[Any, Any, Any, list[Any], Any], Any]
"""``values(t, x, theta, outs, index)``: the condition changes ``index`` (an int array
into ``plan.change_exprs``)."""


def compile_change_formulas(plan: SimulationPlan) -> Any:
    """``f(t, x, theta, *outs) -> values`` of the changes that are formulas, in
    ``plan.change_exprs`` order; None when every change is a number."""
    formulas = [e for e in plan.change_exprs if not bool(getattr(e, "is_number", False))]
    if not formulas:
        return None
    from petab_sciml.expressions import compile_expressions

    return compile_expressions(formulas, plan.groups(), backend="jax",
                               name="change_formulas", broadcast=False)


def change_values(formulas: Any, data: dict[str, Any]) -> ChangeValues:
    """The condition changes at a point, from ``formulas`` (:func:`compile_change_formulas`)
    and the ``chg_*`` arrays of ``data``.  Every formula is evaluated once per call: with
    one condition per experiment, evaluating every change for every experiment would cost
    experiments squared."""
    import jax.numpy as jnp

    const, pos, is_formula = (data["chg_const"], data["chg_pos"], data["chg_formula"])

    def values(t, x, theta, outs, index):
        vals = const[index]
        if formulas is not None:
            computed = formulas(t, x, theta, *outs)
            vals = jnp.where(is_formula[index], computed[pos[index]], vals)
        return vals

    return values

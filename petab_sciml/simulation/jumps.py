"""Discontinuities of the right-hand side in time: the times at which it jumps.

A right-hand side with ``piecewise(0, time < tau, 1)`` (a stimulus switched on at
``tau``, a dose given at ``t_dose``) is discontinuous at ``time = tau``.  An adaptive
solver that steps over the discontinuity loses accuracy there (its error estimate
assumes a smooth solution), and the solution's derivative with respect to ``tau`` comes
only from the jump itself: ``piecewise`` has no derivative in ``tau``, so autodiff of
the steps gives zero.

Both backends therefore split each period at its jump times (``backends/*/jumps.py``):
the solve stops just before the jump and restarts at it, and the state carried across
gets the sensitivity jump ``dx(tau+)/dtau = f(tau-, x) - f(tau+, x)`` (AMICI's
treatment of a discontinuity at a parameter-dependent time).

:func:`jump_time_exprs` finds them: every relation inside a ``Piecewise`` condition of
the right-hand side (or of the inputs of a network inside it) that compares time with
an expression of parameters only (no states, no network outputs), as the time at which
the relation flips.  Relations that involve states are state events; they are not
found here.
"""

from __future__ import annotations

import sympy
from sympy.core.relational import Relational

from petab_sciml.expressions import TIME


def jump_time_exprs(rhs_exprs: list[sympy.Basic], theta_ids: tuple[str, ...]
                    ) -> tuple[sympy.Expr, ...]:
    """The distinct times (expressions of ``theta_ids`` symbols) at which one of
    ``rhs_exprs`` jumps: each relation ``a(time, theta) < b(time, theta)`` (any of
    ``<, <=, >, >=``) inside a ``Piecewise`` condition that is linear in time, solved
    for time.  Sorted by their string form, so that the order is reproducible."""
    allowed = {sympy.Symbol(name) for name in theta_ids} | {TIME}
    found: dict[str, sympy.Expr] = {}
    for expr in rhs_exprs:
        if not isinstance(expr, sympy.Basic):
            continue
        for piecewise in expr.atoms(sympy.Piecewise):
            for _, cond in piecewise.args:
                if not isinstance(cond, sympy.Basic):
                    continue
                relations = [cond] if isinstance(cond, Relational) else list(
                    cond.atoms(Relational))
                for relation in relations:
                    tau = flip_time(relation, allowed)
                    if tau is not None:
                        found.setdefault(sympy.srepr(tau), tau)
    return tuple(found[k] for k in sorted(found))


def flip_time(relation: Relational, allowed: set[sympy.Symbol], rising: bool = False
              ) -> sympy.Expr | None:
    """The time at which ``relation`` flips, when it is ``c * time + g(theta)`` against
    zero with a numeric ``c != 0`` (``rising``: ``c > 0``, the difference grows with
    time); else None."""
    if relation.rel_op not in ("<", "<=", ">", ">="):
        return None
    difference = sympy.expand(relation.lhs - relation.rhs)
    if TIME not in difference.free_symbols or not difference.free_symbols <= allowed:
        return None
    slope = difference.coeff(TIME, 1)
    rest = sympy.simplify(difference - slope * TIME)
    if not slope.is_number or slope == 0 or TIME in rest.free_symbols:
        return None
    if rising and not slope > 0:
        return None
    return sympy.simplify(-rest / slope)

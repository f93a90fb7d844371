"""Periods that run to steady state (pre-equilibration, ``inf`` output times)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from petab_sciml.backends.torch.layout import PeriodLayout
from petab_sciml.backends.torch.options import STEADY_STATE_DOUBLINGS

if TYPE_CHECKING:
    from petab_sciml.backends.torch.periods import PeriodSolver, Span


def solve_steady(solver: PeriodSolver, x0, theta, outs, arrays, period: PeriodLayout,
                 span: Span, w, params):
    """``(x at the period's output times, x at the steady state, ok)``: the period's
    finite times first (``span``), then horizons of 1, 2, 4, ... time units until the
    weighted RMS of ``dx/dt`` (``atol``, ``rtol``: AMICI's criterion) is below 1 at a
    horizon's end; ``inf`` points read the state there.  Gradients flow through every
    piece (the simulation itself, as in the JAX backend).  Not settled after
    :data:`~petab_sciml.backends.torch.options.STEADY_STATE_DOUBLINGS` horizons, or a
    failed piece: ``ok`` is False."""
    # state-triggered events fire inside the period too (a probe per piece)
    solve = solver.span_with_jumps if solver.probes else solver.span
    xs, x, ok = solve(x0, theta, outs, arrays, span, w, params)
    opts = solver.options
    p = solver.sens.vector(theta, outs, w).detach()
    rhs_arrays = solver.rhs_arrays(arrays)
    t, horizon = period.end, 1.0
    for _ in range(STEADY_STATE_DOUBLINGS):
        if not bool(ok):
            break
        with torch.no_grad():
            rate = solver.fields.field_p(w.new_tensor(t), x.detach(), p, rhs_arrays,
                                         functional=False)
            scale = opts.atol + opts.rtol * x.detach().abs()
            if float(torch.sqrt(torch.mean((rate / scale) ** 2))) < 1.0:
                break
        _, x, good = solve(x, theta, outs, arrays, type(span).to_end(t, t + horizon, w), w,
                           params)
        ok = ok & good
        t, horizon = t + horizon, 2.0 * horizon
    else:
        ok = torch.zeros_like(ok)
    n_x = x.shape[0]
    return torch.cat([xs, x.unsqueeze(0).expand(period.n_inf, n_x)]), x, ok

"""Start points of a multi-start fit: :mod:`petab_sciml.startpoints` with the parameter
table's initialization priors, redrawn where the objective is not finite.

Start ``k`` of seed ``s`` depends on ``(s, k)`` only (not on how many starts the fit has,
nor on where it runs): mechanistic parameters from their initialization prior, else their
prior, else uniform on ``parameterScale`` within their bounds; estimated network entries
from the layer's default PyTorch initialiser, seeded.  A start whose objective is not
finite (its ODE solve fails or overflows: no gradient can lead anywhere from it) is
redrawn (``attempt`` 1, 2, ...) up to :data:`MAX_ATTEMPTS` times, as pyPESTO resamples
start points.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from petab_sciml.startpoints import initialization_priors, start_point

MAX_ATTEMPTS = 20


def draw_starts(problem: Any, seed: int, n: int, value: Callable[[np.ndarray], float] | None,
                report: Callable[[str], None] = lambda text: None,
                nominal_first: bool = False) -> list[np.ndarray]:
    """Start vectors ``w`` (linear, ``plan.pack`` layout) of starts ``0 .. n-1``.

    ``value(w)``: the objective, to redraw starts where it is not finite (None: keep every
    draw).  ``nominal_first``: start 0 is the problem's nominal values (``plan.w0``),
    never redrawn.  Raises ``ValueError`` naming the start when no finite one is found
    (for the nominal start: that its objective is not finite)."""
    priors = initialization_priors(problem)
    out = []
    for k in range(n):
        if k == 0 and nominal_first:
            w = np.array(problem.plan.w0, dtype=np.float64)
            if value is not None and not math.isfinite(value(w)):
                raise ValueError("start 0: the objective is not finite at the problem's "
                                 "nominal values; leave out start_from_nominal "
                                 "(--start-from-nominal)")
            out.append(w)
            continue
        for attempt in range(MAX_ATTEMPTS):
            w = start_point(problem.plan, k, seed=seed, backend=problem.backend_name,
                            init_priors=priors, attempt=attempt)
            if value is None or math.isfinite(value(w)):
                break
            report(f"start {k}: objective not finite at draw {attempt + 1}; redrawn")
        else:
            raise ValueError(f"start {k}: the objective is not finite at any of "
                             f"{MAX_ATTEMPTS} start points drawn; narrow the bounds or give "
                             "initialization priors (docs/fit.md)")
        out.append(w)
    return out

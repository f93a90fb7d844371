"""The step-size controller of the PyTorch solves (unbatched and batched alike).

torchdiffeq's controller: the error ratio is the RMS over every component of
``err / (atol + rtol * max(|y0|, |y1|))``; a step is accepted when it is at most 1; the
next step is ``0.9 * ratio^(-1/order)`` times this one, clipped to ``[0.2, growth]``
(``growth``: :func:`petab_sciml.simulation.steps.max_step_growth` of the method) and
never shrinking after an accepted step.  The first step is Hairer, Norsett & Wanner's.
With ``rows=True`` every row of ``y`` is its own problem (batched solves): norms are
taken per row and step sizes are ``(E,)``.
"""

from __future__ import annotations

from typing import Any

import torch

from petab_sciml.backends.torch.runge_kutta import Field
from petab_sciml.backends.torch.tableau import Tableau
from petab_sciml.simulation.steps import max_step_growth

SAFETY, DFACTOR = 0.9, 0.2
"""torchdiffeq's safety factor and smallest step factor."""


def rms(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(torch.mean(x * x))


def rms_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(torch.mean(x * x, dim=-1))


class StepSizeController:
    """Step sizes of one method at tolerances ``rtol``, ``atol`` (see the module
    docstring)."""

    def __init__(self, tab: Tableau, rtol: float, atol: float):
        self.order = tab.order
        self.rtol, self.atol = float(rtol), float(atol)
        self.inv_order = 1.0 / tab.order
        self.max_growth = max_step_growth(tab.name)

    def initial_step(self, field: Field, t0, y0, f0, args: Any, *, rows: bool = False):
        """Hairer, Norsett & Wanner's starting step (as torchdiffeq and SciPy); ``f0 =
        field(t0, y0, args)``."""
        norm = rms_rows if rows else rms
        scale = self.atol + self.rtol * y0.abs()
        d0, d1 = norm(y0 / scale), norm(f0 / scale)
        h0 = torch.where((d0 < 1e-5) | (d1 < 1e-5), torch.full_like(d0, 1e-6),
                         0.01 * d0 / torch.clamp(d1, min=1e-300))
        f1 = field(t0 + h0, y0 + (h0[:, None] if rows else h0) * f0, args)
        d2 = norm((f1 - f0) / scale) / h0
        big = torch.maximum(d1, d2)
        h1 = torch.where(big <= 1e-15, torch.maximum(torch.full_like(h0, 1e-6), h0 * 1e-3),
                         (0.01 / torch.clamp(big, min=1e-300)) ** (1.0 / (self.order + 1)))
        return torch.minimum(100 * h0, h1)

    def error_ratio(self, err, y, y1, *, rows: bool = False):
        """The step from ``y`` to ``y1`` with error estimate ``err`` is accepted when this
        is at most 1."""
        norm = rms_rows if rows else rms
        return norm(err / (self.atol + self.rtol * torch.maximum(y.abs(), y1.abs())))

    def next_step(self, ratio, accept, clipped, h, h_try, t_new):
        """``(h_new, h_ok)``: the step after one of length ``h_try`` (``h`` shortened to
        land on an output where ``clipped``; such a step keeps the proposal ``h`` when
        accepted) with error ratio ``ratio``, and whether it is usable (finite, above
        ``1e-14 * max(|t_new|, 1)``)."""
        factor = torch.where(
            ratio == 0, torch.full_like(ratio, self.max_growth),
            torch.clamp(SAFETY * torch.clamp(ratio, min=1e-300) ** (-self.inv_order),
                        max=self.max_growth))
        factor = torch.where(accept, torch.clamp(factor, min=1.0),
                             torch.clamp(factor, min=DFACTOR))
        factor = torch.where(torch.isfinite(ratio), factor, torch.full_like(ratio, DFACTOR))
        h_new = torch.where(accept & clipped, torch.maximum(h, h_try * factor),
                            h_try * factor)
        h_ok = torch.isfinite(h_new) & (h_new > 1e-14 * torch.clamp(t_new.abs(), min=1.0))
        return h_new, h_ok

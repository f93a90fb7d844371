"""Step-size control shared by both backends' adaptive solvers (framework-free)."""

from __future__ import annotations

DEFAULT_MAX_STEP_GROWTH = 10.0
"""The largest factor by which a step may exceed the last: diffrax's and torchdiffeq's
default."""

MAX_STEP_GROWTH = {"dopri8": 6.0}
"""Per method, where it differs from :data:`DEFAULT_MAX_STEP_GROWTH`.  ``dopri8``
takes 6, the default of Hairer's DOP853 for the same method.  With 10, a smooth problem
solved in a few large steps grows its first steps by factors computed from error
estimates at rounding level, so its results turn on last bits (batched and unbatched
solves of one experiment then disagree far above rounding)."""


PI_COEFFICIENTS = (0.4, 0.6)
"""``(pcoeff, icoeff)`` of a PI step-size controller (Hairer & Wanner II, IV.2;
Soederlind 2002), where diffrax's default is the I controller ``(0, 1)``; JAX uses it
where :func:`pi_coefficients` says.  ``pcoeff + icoeff = 1``: on steps of equal error
the step grows as under the I controller.

* Explicit methods on a mildly stiff model take steps bounded by their stability
  region, not by accuracy, and an I controller oscillates about the stability boundary
  (accept, reject, grow, shrink).  The states stay within tolerance, because every
  rejected step is caught, but the *differentiated* discretization (reverse mode,
  forward-mode autodiff) is not under error control: the tangents of the stiff
  components grow on every step taken just outside the stability region.  On
  Schwen_PONE2014 with ``dopri8`` at ``rtol = atol = 1e-8`` the reverse-mode gradient
  was 1,600x its own size off (``d value / d ka1`` -7.5e5 where forward sensitivities
  give 265); with this PI controller it is within 2.3e-5 of forward sensitivities at
  ``1e-10`` (``(0.4, 0.3)``: 5e-6; ``(0.2, 0.8)`` does not fix it: 56), in the same time.

Figures: ``benchmarks/bench_step_control.py`` (``benchmarks/FIGURES.md``)."""

PI_ERROR_FLOOR = 1e-3
"""The proportional term reads the last accepted step's scaled error (error over
tolerance) as at least this.  It damps oscillations of errors near 1; a step whose
error is far below the tolerance, at the start of a smooth solve at rounding level,
would otherwise steer the next step by its rounding bits (unclipped: only the integral
term is bounded by the growth limit), and batched and unbatched solves of one
experiment, or the value-only and value-and-gradient paths, then ended 1e-9 apart
instead of 1e-13."""

I_COEFFICIENTS = (0.0, 1.0)
"""diffrax's default I controller, kept for JAX's ``sensitivity="adjoint"``
(``BacksolveAdjoint``): under any other coefficients its forward solve does not take
the steps of the same solve in reverse mode (on the scaled Lotka-Volterra test problem
the simulations differ by 1e-7, the value by 5.5e-5, where with ``(0, 1)`` they agree
to 2e-14 batched; with ``(0, 0.7)`` 1e-8).  The cause lies in diffrax's backsolve loop
and was not found; the continuous adjoint is an explicit choice, never the default."""


def pi_coefficients(method: str, sensitivity: str) -> tuple[float, float]:
    """``(pcoeff, icoeff)`` of the step-size controller of a solve by ``method`` whose
    gradient comes by ``sensitivity`` (resolved: ``forward``, ``reverse``,
    ``forward-ad``, ``adjoint``): :data:`PI_COEFFICIENTS` for explicit methods whose
    discretization is differentiated (``reverse``, ``forward-ad``), else
    :data:`I_COEFFICIENTS`.  Implicit methods keep the I controller: on
    Boehm_JProteomeRes2014 ``kvaerno5``'s objective + gradient took 0.17 s under
    ``(0.4, 0.6)`` against 0.07 s (``(0.4, 0.3)`` measured 2x faster than I on Boehm and
    2.7x on Brannmark_JBC2010, but was not checked for the path dependence below).
    Forward sensitivities put the tangents under error control themselves (Schwen's
    gradient was right with them); there the I controller stays, as PI control makes a
    path's accept / reject decisions flip on smaller changes of the parameters
    (pyPESTO's optimum and our objective at the parameters it names then differed by
    2e-8 relative instead of 1e-12)."""
    if sensitivity in ("reverse", "forward-ad") and not method.lower().startswith("kvaerno"):
        return PI_COEFFICIENTS
    return I_COEFFICIENTS


def max_step_growth(method: str) -> float:
    """The largest step growth per step of ``method`` (``dopri8``, ``tsit5``, ...)."""
    return MAX_STEP_GROWTH.get(method.lower(), DEFAULT_MAX_STEP_GROWTH)

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


def max_step_growth(method: str) -> float:
    """The largest step growth per step of ``method`` (``dopri8``, ``tsit5``, ...)."""
    return MAX_STEP_GROWTH.get(method.lower(), DEFAULT_MAX_STEP_GROWTH)

"""The numpy API's JAX executor when no solver was chosen: the explicit default first,
the implicit ``kvaerno5`` once the explicit solver fails.

Most hybrid problems are not stiff, and there the explicit ``dopri8`` is 30-60x faster
than an implicit solver.  Many published systems-biology models are stiff, and there
``dopri8`` exhausts ``max_steps`` (``ok=False``) where an implicit solver gives the
right answer.  A user who calls ``objective()`` should get that answer without knowing
the word "stiff", so :class:`StiffFallbackExecutor` runs the explicit solver and, when
a call's ODE solve fails, runs the same call with :data:`IMPLICIT_SOLVER`; if that
succeeds, it says so in one ``RuntimeWarning`` line and keeps the implicit solver for
every later call.  If the implicit solver fails as well, the explicit result is
returned (a failure that is not stiffness: a blow-up, a non-finite state) and the
explicit solver stays; after :data:`MAX_FALLBACK_TRIES` such double failures the
fallback is no longer tried.  Passing ``solver=`` turns all of this off.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from petab_sciml.simulation.plan import SimulationPlan
from petab_sciml.simulation.switching import SwitchingExecutor

from .options import JaxOptions

IMPLICIT_SOLVER = "kvaerno5"
"""What a failed explicit solve is retried with (AMICI's JAX backend default)."""
MAX_FALLBACK_TRIES = 3
"""Failed calls retried with the implicit solver before the retries stop, where the
implicit solver failed too each time."""


class StiffFallbackExecutor(SwitchingExecutor):
    """A :class:`~petab_sciml.backends.jax.simulation.JaxExecutor` with the default
    explicit solver that switches to :data:`IMPLICIT_SOLVER` (see the module docstring).
    Attributes other than :meth:`run` are the active executor's."""

    backend = "jax"
    own = frozenset({"plan", "explicit", "implicit", "switched", "tries_left", "_options",
                     "_cache"})

    def __init__(self, plan: SimulationPlan, options: JaxOptions, cache: Any = None):
        from .simulation import JaxExecutor

        self.plan = plan
        self.explicit = JaxExecutor(plan, options, cache)
        self.implicit: Any = None
        self.switched = False
        self.tries_left = MAX_FALLBACK_TRIES
        self._options = options
        self._cache = cache

    @property
    def active(self) -> Any:
        """The executor the next call runs on."""
        return self.implicit if self.switched else self.explicit

    def members(self) -> tuple[Any, ...]:
        return (self.explicit, self.implicit)

    def run(self, kind: str, w: np.ndarray) -> Any:
        """As ``JaxExecutor.run``; a failed explicit solve is retried implicitly."""
        if self.switched:
            return self.implicit.run(kind, w)
        result = self.explicit.run(kind, w)
        if self.tries_left <= 0 or _solved(kind, result):
            return result
        self.tries_left -= 1
        if self.implicit is None:
            from .simulation import JaxExecutor

            self.implicit = JaxExecutor(self.plan, replace(self._options,
                                                           solver=IMPLICIT_SOLVER),
                                        self._cache)
        retried = self.implicit.run(kind, w)
        if not _solved(kind, retried):
            return result
        self.switched = True
        warnings.warn(f"the ODE solve failed with the explicit solver "
                      f"{self._options.solver} (stiff?) and succeeded with the implicit "
                      f"{IMPLICIT_SOLVER}: this simulator uses {IMPLICIT_SOLVER} from now "
                      f"on (pass solver= to choose)", RuntimeWarning, stacklevel=3)
        return retried


def _solved(kind: str, result: Any) -> bool:
    out = result if kind == "value" else result[0]
    return bool(np.asarray(out.get("solved", True)))

"""The numpy API's executor when no solver was chosen: the explicit default first, an
implicit solver once the explicit one fails (framework-free; both backends use it).

Most hybrid problems are not stiff, and there the explicit ``dopri8`` is 30-60x faster
than an implicit solver.  Many published systems-biology models are stiff, and there
``dopri8`` exhausts ``max_steps`` (``ok=False``) where an implicit solver gives the
right answer.  A user who calls ``objective()`` should get that answer without knowing
the word "stiff", so :class:`StiffFallbackExecutor` runs the explicit solver and, when
the *first* call's ODE solve fails, runs that call with the backend's implicit solver
(``kvaerno5`` in both); if that succeeds, it says so in one ``RuntimeWarning`` line and
keeps the implicit solver for every later call.  If the implicit solver fails as well,
the explicit result is returned (a failure that is not stiffness: a blow-up, a
non-finite state) and the explicit solver stays.  The choice is made once, at the first
call: an optimizer that later wanders into parameters where the solve fails gets
``ok=False`` there, as before, and the objective stays one function (a switch in
mid-optimization changed its values at the 1e-9 level and made runs depend on their
path).  Choosing the solver (JAX ``solver=``, PyTorch ``method=``) turns all of this
off.  Without ``max_steps`` PyTorch's explicit solver gets
:data:`EXPLICIT_TRY_MAX_STEPS` steps per solve (:func:`explicit_options`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from petab_sciml.simulation.plan import SimulationPlan
from petab_sciml.simulation.switching import SwitchingExecutor

IMPLICIT_SOLVER = "kvaerno5"
"""What a failed explicit solve is retried with (AMICI's JAX backend default)."""
EXPLICIT_TRY_MAX_STEPS = 10_000
"""PyTorch's explicit step budget per solve under the fallback when the user set no
``max_steps``: a stiff model fails it quickly (the eager explicit loop took 190 s to
exhaust the default 100,000 steps on Boehm_JProteomeRes2014, 38 s with this), and a
non-stiff model that needs more steps still gets the right answer, from the implicit
solver.  JAX keeps the default: its compiled steps fail fast anyway, and a budget of
10,000 sent Lucarelli_CellSystems2018 (not stiff, many steps) to kvaerno5, with a 5.6x
slower objective."""


def explicit_options(options: dict[str, Any]) -> dict[str, Any]:
    """The explicit executor's options under the fallback: ``options`` with
    ``max_steps`` :data:`EXPLICIT_TRY_MAX_STEPS` unless the user set it."""
    return options if "max_steps" in options else {**options,
                                                   "max_steps": EXPLICIT_TRY_MAX_STEPS}


class StiffFallbackExecutor(SwitchingExecutor):
    """An executor with the default explicit solver (``explicit``) that switches to the
    one ``make_implicit()`` builds (on first need) as the module docstring says;
    ``explicit_solver`` names the explicit one in the warning.  Attributes other than
    :meth:`run` are the active executor's."""

    own = frozenset({"plan", "backend", "explicit", "implicit", "switched", "decided",
                     "explicit_solver", "_make_implicit"})

    def __init__(self, plan: SimulationPlan, backend: str, explicit: Any,
                 make_implicit: Callable[[], Any], explicit_solver: str):
        self.plan = plan
        self.backend = backend
        self.explicit = explicit
        self.implicit: Any = None
        self.switched = False
        self.decided = False
        """The first call has run: the solver is chosen for good."""
        self.explicit_solver = explicit_solver
        self._make_implicit = make_implicit

    @property
    def active(self) -> Any:
        """The executor the next call runs on."""
        return self.implicit if self.switched else self.explicit

    def members(self) -> tuple[Any, ...]:
        return (self.explicit, self.implicit)

    def run(self, kind: str, w: np.ndarray) -> Any:
        """As the executors' ``run``; a failed explicit solve of the first call is
        retried implicitly."""
        if self.switched:
            return self.implicit.run(kind, w)
        result = self.explicit.run(kind, w)
        first, self.decided = not self.decided, True
        if not first or _solved(kind, result):
            return result
        if self.implicit is None:
            self.implicit = self._make_implicit()
        retried = self.implicit.run(kind, w)
        if not _solved(kind, retried):
            return result
        self.switched = True
        warnings.warn(f"the ODE solve failed with the explicit solver "
                      f"{self.explicit_solver} (stiff?) and succeeded with the implicit "
                      f"{IMPLICIT_SOLVER}: this simulator uses {IMPLICIT_SOLVER} from now "
                      f"on (choose the solver to turn this off)", RuntimeWarning,
                      stacklevel=3)
        return retried


def _solved(kind: str, result: Any) -> bool:
    out = result if kind == "value" else result[0]
    return bool(np.asarray(out.get("solved", True)))

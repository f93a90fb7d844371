"""The solve functions of the executor's right-hand sides, one per kind and dtype
(:class:`Solvers`), and the steps they took."""

from __future__ import annotations

from typing import Any

import torch

from petab_sciml.backends.torch.batched_ode import make_batched_solve
from petab_sciml.backends.torch.fields import Fields, call_closure, restrict_closure
from petab_sciml.backends.torch.ode import SolveOptions, solver
from petab_sciml.backends.torch.options import FLOAT32_TOLERANCE, TorchOptions
from petab_sciml.backends.torch.tableau import DENSE_OUTPUT


class Solvers:
    """Solve functions built on first use per ``(kind, dtype)``; float32 solves use
    tolerances no tighter than :data:`FLOAT32_TOLERANCE`.  ``n_steps`` counts the steps
    the solves report (reset by the executor per evaluation).

    Kinds: ``aug``, the forward-sensitivity system of one experiment, and ``plain``, its
    states alone (our loop, compiled or eager); ``aug_batched``, the forward-sensitivity
    system of a batch; ``plain_batched``, a batch's states with back-propagation through
    the steps (the field is the :meth:`~petab_sciml.backends.torch.fields.Fields.batched_rhs`
    closure, stages stacked, outputs from the dense output where the method has one);
    ``implicit``, the states of one experiment with an implicit method
    (:mod:`~petab_sciml.backends.torch.implicit`), back-propagation through the steps."""

    def __init__(self, fields: Fields, options: TorchOptions):
        self.fields = fields
        self.options = options
        self.n_steps = 0
        self._found: dict[tuple, Any] = {}

    def get(self, kind: str, dtype: torch.dtype):
        key = (kind, dtype)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = self._make(kind, dtype)
        return found

    def _make(self, kind: str, dtype: torch.dtype):
        o = self.options
        rtol, atol = o.rtol, o.atol
        if dtype == torch.float32:
            rtol, atol = max(rtol, FLOAT32_TOLERANCE), max(atol, FLOAT32_TOLERANCE)
        fields = {"aug": self.fields.augmented, "plain": self.fields.plain,
                  "aug_batched": self.fields.augmented_batched,
                  "plain_batched": call_closure}
        if kind == "implicit":
            from petab_sciml.backends.torch.implicit import make_implicit_solve

            return make_implicit_solve(self.fields.plain, rtol, atol, o.max_steps,
                                       jacobian=self.fields.state_jacobian)
        solve_options = SolveOptions(o.method, rtol, atol, o.max_steps)
        if kind.endswith("_batched"):
            plain = kind == "plain_batched"
            # back-propagation through the steps: outputs from the dense output
            # (as the JAX backend's), so output times do not shorten steps
            return make_batched_solve(fields[kind], solve_options, stacked_stages=plain,
                                      restrict=restrict_closure if plain else None,
                                      dense_output=plain and o.method in DENSE_OUTPUT)
        return solver(fields[kind], solve_options, compile=o.compile,
                      unroll_stages=o.unroll_stages)

"""The contract every backend follows (numpy in, numpy out at the boundary).

A backend is one folder (``backends/<name>/``) registered under the
``petab_sciml.backends`` entry point: networks (``build``, ``forward``, ...), the
simulation of whole problems (``executor``) and the array functions of compiled
formulas (``expression_namespace``) all come from it; the core never imports a framework.

Backends are found through the ``petab_sciml.backends`` entry-point group (see
:mod:`petab_sciml.plugins`).  Parameters are always exchanged as a nested mapping
``{group: {array: ndarray}}`` whose flattened keys ``group.array`` equal the PyTorch
``state_dict`` names, in PyTorch layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from petab_sciml.network import Network

ParameterArrays = Mapping[str, Mapping[str, Any]]
"""``{group: {array: array-like}}`` in PyTorch layout."""


class Backend(Protocol):
    """What the runner, the CLI and cross-backend checks need from a backend."""

    name: str

    def build(self, network: Network, *, dtype: str = "float32", seed: int = 0) -> Any:
        """A trainable model of ``network`` with PyTorch-default initial parameters."""

    def set_parameters(self, model: Any, params: ParameterArrays, *, strict: bool = True) -> Any:
        """Load ``params``; returns the model (a new one for immutable backends).

        With ``strict``, every trainable array must be given; buffers (running
        statistics) are always optional.  Shapes must match exactly.
        """

    def get_parameters(self, model: Any) -> dict[str, dict[str, np.ndarray]]:
        """All parameter arrays and buffers as numpy arrays."""

    def freeze(self, model: Any, trainable: ParameterArrays) -> Any:
        """Mark the arrays none of whose elements is estimated (``trainable``:
        ``{layer: {array: bool mask}}``, False where not estimated) as constants, as the
        framework does it (PyTorch: ``requires_grad=False``; a no-op where gradients are
        taken only of what is asked for); returns the model (a new one for immutable
        backends).  The element-wise masks stay with the problem."""

    def forward(self, model: Any, inputs: Sequence[np.ndarray], *, train: bool = False,
                seed: int | None = None) -> tuple[np.ndarray, ...]:
        """Evaluate the network on ``inputs`` (one array per network input)."""

    def mean_forward(self, model: Any, inputs: Sequence[np.ndarray], *, passes: int,
                     seed: int = 0) -> tuple[np.ndarray, ...]:
        """Mean of ``passes`` training-mode forward passes, each with fresh dropout masks
        (the official suite's rule for stochastic networks)."""

    def forward_each(self, model: Any, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Evaluate the network (inference mode) at each of many points: every input has
        a leading axis of points, the rest one input's shape; outputs have it too.  The
        network sees one point at a time (its operations need not batch, e.g. a ``cat``
        along dimension 0), vectorised as the framework does it."""

    def gradients(self, model: Any, inputs: Sequence[np.ndarray], *, train: bool = False,
                  seed: int | None = None) -> dict[str, dict[str, np.ndarray]]:
        """Gradient of ``sum(all outputs)`` with respect to every trainable array."""

    def vjp(self, model: Any, inputs: Sequence[np.ndarray], cotangents: Sequence[np.ndarray],
            *, train: bool = False, seed: int | None = None
            ) -> tuple[dict[str, dict[str, np.ndarray]], tuple[np.ndarray, ...]]:
        """The vector-Jacobian product of the network with ``cotangents`` (one array per
        output, its shape): the gradient of ``sum_k <cotangents[k], outputs[k]>`` with
        respect to every trainable array and to every input, ``(arrays, inputs)``."""

    # -- problems (simulation of a PEtab SciML problem; see petab_sciml.simulation)
    def executor(self, plan: Any, **options: Any) -> Any:
        """The objective of a :class:`~petab_sciml.simulation.plan.SimulationPlan` in this
        framework: an object with ``run("value" | "value_and_grad", w)`` (numpy ``w``;
        returns the outputs dict, plus the gradient with respect to the free entries
        ``plan.free_index``).  ``options`` are the framework's solver options."""

    def expression_namespace(self) -> dict[str, Any]:
        """The array functions that formulas compiled by
        :func:`petab_sciml.expressions.compile_expressions` call (``_m`` the array
        module with numpy's function names, ``_where``, ``_stack``, ...)."""

    def term_sum_ops(self) -> Any:
        """The array operations of :func:`petab_sciml.simulation.term_sums.compile_term_sum`
        (``key``, ``index``, ``values``, ``take``, ``monomials``, ``row_sums``, as
        :class:`petab_sciml.simulation.term_sums.NumpyTermSumOps` does them in numpy)."""

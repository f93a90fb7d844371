"""``ProblemData``: what the simulation plan is built from, as validation read it.

Validation (:func:`~petab_sciml.problem.validate_problem`) and loading
(:func:`~petab_sciml.problem.load_problem`, whose :class:`~petab_sciml.problem.loader.Problem`
gives it as ``problem.data``) hand this to
:func:`petab_sciml.simulation.builder.build_plan`; neither needs a backend for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from petab_sciml.problem.config import ProblemConfig
    from petab_sciml.problem.context import ProblemContext
    from petab_sciml.problem.parameters import PlainParameter
    from petab_sciml.problem.resolve import ResolvedNetwork


@dataclass(frozen=True)
class ProblemData:
    """A problem's tables, files and parameters, checked and resolved (plain data)."""

    config: ProblemConfig
    """The problem YAML: model, table, network and array files."""
    context: ProblemContext
    """The tables, the mapping, the network IRs and the array files as read."""
    parameters: Mapping[str, ResolvedNetwork]
    """Resolved parameters by network id: values (PyTorch layout), trainable masks,
    bounds and priors per element."""
    plain_parameters: Mapping[str, PlainParameter]
    """Parameter-table rows of the mechanistic (non-network) parameters, table order."""

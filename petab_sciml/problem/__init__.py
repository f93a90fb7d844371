"""PEtab SciML problems: loading, parameter resolution, validation and ``info``.

Core modules import numpy, PyYAML and h5py only; backends are imported when a problem
is loaded into one.
"""

from __future__ import annotations

from petab_sciml.problem.entities import EntityError, EntityRef, check_entity, parse_entity
from petab_sciml.problem.issues import RULES, Issue, IssueList, Rule, Severity
from petab_sciml.problem.resolve import ParameterRow, Prior, ResolvedNetwork, resolve_network
from petab_sciml.problem.validate import ValidationReport, validate_problem


def load_problem(*args, **kwargs):
    """See :func:`petab_sciml.problem.loader.load_problem`."""
    from petab_sciml.problem.loader import load_problem as _load

    return _load(*args, **kwargs)


def problem_info(*args, **kwargs):
    """See :func:`petab_sciml.problem.info.problem_info`."""
    from petab_sciml.problem.info import problem_info as _info

    return _info(*args, **kwargs)


__all__ = [
    "RULES", "EntityError", "EntityRef", "Issue", "IssueList", "ParameterRow", "Prior",
    "ResolvedNetwork", "Rule", "Severity", "ValidationReport", "check_entity", "load_problem",
    "parse_entity", "problem_info", "resolve_network", "validate_problem",
]

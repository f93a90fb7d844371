"""Free symbols of PEtab math expressions (without a full parser).

The validator needs only the identifiers a formula uses, and must run with the core
dependencies alone; the full parser (:mod:`petab_sciml.expressions`) needs sympy and is
used when a problem is loaded for simulation.  Identifiers followed by ``(`` are function
names and are skipped; numbers such as ``1e-3`` are not mistaken for symbols.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"(?<![A-Za-z0-9_.])([A-Za-z_][A-Za-z0-9_]*)(\s*\()?")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_])(?:\d+\.?\d*[eE][+-]?\d+|\d*\.\d+|\d+)")
CONSTANTS = {"time", "pi", "e", "inf", "Inf", "INF", "nan", "NaN", "true", "false",
             "True", "False", "avogadro", "exponentiale"}


def free_symbols(expression: str) -> set[str]:
    """Identifiers used as values in ``expression`` (function names excluded)."""
    text = _NUMBER.sub(" 0 ", expression)
    return {m.group(1) for m in _TOKEN.finditer(text) if not m.group(2)}


def uses_time(expression: str) -> bool:
    return "time" in free_symbols(expression)

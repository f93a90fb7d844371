"""Free symbols of PEtab math expressions (without a full parser).

Identifiers followed by ``(`` are function names and are skipped; numbers such as
``1e-3`` are not mistaken for symbols.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"(?<![A-Za-z0-9_.])([A-Za-z_][A-Za-z0-9_]*)(\s*\()?")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_])(?:\d+\.?\d*[eE][+-]?\d+|\d*\.\d+|\d+)")
CONSTANTS = {"time", "t", "pi", "e", "inf", "Inf", "INF", "nan", "NaN", "true", "false",
             "True", "False", "avogadro", "exponentiale"}


def free_symbols(expression: str) -> set[str]:
    """Identifiers used as values in ``expression`` (function names excluded)."""
    text = _NUMBER.sub(" 0 ", expression)
    return {m.group(1) for m in _TOKEN.finditer(text) if not m.group(2)}


def uses_time(expression: str) -> bool:
    return bool(free_symbols(expression) & {"time", "t"})

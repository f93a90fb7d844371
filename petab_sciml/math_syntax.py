"""The grammar of PEtab math expressions, without sympy: tokens, syntax tree, budgets.

:func:`parse_syntax` turns a formula into a small syntax tree of tuples (below) or raises
:class:`MathSyntaxError` at a position.  It is iterative (an operator-precedence parser
with explicit stacks), so no nesting exhausts the Python stack, and it enforces two
budgets of :mod:`petab_sciml.limits`: the length of the text (``max_expression_chars``)
and the height of the tree (``max_expression_depth``: nested calls, prefix operators,
powers, comparisons; chains of ``+ -``, ``* /``, ``&&`` and ``||`` count once).

The validator uses it to check every formula of a problem with the core dependencies
alone; :func:`petab_sciml.expressions.parse` builds sympy from the same tree, so what
validation accepts, loading accepts.

Syntax tree nodes (``pos`` is the 0-based character position)::

    ("num", text, pos)                 number literal as written
    ("name", text, pos)                identifier (literals inf/nan/true/false included)
    ("call", name, (args...), pos)
    ("neg" | "pos" | "not", child, pos)
    ("add", (("+" | "-", child), ...), pos)     first sign is "+"; pos of the first op
    ("mul", (("*" | "/", child), ...), pos)     first op is "*"
    ("and" | "or", (children...), pos)
    ("rel", op, left, right, pos)      op in < <= > >= == !=
    ("pow", base, exponent, pos)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from petab_sciml import limits
from petab_sciml.errors import PetabSciMLError

__all__ = ["FUNCTION_ARITY", "MathSyntaxError", "Syntax", "parse_syntax"]

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|&&|\|\||<=|>=|==|!=|[-+*/^(),<>!])
    """,
    re.VERBOSE,
)

_TRIG = ("sin", "cos", "tan", "sec", "csc", "cot", "sinh", "cosh", "tanh", "sech", "csch",
         "coth", "arcsin", "arccos", "arctan", "arcsec", "arccsc", "arccot", "arcsinh",
         "arccosh", "arctanh", "arcsech", "arccsch", "arccoth")
FUNCTION_ARITY: dict[str, tuple[int, int | None]] = {
    **{name: (1, 1) for name in ("exp", "sqrt", "ln", "log2", "log10", "abs", "sign",
                                 "floor", "ceil", *_TRIG)},
    "log": (1, 2), "pow": (2, 2), "min": (1, None), "max": (1, None),
    "piecewise": (1, None),
}
"""Known functions: (least, most) number of arguments (None: any)."""

BINARY_BP = {
    "||": 10, "&&": 10,
    "<": 20, "<=": 20, ">": 20, ">=": 20, "==": 20, "!=": 20,
    "+": 30, "-": 30,
    "*": 40, "/": 40,
    "^": 60, "**": 60,
}  # fmt: skip
"""Binding power of the binary operators (``^`` right-associative)."""
NOT_BP = 45
UNARY_BP = 50

# A number whose magnitude exceeds about 2^EXACT_BITS is folded in floating point, not
# exactly (9^9^9 would take sympy hours); libpetab's second opinion skips such formulas.
EXACT_BITS = 4096


class MathSyntaxError(PetabSciMLError):
    """A formula does not follow the grammar, or exceeds a budget (``code`` then names
    it: ``LIMIT_EXPRESSION_DEPTH`` / ``LIMIT_EXPRESSION_SIZE``).  ``position`` is the
    0-based character position."""

    def __init__(self, message: str, *, position: int | None = None,
                 code: str | None = None, entry: str | None = None):
        super().__init__(message, entry=entry, code=code)
        self.position = position


@dataclass(frozen=True)
class Syntax:
    """A parsed formula: its tree, the tree's height, and whether it holds a constant
    too large for exact arithmetic (a huge literal or power)."""

    tree: tuple
    height: int
    huge_constants: bool


def parse_syntax(text: str, *, context: str | None = None) -> Syntax:
    """Parse ``text`` (a PEtab math formula); raises :class:`MathSyntaxError` whose
    message names the position and the text."""
    return _Parser(text, context).run()


def _fail(text: str, message: str, pos: int, context: str | None,
          code: str | None = None) -> MathSyntaxError:
    shown = text if len(text) <= 200 else text[:200] + "..."
    return MathSyntaxError(f"{message} at position {pos} in {shown!r}", position=pos,
                           code=code, entry=context)


class _Parser:
    def __init__(self, text: str, context: str | None):
        self.text = text
        self.context = context
        self.budget = limits.current()
        self.huge = False

    def fail(self, message: str, pos: int, code: str | None = None) -> MathSyntaxError:
        return _fail(self.text, message, pos, self.context, code)

    def tokens(self) -> list[tuple[str, str, int]]:
        text = self.text
        if len(text) > self.budget.max_expression_chars:
            raise MathSyntaxError(
                limits.exceeded("max_expression_chars", "expression length in characters",
                                len(text)).message, position=0,
                code="LIMIT_EXPRESSION_SIZE", entry=self.context)
        out = []
        pos = 0
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            if m is None:
                raise self.fail(f"unexpected character {text[pos]!r}", pos)
            if m.lastgroup != "ws":
                out.append((m.lastgroup, m.group(), pos))
            pos = m.end()
        out.append(("end", "", len(text)))
        return out

    # --------------------------------------------------------------- the parse loop
    def run(self) -> Syntax:
        tokens = self.tokens()
        if len(tokens) == 1:
            raise self.fail("empty expression", 0)
        self.out: list[tuple[tuple, int]] = []   # (node, height)
        self.ops: list[list[Any]] = []           # operator stack entries (lists)
        expect_operand = True
        i = 0
        while True:
            kind, tok, pos = tokens[i]
            i += 1
            if expect_operand:
                if kind == "number":
                    self.out.append((("num", tok, pos), 0))
                    self.huge |= _huge_literal(tok)
                    expect_operand = False
                elif kind == "name":
                    if tokens[i][1] == "(" and tokens[i][0] == "op":
                        i += 1
                        if tok not in FUNCTION_ARITY:
                            raise self.fail(f"unknown function {tok!r}", pos)
                        if tokens[i][1] == ")" and tokens[i][0] == "op":
                            i += 1
                            self.reduce_call(tok, 0, pos)
                            expect_operand = False
                        else:
                            self.ops.append(["call", tok, pos, 1, len(self.out)])
                    else:
                        self.out.append((("name", tok, pos), 0))
                        expect_operand = False
                elif kind == "op" and tok == "(":
                    self.ops.append(["paren", "(", pos])
                elif kind == "op" and tok in ("+", "-"):
                    self.ops.append(["pre", tok, pos, UNARY_BP])
                elif kind == "op" and tok == "!":
                    self.ops.append(["pre", tok, pos, NOT_BP])
                else:
                    raise self.fail(f"unexpected {tok or 'end of expression'!r}", pos)
                continue
            if kind == "end":
                break
            if kind == "op" and tok in BINARY_BP:
                bp = BINARY_BP[tok]
                right = tok in ("^", "**")
                while self.ops and self.ops[-1][0] in ("bin", "pre") and (
                        self.ops[-1][3] > bp or (self.ops[-1][3] == bp and not right)):
                    self.reduce(self.ops.pop())
                self.ops.append(["bin", tok, pos, bp])
                expect_operand = True
            elif kind == "op" and tok == ")":
                self.reduce_to_group(pos, ")")
                if not self.ops:
                    raise self.fail("unexpected ')'", pos)
                entry = self.ops.pop()
                if entry[0] == "call":
                    self.reduce_call(entry[1], entry[3], entry[2])
            elif kind == "op" and tok == ",":
                self.reduce_to_group(pos, ",")
                if not self.ops or self.ops[-1][0] != "call":
                    raise self.fail("unexpected ','", pos)
                self.ops[-1][3] += 1
                expect_operand = True
            else:
                raise self.fail(f"unexpected {tok!r}", pos)
        while self.ops:
            entry = self.ops.pop()
            if entry[0] in ("paren", "call"):
                raise self.fail("expected ')', found end of expression", len(self.text))
            self.reduce(entry)
        (tree, height), = self.out
        return Syntax(tree, height, self.huge)

    def reduce_to_group(self, pos: int, tok: str) -> None:
        while self.ops and self.ops[-1][0] in ("bin", "pre"):
            self.reduce(self.ops.pop())

    # --------------------------------------------------------------- building nodes
    def push(self, node: tuple, height: int, pos: int) -> None:
        if height > self.budget.max_expression_depth:
            raise MathSyntaxError(
                limits.exceeded("max_expression_depth", "expression nesting depth",
                                height).message + f" (at position {pos})", position=pos,
                code="LIMIT_EXPRESSION_DEPTH", entry=self.context)
        self.out.append((node, height))

    def reduce(self, entry: list) -> None:
        kind, op, pos = entry[0], entry[1], entry[2]
        if kind == "pre":
            child, h = self.out.pop()
            name = {"-": "neg", "+": "pos", "!": "not"}[op]
            self.push((name, child, pos), h + 1, pos)
            return
        (right, hr), (left, hl) = self.out.pop(), self.out.pop()
        if op in ("+", "-", "*", "/", "&&", "||"):
            kind = {"+": "add", "-": "add", "*": "mul", "/": "mul", "&&": "and",
                    "||": "or"}[op]
            signed = kind in ("add", "mul")
            if left[0] == kind:   # extend the chain: a + b + c is one node
                items, start, height = left[1], left[2], max(hl, hr + 1)
            else:
                items = (("+" if kind == "add" else "*", left),) if signed else (left,)
                start, height = pos, max(hl, hr) + 1
            items = items + (((op, right),) if signed else (right,))
            self.push((kind, items, start), height, pos)
        elif op in ("^", "**"):
            self.huge |= _huge_power(left, right)
            self.push(("pow", left, right, pos), max(hl, hr) + 1, pos)
        else:
            self.push(("rel", op, left, right, pos), max(hl, hr) + 1, pos)

    def reduce_call(self, name: str, count: int, pos: int) -> None:
        least, most = FUNCTION_ARITY[name]
        if name == "piecewise" and count % 2 == 0:
            raise self.fail(f"{name}() takes an odd number (v1, c1, ..., otherwise) of "
                            f"argument(s), got {count}", pos)
        if count < least or (most is not None and count > most):
            want = str(least) if least == most else (
                f"{least} or {most}" if most is not None else f"at least {least}")
            raise self.fail(f"{name}() takes {want} argument(s), got {count}", pos)
        items = self.out[len(self.out) - count:] if count else []
        del self.out[len(self.out) - count:]
        height = 1 + max((h for _, h in items), default=0)
        self.push(("call", name, tuple(n for n, _ in items), pos), height, pos)


# ------------------------------------------------------------------ constant sizes
def _huge_literal(text: str) -> bool:
    """A literal beyond what floats (and exact arithmetic, cheaply) hold."""
    mantissa, _, exponent = text.lower().partition("e")
    digits = len(mantissa.replace(".", "").lstrip("0"))
    exponent = exponent.lstrip("+-").lstrip("0")
    return digits > 300 or len(exponent) > 3 or (bool(exponent) and int(exponent) > 300)


def constant_value(node: tuple) -> float | None:
    """The value of a constant subtree of literals, signs and powers (in floating point,
    inf on overflow), or None if the subtree is not of that kind."""
    stack: list[tuple[tuple, bool]] = [(node, False)]
    values: list[float | None] = []
    while stack:
        item, done = stack.pop()
        kind = item[0]
        if kind == "num":
            try:
                values.append(float(item[1]))
            except ValueError:  # pragma: no cover - the tokenizer accepts floats only
                values.append(None)
        elif kind in ("neg", "pos"):
            if not done:
                stack += [(item, True), (item[1], False)]
            else:
                v = values.pop()
                values.append(None if v is None else (-v if kind == "neg" else v))
        elif kind == "pow":
            if not done:
                stack += [(item, True), (item[1], False), (item[2], False)]
            else:
                base, exponent = values.pop(), values.pop()
                values.append(_float_pow(base, exponent))
        else:
            values.append(None)
    return values[0]


def _float_pow(base: float | None, exponent: float | None) -> float | None:
    if base is None or exponent is None:
        return None
    try:
        return float(base ** exponent) if not (base < 0 and not exponent.is_integer()) \
            else math.nan
    except OverflowError:
        return -math.inf if base < 0 and exponent % 2 == 1 else math.inf
    except (ZeroDivisionError, TypeError):
        return math.nan


def exact_power_bits(base: float, exponent: float) -> float:
    """Bits of ``base ** exponent`` computed exactly (log2 of the larger of numerator
    and denominator), for numbers given as floats."""
    magnitude = abs(base)
    if magnitude in (0.0, 1.0) or math.isnan(magnitude):
        return 0.0
    if math.isinf(magnitude) or math.isinf(exponent):
        return math.inf
    return abs(exponent) * abs(math.log2(magnitude))


def _huge_power(base: tuple, exponent: tuple) -> bool:
    b, e = constant_value(base), constant_value(exponent)
    if b is None or e is None:
        return False
    return exact_power_bits(b, e) > EXACT_BITS

"""PEtab math expressions: parse into sympy, compile into pure array functions.

Two halves:

* :func:`parse` turns a PEtab v2 math string (observable and noise formulas, condition
  values, hybridization ``targetValue``) into a sympy expression with a small hand-written
  parser that follows libpetab's ANTLR grammar (``PetabMathExprParser.g4``).  Nothing is
  ever ``eval``-ed, and every identifier becomes a plain :class:`sympy.Symbol` -- ``gamma``,
  ``beta``, ``E``, ``I`` or ``S`` are model symbols, not sympy functions or constants.
* :func:`compile_expressions` (and :func:`compile_jax` / :func:`compile_torch` /
  :func:`compile_numpy`) turns a list of sympy expressions into one straight-line
  Python function ``f(t, *arrays) -> array`` for a backend.  Symbols are read from the
  argument arrays by position (``arrays[g][..., i]``); the function has no Python loop over
  symbols, works on leading batch dimensions, is ``jax.jit``/``vmap``/``grad``-able and
  differentiable by torch autograd.

Operators (tightest first): ``^`` (right-associative; ``**`` is accepted as a synonym for
PEtab v1 tables), prefix ``+``/``-``, prefix ``!``, ``*``/``/``, ``+``/``-``, comparisons
``< <= > >= == !=``, then ``&&``/``||`` (same level, left-associative).  Functions:
``exp sqrt log(x) log(x, base) ln log2 log10 pow abs sign min max floor ceil``,
the trigonometric and hyperbolic functions and their ``arc`` inverses
(``sin ... csc``, ``arcsin ... arccsc``, ``sinh ... csch``, ``arcsinh ... arccsch``) and
``piecewise(v1, c1, v2, c2, ..., otherwise)``.  Literals: numbers, ``inf``, ``nan``,
``true``, ``false``; ``time`` is the simulation time (:data:`TIME`).  Booleans used as
numbers are 1/0, numbers used as conditions are ``!= 0`` (as in PEtab).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sympy
from sympy.logic.boolalg import Boolean, BooleanFalse, BooleanTrue

from petab_sciml.errors import PetabSciMLError

__all__ = [
    "TIME",
    "ExpressionError",
    "parse",
    "as_expression",
    "free_symbol_names",
    "bool_to_number",
    "number_to_boolean",
    "sympy_number",
    "compile_expressions",
    "compile_jax",
    "compile_torch",
    "compile_numpy",
]

TIME = sympy.Symbol("time")
"""The simulation time (``time`` in PEtab math, ``<csymbol time>`` in SBML)."""


class ExpressionError(PetabSciMLError):
    """A math expression cannot be parsed or compiled."""


# ---------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------

_TRIG = {
    "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan,
    "sec": sympy.sec, "csc": sympy.csc, "cot": sympy.cot,
    "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh,
    "sech": sympy.sech, "csch": sympy.csch, "coth": sympy.coth,
    "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
    "arcsec": sympy.asec, "arccsc": sympy.acsc, "arccot": sympy.acot,
    "arcsinh": sympy.asinh, "arccosh": sympy.acosh, "arctanh": sympy.atanh,
    "arcsech": sympy.asech, "arccsch": sympy.acsch, "arccoth": sympy.acoth,
}  # fmt: skip
_UNARY = {
    "exp": sympy.exp,
    "sqrt": sympy.sqrt,
    "ln": sympy.log,
    "log2": lambda x: sympy.log(x, 2),
    "log10": lambda x: sympy.log(x, 10),
    "abs": sympy.Abs,
    "sign": sympy.sign,
    "floor": sympy.floor,
    "ceil": sympy.ceiling,
    **_TRIG,
}
_LITERALS = {"inf": sympy.oo, "nan": sympy.nan, "true": sympy.true, "false": sympy.false}
_RELATIONS = {
    "<": sympy.StrictLessThan,
    "<=": sympy.LessThan,
    ">": sympy.StrictGreaterThan,
    ">=": sympy.GreaterThan,
    "==": sympy.Eq,
    "!=": sympy.Ne,
}


def bool_to_number(x):
    """A sympy boolean as a number (1/0); numbers pass through."""
    if isinstance(x, BooleanTrue):
        return sympy.Integer(1)
    if isinstance(x, BooleanFalse):
        return sympy.Integer(0)
    if isinstance(x, Boolean) and not isinstance(x, sympy.Symbol):
        return sympy.Piecewise((sympy.Integer(1), x), (sympy.Integer(0), True))
    return x


def number_to_boolean(x):
    """A sympy number as a boolean (``x != 0``); booleans pass through."""
    if isinstance(x, Boolean) and not isinstance(x, sympy.Symbol):
        return x
    if x.is_zero is True:
        return sympy.false
    if x.is_zero is False:
        return sympy.true
    return sympy.Ne(x, 0)


def _children(node: tuple) -> tuple:
    kind = node[0]
    if kind in ("neg", "pos", "not"):
        return (node[1],)
    if kind in ("add", "mul"):
        return tuple(child for _, child in node[1])
    if kind in ("and", "or"):
        return node[1]
    if kind == "call":
        return node[2]
    if kind == "rel":
        return (node[2], node[3])
    if kind == "pow":
        return (node[1], node[2])
    return ()


def _build(tree: tuple, text: str, context: str | None):
    """sympy from a syntax tree (:mod:`petab_sciml.math_syntax`), bottom-up without
    recursion; constant powers too large for exact arithmetic are folded in floats."""
    stack: list[tuple[tuple, bool]] = [(tree, False)]
    values: list[Any] = []
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if children and not done:
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children))
            continue
        args = values[len(values) - len(children):] if children else []
        if children:
            del values[len(values) - len(children):]
        try:
            values.append(_node(node, args))
        except (TypeError, ValueError, ArithmeticError) as exc:  # pragma: no cover
            raise ExpressionError(f"cannot evaluate {node[0]} at position {node[-1]} in "
                                  f"{text!r}: {exc}", entry=context) from None
    return values[0]


def _number(text: str):
    if text.isdigit() and len(text.lstrip("0")) <= 300:
        return sympy.Integer(int(text))
    return sympy_number(float(text))   # overflows to inf, like the backends' floats


def _node(node: tuple, args: list):
    kind = node[0]
    if kind == "num":
        return _number(node[1])
    if kind == "name":
        literal = _LITERALS.get(node[1].lower())
        return literal if literal is not None else sympy.Symbol(node[1])
    if kind == "neg":
        return -bool_to_number(args[0])
    if kind == "pos":
        return bool_to_number(args[0])
    if kind == "not":
        return sympy.Not(number_to_boolean(args[0]))
    if kind == "add":
        return sympy.Add(*(bool_to_number(a) if sign == "+" else -bool_to_number(a)
                           for (sign, _), a in zip(node[1], args)))
    if kind == "mul":
        return sympy.Mul(*(bool_to_number(a) if op == "*" else 1 / bool_to_number(a)
                           for (op, _), a in zip(node[1], args)))
    if kind in ("and", "or"):
        parts = [number_to_boolean(a) for a in args]
        return sympy.And(*parts) if kind == "and" else sympy.Or(*parts)
    if kind == "rel":
        return _RELATIONS[node[1]](bool_to_number(args[0]), bool_to_number(args[1]))
    if kind == "pow":
        return _tame(power(bool_to_number(args[0]), bool_to_number(args[1])))
    return _tame(_call(node[1], args))


def _tame(value):
    """A constant that sympy cannot evaluate in floats (``exp(exp(exp(exp(10))))``:
    mpmath overflows) becomes its float64 value (inf), so that no later sympy step (CSE,
    ordering, printing) trips over it."""
    if value.free_symbols or isinstance(value, sympy.Number) or _is_boolean(value):
        return value
    try:
        complex(sympy.N(value, 17))
        return value
    except (OverflowError, TypeError, ValueError, ArithmeticError, RecursionError):
        pass
    import warnings

    import numpy as np

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        number = complex(sympy.lambdify([], value, "numpy")())
    if number.imag != 0 and not math.isnan(number.imag):
        return sympy.nan
    return sympy_number(number.real)


def power(base, exponent):
    """``base ** exponent``; when both are numbers whose exact power would exceed about
    2^4096 (``9^9^9``), folded in floating point instead (inf on overflow), so constant
    folding is bounded in time and memory."""
    from petab_sciml.math_syntax import EXACT_BITS, exact_power_bits

    if isinstance(base, sympy.Number) and isinstance(exponent, sympy.Number):
        b, e = _as_float(base), _as_float(exponent)
        if exact_power_bits(b, e) > EXACT_BITS:
            if b < 0 and not e.is_integer():
                return sympy.nan
            try:
                return sympy_number(float(b ** e))
            except OverflowError:
                odd = e.is_integer() and e % 2 == 1
                return -sympy.oo if b < 0 and odd else sympy.oo
    return sympy.Pow(base, exponent)


def _as_float(value) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _call(name: str, args: list):
    if name == "piecewise":
        pieces = [(bool_to_number(v), number_to_boolean(c))
                  for v, c in zip(args[:-1:2], args[1:-1:2])]
        pieces.append((bool_to_number(args[-1]), sympy.true))
        return sympy.Piecewise(*pieces)
    nargs = [bool_to_number(a) for a in args]
    if name in _UNARY:
        return _UNARY[name](nargs[0])
    if name == "log":
        return sympy.log(*nargs)
    if name == "pow":
        return power(*nargs)
    return (sympy.Min if name == "min" else sympy.Max)(*nargs)


def parse(expression: str | float | int | sympy.Basic, *, context: str | None = None):
    """Parse a PEtab math expression into sympy.

    Numbers are returned as sympy numbers; sympy objects pass through unchanged.
    ``context`` names where the expression comes from (e.g. ``"observables.tsv: prey_o
    observableFormula"``) and is put in front of error messages.

    The grammar and its budgets (length, nesting depth) are those of
    :mod:`petab_sciml.math_syntax`, which the validator checks too.  Raises
    :class:`ExpressionError` for syntax errors, unknown functions and wrong arities, and
    for formulas over a budget (``code`` ``LIMIT_EXPRESSION_DEPTH`` or
    ``LIMIT_EXPRESSION_SIZE``).
    """
    if isinstance(expression, sympy.Basic):
        return expression
    if isinstance(expression, bool):
        return sympy.true if expression else sympy.false
    if isinstance(expression, int):
        return sympy.Integer(expression)
    if isinstance(expression, float):
        return sympy_number(expression)
    if hasattr(expression, "dtype") and getattr(expression, "ndim", 1) == 0:  # numpy scalar
        return sympy_number(float(expression))
    if not isinstance(expression, str):
        raise ExpressionError(
            f"cannot parse {type(expression).__name__} as an expression", entry=context
        )
    from petab_sciml.math_syntax import MathSyntaxError, parse_syntax

    try:
        syntax = parse_syntax(expression, context=context)
    except MathSyntaxError as exc:
        raise ExpressionError(exc.message, entry=context, code=exc.code) from None
    return _build(syntax.tree, expression, context)


def sympy_number(value: float):
    """A float as a sympy number: exact Integer when integral, else a 53-bit Float."""
    if math.isnan(value):
        return sympy.nan
    if math.isinf(value):
        return sympy.oo if value > 0 else -sympy.oo
    if value.is_integer() and abs(value) < 2**53:
        return sympy.Integer(int(value))
    return sympy.Float(value)


as_expression = parse
"""Alias of :func:`parse` (reads better for values that may already be numbers)."""


def free_symbol_names(expr: sympy.Basic | Iterable[sympy.Basic]) -> set[str]:
    """Names of the free symbols of one expression or of several."""
    if isinstance(expr, sympy.Basic):
        expr = [expr]
    return {s.name for e in expr for s in e.free_symbols}


# ---------------------------------------------------------------------------------------
# Compiler
# ---------------------------------------------------------------------------------------

# sympy function class -> name of the array-module function (numpy's names, which jax.numpy
# and torch share)
_FUNCS = {
    sympy.exp: "exp",
    sympy.log: "log",
    sympy.sin: "sin",
    sympy.cos: "cos",
    sympy.tan: "tan",
    sympy.asin: "arcsin",
    sympy.acos: "arccos",
    sympy.atan: "arctan",
    sympy.sinh: "sinh",
    sympy.cosh: "cosh",
    sympy.tanh: "tanh",
    sympy.asinh: "arcsinh",
    sympy.acosh: "arccosh",
    sympy.atanh: "arctanh",
    sympy.Abs: "abs",
    sympy.sign: "sign",
    sympy.floor: "floor",
    sympy.ceiling: "ceil",
}
# reciprocal functions: f(x) = base(1/x) or 1/base(x)
_RECIPROCAL = {
    sympy.sec: (sympy.cos, "outer"),
    sympy.csc: (sympy.sin, "outer"),
    sympy.cot: (sympy.tan, "outer"),
    sympy.sech: (sympy.cosh, "outer"),
    sympy.csch: (sympy.sinh, "outer"),
    sympy.coth: (sympy.tanh, "outer"),
    sympy.asec: (sympy.acos, "inner"),
    sympy.acsc: (sympy.asin, "inner"),
    sympy.acot: (sympy.atan, "inner"),
    sympy.asech: (sympy.acosh, "inner"),
    sympy.acsch: (sympy.asinh, "inner"),
    sympy.acoth: (sympy.atanh, "inner"),
}


def _is_boolean(expr) -> bool:
    return isinstance(expr, Boolean) and not isinstance(expr, sympy.Symbol)


class _Printer:
    """sympy -> Python source for one backend; symbols map to local variable names."""

    def __init__(self, names: Mapping[sympy.Basic, str]):
        self.names = names

    def num(self, expr) -> str:
        """Code of a numeric value (booleans become 1.0/0.0)."""
        if _is_boolean(expr):
            return f"_where({self.cond(expr)}, _one, _zero)"
        return self.code(expr)

    def arr(self, expr) -> str:
        """Like :meth:`num` but always an array (constants broadcast to the batch)."""
        code = self.num(expr)
        if not expr.free_symbols and not _is_boolean(expr):
            return f"({code} + _zero)"
        return code

    def cond(self, expr) -> str:
        if isinstance(expr, BooleanTrue):
            return "True"
        if isinstance(expr, BooleanFalse):
            return "False"
        if not _is_boolean(expr):
            return f"({self.code(expr)} != 0)"
        if isinstance(expr, sympy.core.relational.Relational):
            op = {
                sympy.StrictLessThan: "<", sympy.LessThan: "<=",
                sympy.StrictGreaterThan: ">", sympy.GreaterThan: ">=",
                sympy.Eq: "==", sympy.Ne: "!=",
            }[type(expr)]  # fmt: skip
            lhs, rhs = expr.args
            return f"({self.arr(lhs)} {op} {self.num(rhs)})"
        if isinstance(expr, sympy.And | sympy.Or | sympy.Xor):
            fn = {sympy.And: "_and", sympy.Or: "_or", sympy.Xor: "_xor"}[type(expr)]
            args = [self.cond(a) for a in expr.args]
            out = args[0]
            for a in args[1:]:
                out = f"{fn}({out}, {a})"
            return out
        if isinstance(expr, sympy.Not):
            return f"_not({self.cond(expr.args[0])})"
        if isinstance(expr, sympy.Implies):
            a, b = expr.args
            return f"_or(_not({self.cond(a)}), {self.cond(b)})"
        raise ExpressionError(f"cannot compile boolean {type(expr).__name__}: {expr}")

    def constant(self, expr) -> str | None:
        """Code of the float64 value of a constant expression; None if sympy cannot
        evaluate it (e.g. exp(exp(exp(exp(10)))): its code then computes it at run time,
        in the backend's floats, like any other expression)."""
        if expr.has(sympy.nan, sympy.zoo):
            return "_nan"
        try:
            value = complex(sympy.N(expr, 17))
        except (OverflowError, TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            if not isinstance(expr, sympy.Number):
                return None
            if isinstance(exc, OverflowError):
                return "_inf" if expr > 0 else "(-_inf)"
            raise ExpressionError(f"cannot evaluate constant {expr}") from exc
        if value.imag != 0 and not math.isnan(value.imag):
            return "_nan"   # as float arithmetic has it: (-2)^(1/3) is NaN, not an error
        real = value.real
        if math.isnan(real):
            return "_nan"
        if math.isinf(real):
            return "_inf" if real > 0 else "(-_inf)"
        return repr(float(real))

    def code(self, expr) -> str:
        if expr in self.names:
            return self.names[expr]
        if not expr.free_symbols:
            if _is_boolean(expr):
                return self.cond(expr)
            folded = self.constant(expr)
            if folded is not None:
                return folded
            # not foldable in sympy (beyond its float range): computed at run time
        if isinstance(expr, sympy.Symbol):
            raise ExpressionError(f"symbol {expr.name!r} is not an argument")  # pragma: no cover
        if isinstance(expr, sympy.Add):
            return "(" + " + ".join(self.num(a) for a in expr.args) + ")"
        if isinstance(expr, sympy.Mul):
            num, den = [], []
            for a in expr.args:
                if isinstance(a, sympy.Pow) and a.exp.is_Number and a.exp < 0:
                    den.append(a.base if a.exp == -1 else sympy.Pow(a.base, -a.exp))
                else:
                    num.append(a)
            out = " * ".join(self.num(a) for a in num) if num else "1.0"
            if den:
                return f"({out} / ({' * '.join(self.num(a) for a in den)}))"
            if len(num) > 1 and not (len(num) == 2 and sympy.S.NegativeOne in num):
                return f"_rounded({out})"   # a product: see _namespace
            return f"({out})"
        if isinstance(expr, sympy.Pow):
            base, exp = expr.args
            b = self.num(base)
            if exp == sympy.S.Half:
                return f"_m.sqrt({self.arr(base)})"
            if exp == -sympy.S.Half:
                return f"(1.0 / _m.sqrt({self.arr(base)}))"
            if exp == -1:
                return f"(1.0 / {b})"
            if exp.is_Integer:
                power_code = f"({b} ** {int(exp)})"
                return f"_rounded{power_code}" if int(exp) > 1 else power_code
            if base == sympy.E:
                return f"_m.exp({self.arr(exp)})"
            return f"({b} ** {self.num(exp)})"
        if isinstance(expr, sympy.Piecewise):
            out = "_nan_like"
            for value, cond in reversed(expr.args):
                if isinstance(cond, BooleanTrue):
                    out = self.arr(value)
                elif isinstance(cond, BooleanFalse):
                    continue
                else:
                    out = f"_where({self.cond(cond)}, {self.arr(value)}, {out})"
            return out
        if isinstance(expr, sympy.Min | sympy.Max):
            fn = "_minimum" if isinstance(expr, sympy.Min) else "_maximum"
            args = [self.arr(a) for a in expr.args]
            out = args[0]
            for a in args[1:]:
                out = f"{fn}({out}, {a})"
            return out
        func = type(expr)
        if func in _RECIPROCAL:
            base, where = _RECIPROCAL[func]
            (arg,) = expr.args
            if where == "outer":
                return f"(1.0 / {self.code(base(arg, evaluate=False))})"
            return self.code(base(1 / arg, evaluate=False))
        if func in _FUNCS:
            name = _FUNCS[func]
            args = ", ".join(self.arr(a) for a in expr.args)
            return f"_m.{name}({args})"
        if _is_boolean(expr):
            return self.cond(expr)
        raise ExpressionError(f"cannot compile {func.__name__} in {expr}")


_STATEMENT_HEIGHT = 12
"""Subexpressions are at most this many levels high in one generated statement: the
generated source then stays within Python's parser limits (200 nested parentheses) and
the printer's recursion stays shallow, whatever the formula's depth."""


def _heights(expr) -> dict:
    """Height of every subexpression of ``expr`` (leaves 0), computed without recursion."""
    out: dict = {}
    stack = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if node in out:
            continue
        if not node.args:
            out[node] = 0
        elif done:
            out[node] = 1 + max(out[a] for a in node.args)
        else:
            stack.append((node, True))
            stack.extend((a, False) for a in node.args if a not in out)
    return out


def _split_deep(replacements: list, reduced: list) -> tuple[list, list]:
    """Move subexpressions of height ``_STATEMENT_HEIGHT`` into statements of their own
    (like common subexpressions), until no expression is higher than that."""
    names = sympy.numbered_symbols("h", cls=sympy.Dummy)
    out: list = []

    def cut(expr):
        while True:
            heights = _heights(expr)
            if heights.get(expr, 0) <= _STATEMENT_HEIGHT:
                return expr
            deep = {node: next(names) for node, h in heights.items()
                    if h == _STATEMENT_HEIGHT and not _is_pair(node)}
            if not deep:
                return expr
            out.extend((sym, node) for node, sym in deep.items())
            expr = expr.xreplace({node: sym for node, sym in deep.items()})

    for sym, sub in replacements:
        out.append((sym, cut(sub)))
    return out, [cut(e) for e in reduced]


def _is_pair(node) -> bool:
    return isinstance(node, sympy.functions.elementary.piecewise.ExprCondPair)


def _namespace(backend: str) -> dict[str, Any]:
    """Array functions of compiled code: numpy here, any other backend from its
    ``expression_namespace()`` (found through the ``petab_sciml.backends`` entry points)."""
    if backend != "numpy":
        from petab_sciml.plugins import get_backend

        ns = dict(get_backend(backend).expression_namespace())
    else:
        import numpy as m

        ns = {
            "_m": m,
            "_asarray": lambda a: m.asarray(a, dtype=float),
            "_where": m.where,
            "_minimum": m.minimum,
            "_maximum": m.maximum,
            "_and": m.logical_and,
            "_or": m.logical_or,
            "_xor": m.logical_xor,
            "_not": m.logical_not,
            "_stack": lambda xs: m.stack(xs, axis=-1),
            "_empty": lambda z: m.zeros(m.shape(z) + (0,), m.asarray(z).dtype),
        }
    # ``_rounded(product)``: a product rounded on its own before any sum uses it.  XLA
    # (JAX) fuses ``a * b + c`` into fused multiply-adds, and differently in different
    # programs (one experiment alone or a batch under ``vmap``): the JAX backend's
    # ``_rounded`` keeps the product out of that contraction; elsewhere it is identity.
    ns.setdefault("_rounded", lambda a: a)
    ns.update({"_inf": math.inf, "_nan": math.nan})
    return ns


def compile_expressions(
    exprs: Sequence[sympy.Basic | str | float],
    args: Sequence[Sequence[str | sympy.Symbol]],
    *,
    backend: str,
    name: str = "compiled_expressions",
    cse: bool = True,
    broadcast: bool = True,
) -> Callable[..., Any]:
    """Compile ``exprs`` into ``f(t, *arrays) -> array`` for ``backend``.

    ``args`` lists one group of symbols (names or sympy symbols) per array argument:
    ``args=[state_ids, parameter_ids]`` gives ``f(t, x, p)``; add a group such as
    ``["net1_output1"]`` to pass externally computed values (network outputs) as one more
    array: ``f(t, x, p, nn)``.  ``t`` is the value of :data:`TIME` (``time``); it is
    always the first argument, used or not.

    Contract of the returned function:

    * ``arrays[g]`` has the symbols of group ``g`` on its last axis
      (``arrays[g][..., i]`` is ``args[g][i]``); leading batch dimensions broadcast
      against each other; ``t`` is a scalar (or broadcastable to the batch).
    * The result has shape ``batch + (len(exprs),)`` and the dtype that the inputs give
      (constants are weakly typed Python floats, so float32 inputs stay float32).
    * Booleans are 1.0/0.0; a ``piecewise`` without a true branch is NaN.
    * The body is straight-line code (common subexpressions computed once); torch
      autograd, ``jax.jit``, ``jax.grad`` and ``jax.vmap`` apply.  ``f.source`` holds the
      generated code, ``f.args`` the symbol groups and ``f.backend`` the backend.

    With ``broadcast=False`` the caller promises that all array arguments have the same
    batch shape: outputs that use an argument are then not broadcast explicitly (fewer
    operations per call, which matters inside ODE right-hand sides); constant outputs
    still get the batch shape.

    String expressions are parsed with :func:`parse`.  A free symbol of ``exprs`` that no
    group names (other than ``time``) raises :class:`ExpressionError` naming it; a symbol
    named in two groups too.
    """
    if backend != "numpy":
        from petab_sciml.plugins import backend_names

        if backend not in backend_names():
            raise ValueError(f"unknown backend {backend!r}: use numpy or an installed "
                             f"backend ({', '.join(backend_names())})")
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"function name {name!r} is not a plain Python identifier")
    exprs = [parse(e) for e in exprs]
    groups = [[sympy.Symbol(s) if isinstance(s, str) else s for s in g] for g in args]
    names: dict[sympy.Basic, str] = {}
    preamble: list[str] = []
    where: dict[sympy.Basic, tuple[int, int]] = {}
    for g, group in enumerate(groups):
        for i, sym in enumerate(group):
            if sym in where:
                raise ExpressionError(
                    f"symbol {sym} appears twice in the argument groups "
                    f"(group {where[sym][0]} and {g})"
                )
            where[sym] = (g, i)
    missing = sorted(
        {s.name for e in exprs for s in e.free_symbols if s not in where and s != TIME}
    )
    if missing:
        raise ExpressionError(
            f"expressions use symbols that are not arguments: {', '.join(missing)}"
        )
    used = {s for e in exprs for s in e.free_symbols}
    for sym in sorted(used, key=lambda s: where.get(s, (-1, -1))):
        if sym == TIME and sym not in where:
            names[sym] = "t"
            continue
        g, i = where[sym]
        var = f"_a{g}_{i}"
        names[sym] = var
        preamble.append(f"    {var} = a{g}[..., {i}]")

    if cse and exprs:
        replacements, reduced = sympy.cse(
            exprs, symbols=sympy.numbered_symbols("c", cls=sympy.Dummy), order="none"
        )
    else:
        replacements, reduced = [], exprs
    replacements, reduced = _split_deep(list(replacements), list(reduced))
    printer = _Printer(names)
    body: list[str] = []
    for k, (sym, sub) in enumerate(replacements):
        if _is_boolean(sub):
            code = printer.cond(sub)
        else:
            code = printer.num(sub)
        var = f"_c{k}"
        body.append(f"    {var} = {code}")
        names[sym] = var
    # every output is broadcast to the common batch shape of all arguments
    arg_symbols = set(where)
    outs = [
        printer.num(r) if not broadcast and (e.free_symbols & arg_symbols)
        else f"({printer.num(r)} + _zero)"
        for e, r in zip(exprs, reduced)
    ]
    ret = ("    return _stack([" + ", ".join(outs) + "])") if outs else \
        "    return _empty(_zero)"
    text = "\n".join(preamble + body + [ret])
    uses_time = TIME in used and TIME not in where

    params = ", ".join(["t"] + [f"a{g}" for g in range(len(groups))])
    lines = [f"def {name}({params}):"]
    lines += [f"    a{g} = _asarray(a{g})" for g in range(len(groups))]
    need_zero = broadcast or any(k in text for k in ("_zero", "_one", "_nan_like"))
    if need_zero:
        sources = range(len(groups)) if broadcast else range(min(1, len(groups)))
        if groups:
            lines.append("    _zero = " + " + ".join(f"a{g}[..., :0].sum(-1)" for g in sources))
        else:
            lines.append("    _zero = _asarray(t) * 0.0")
    if "_one" in text:
        lines.append("    _one = _zero + 1.0")
    if "_nan_like" in text:
        lines.append("    _nan_like = _zero + _nan")
    if uses_time and broadcast:
        lines.append("    t = _zero + t")
    lines += preamble + body
    lines.append(ret)
    source = "\n".join(lines) + "\n"

    namespace = _namespace(backend)
    exec(compile(source, f"<petab_sciml.expressions:{name}>", "exec"), namespace)  # noqa: S102
    fn = namespace[name]
    fn.source = source
    fn.args = tuple(tuple(s.name for s in g) for g in groups)
    fn.backend = backend
    fn.expressions = tuple(exprs)
    return fn


def compile_jax(exprs, args, **kwargs) -> Callable[..., Any]:
    """:func:`compile_expressions` for JAX (``jax.numpy``)."""
    return compile_expressions(exprs, args, backend="jax", **kwargs)


def compile_torch(exprs, args, **kwargs) -> Callable[..., Any]:
    """:func:`compile_expressions` for PyTorch (pass tensors; numbers are converted)."""
    return compile_expressions(exprs, args, backend="torch", **kwargs)


def compile_numpy(exprs, args, **kwargs) -> Callable[..., Any]:
    """:func:`compile_expressions` for numpy (reference values, scipy integrators)."""
    return compile_expressions(exprs, args, backend="numpy", **kwargs)

"""Large right-hand sides as sums of terms, evaluated with a few array operations
(:func:`compile_term_sum`).

A right-hand side compiled as straight-line code has one operation per symbol and
arithmetic node: 16,700 for Chen_MSB2009's 500 states.  XLA's compile time grows faster
than that count (more than two minutes for the reverse-mode step), and eager PyTorch pays
a few microseconds per operation on every call.  Mass-action models, most of the large
published ones, are polynomials in the states: each output is a sum of terms
``scale * coefficient(t, theta, ...) * x_i * x_j ...``.  Written that way, a call is:

* the distinct coefficients, straight-line code over the parameters only (a few hundred
  operations, shared by many terms);
* the monomials, a gather of state columns and a product;
* one gather of each term's coefficient and monomial, a product, and a sum per output row.

A term that is not a polynomial in the states (``x / (K + x)``, a ``piecewise`` of
states) keeps its whole expression as its coefficient, so every formula is accepted;
only the polynomial part is vectorized.  The decomposition is exact algebra (sympy's
products and sums of the terms), so values differ from the straight-line code by
rounding only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from petab_sciml.expressions import compile_expressions, parse

MIN_STATES = 100
"""Right-hand sides of this many states and more are compiled as term sums by default
(:func:`petab_sciml.simulation.compiled.compile_plan`); smaller ones keep straight-line
code, whose operations XLA fuses into fewer, cheaper loops."""

MAX_DEGREE = 4
"""Monomials of higher degree stay inside their term's coefficient."""

MAX_PRODUCT_TERMS = 64
"""A product of sums whose expansion has more terms than this stays one coefficient:
expanding ``(a + b + ...)**k`` would trade a few operations for many terms (a sum times
factors without states, ``(v1 - v2 + ...) / V``, is always expanded)."""


@dataclass(frozen=True)
class TermSum:
    """``out[..., r] = sum over k with rows[k] == r of
    scales[k] * coefficients[coefs[k]] * prod_d x[..., monomials[monos[k], d]]``,
    with column ``n_states`` of ``x`` read as 1 (the padding of lower-degree monomials).
    Terms are sorted by row."""

    n_rows: int
    n_states: int
    coefficients: tuple[sympy.Expr, ...]
    monomials: np.ndarray
    """``(n_monomials, degree)`` state columns, ``n_states`` for 1."""
    rows: np.ndarray
    coefs: np.ndarray
    monos: np.ndarray
    scales: np.ndarray


Term = tuple[float, sympy.Expr, tuple[int, ...]]
"""``(scale, coefficient, monomial)``: a monomial is its sorted state columns."""


class _Decomposer:
    def __init__(self, states: dict[sympy.Symbol, int]):
        self.states = states
        self.state_set = set(states)

    def terms(self, expr: sympy.Expr) -> list[Term]:
        if not (expr.free_symbols & self.state_set):
            return [self._coefficient(expr, ())]
        if expr in self.states:
            return [(1.0, sympy.S.One, (self.states[expr],))]
        if isinstance(expr, sympy.Add):
            return [t for a in expr.args for t in self.terms(a)]
        if isinstance(expr, sympy.Mul):
            return self._product(expr, list(expr.args))
        if (isinstance(expr, sympy.Pow) and expr.exp.is_Integer
                and 1 <= int(expr.exp) <= MAX_DEGREE):
            return self._product(expr, [expr.base] * int(expr.exp))
        return [(1.0, expr, ())]

    def _product(self, expr: sympy.Expr, factors: list[sympy.Expr]) -> list[Term]:
        out: list[Term] = [(1.0, sympy.S.One, ())]
        for factor in factors:
            parts = self.terms(factor)
            if min(len(out), len(parts)) > 1 and len(out) * len(parts) > MAX_PRODUCT_TERMS:
                return [(1.0, expr, ())]
            combined = []
            for s1, c1, m1 in out:
                for s2, c2, m2 in parts:
                    mono = tuple(sorted(m1 + m2))
                    if len(mono) > MAX_DEGREE:
                        return [(1.0, expr, ())]
                    combined.append((s1 * s2, c1 * c2, mono))
            out = combined
        return [self._coefficient(c, m, s) for s, c, m in out]

    @staticmethod
    def _coefficient(expr: sympy.Expr, mono: tuple[int, ...], scale: float = 1.0) -> Term:
        number, rest = expr.as_coeff_Mul()
        if number.is_Number and number.is_finite:
            return scale * float(number), rest, mono
        return scale, expr, mono


def decompose(exprs: Sequence[sympy.Expr | str], states: Sequence[str | sympy.Symbol]
              ) -> TermSum:
    """``exprs`` as a :class:`TermSum` over the symbols ``states`` (any expression is
    accepted: non-polynomial parts become coefficients that depend on the states)."""
    symbols = {(sympy.Symbol(s) if isinstance(s, str) else s): i for i, s in enumerate(states)}
    decomposer = _Decomposer(symbols)
    coefficient_at: dict[sympy.Expr, int] = {}
    monomial_at: dict[tuple[int, ...], int] = {}
    summed: dict[tuple[int, int, int], float] = {}
    for r, expr in enumerate(exprs):
        for scale, coefficient, mono in decomposer.terms(parse(expr)):
            c = coefficient_at.setdefault(coefficient, len(coefficient_at))
            m = monomial_at.setdefault(mono, len(monomial_at))
            summed[(r, c, m)] = summed.get((r, c, m), 0.0) + scale
    degree = max((len(m) for m in monomial_at), default=0)
    n = len(symbols)
    monomials = np.full((len(monomial_at), max(degree, 1)), n, dtype=np.int64)
    for mono, m in monomial_at.items():
        monomials[m, :len(mono)] = mono
    keys = sorted(k for k, s in summed.items() if s != 0.0)
    index = np.array(keys, dtype=np.int64).reshape(-1, 3)
    return TermSum(
        n_rows=len(exprs), n_states=n,
        coefficients=tuple(sorted(coefficient_at, key=coefficient_at.get)),
        monomials=monomials, rows=index[:, 0], coefs=index[:, 1], monos=index[:, 2],
        scales=np.array([summed[k] for k in keys], dtype=float),
    )


def compile_term_sum(exprs: Sequence[sympy.Expr | str], args: Sequence[Sequence[str]], *,
                     backend: str, name: str = "term_sum") -> Any:
    """``f(t, *arrays)`` computing ``exprs`` as :func:`compile_expressions` does (same
    arguments, same result shape, attributes ``args``, ``backend``, ``expressions`` and
    ``source``), evaluated as a :class:`TermSum` over the first group's symbols.  Every
    array argument has the same batch shape (``broadcast=False``)."""
    exprs = [parse(e) for e in exprs]
    table = decompose(exprs, args[0])
    coefficient = compile_expressions(list(table.coefficients) or [sympy.S.Zero], args,
                                      backend=backend, name=f"{name}_coefficients",
                                      broadcast=True)
    ops = term_sum_ops(backend)
    consts: dict[tuple, Any] = {}

    def constants(like):
        key = ops.key(like)
        found = consts.get(key)
        if found is None:
            found = (ops.index(table.monomials, like), ops.index(table.coefs, like),
                     ops.index(table.monos, like), ops.index(table.rows, like),
                     ops.values(table.scales, like))
            consts[key] = found
        return found

    def term_sum(t, *arrays):
        x = arrays[0]
        monomials, coefs, monos, rows, scales = constants(x)
        c = coefficient(t, *arrays)
        m = ops.monomials(x, monomials)
        values = scales * ops.take(c, coefs) * ops.take(m, monos)
        return ops.row_sums(values, rows, table.n_rows)

    term_sum.__name__ = name
    term_sum.args = coefficient.args
    term_sum.backend = backend
    term_sum.expressions = tuple(exprs)
    term_sum.table = table
    term_sum.source = (f"# {name}: {len(table.rows)} terms over {table.monomials.shape[0]} "
                       f"monomials and {len(table.coefficients)} coefficients\n"
                       + coefficient.source)
    return term_sum


def term_sum_ops(backend: str) -> Any:
    """The array operations of :func:`compile_term_sum` for ``backend``: numpy here, any
    other backend from its ``term_sum_ops()``."""
    if backend == "numpy":
        return NumpyTermSumOps()
    from petab_sciml.plugins import get_backend

    return get_backend(backend).term_sum_ops()


class NumpyTermSumOps:
    """Reference implementation of the operations a backend provides for term sums."""

    @staticmethod
    def key(like: Any) -> tuple:
        return ()

    @staticmethod
    def index(a: np.ndarray, like: Any) -> np.ndarray:
        return a

    @staticmethod
    def values(a: np.ndarray, like: Any) -> np.ndarray:
        return a

    @staticmethod
    def take(a: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take(a, index, axis=-1)

    @staticmethod
    def monomials(x: np.ndarray, columns: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        padded = np.concatenate([x, np.ones(x.shape[:-1] + (1,))], axis=-1)
        return np.prod(np.take(padded, columns, axis=-1), axis=-1)

    @staticmethod
    def row_sums(values: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
        out = np.zeros(values.shape[:-1] + (n_rows,))
        np.add.at(out, (Ellipsis, rows), values)
        return out

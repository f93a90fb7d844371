"""Polynomial formulas evaluated vectorized (:class:`PolynomialFormula`): the batched
right-hand sides of back-propagation through the steps use them where the model's
formulas are polynomials with numeric coefficients."""

from __future__ import annotations

import numpy as np
import torch


class PolynomialFormula:
    """Formulas that are polynomials with numeric coefficients in their arguments' symbols
    (mass action, linear maps, a network's inputs taken from the states), evaluated
    vectorized: the arguments concatenated (with a column of ones), the monomials
    gathered by index and multiplied, and one weighted sum with the coefficients.
    A handful of tensor operations (and autograd nodes) per call instead of a few per
    symbol and term, which is most of a small right-hand side's cost when autograd
    records every step.  ``f(t, *arrays)`` with every array ``(E, group size)``; the
    result is ``(E, n_exprs)``.  :meth:`build` returns None when an expression is not
    such a polynomial (or uses time)."""

    MAX_MONOMIALS = 512
    MAX_DEGREE = 4
    MAX_COEFFICIENTS = 4096
    """The weighted sum materializes ``(E, n_monomials, n_exprs)``: larger coefficient
    tables (big models) keep the generated code."""

    def __init__(self, sizes, selection, factors, coefficients, monomials=()):
        self.monomials = list(monomials)   # per monomial: its factors' columns
        self.sizes = sizes                 # columns per argument group
        self.selection = selection         # (group, columns) when a pure column pick
        self.factors = factors             # per degree slot: column of each monomial
        self.coefficients = coefficients   # (n_exprs, n_monomials) numpy
        self._tensors: dict[tuple, tuple] = {}

    @classmethod
    def build(cls, exprs, groups) -> PolynomialFormula | None:
        import sympy

        symbols = [sympy.Symbol(s) for g in groups for s in g]
        column = {s: i for i, s in enumerate(symbols)}
        if not exprs:
            return None
        monomials: dict[tuple[int, ...], int] = {}
        entries = []
        for r, expr in enumerate(exprs):
            expr = sympy.sympify(expr)
            free = sorted(expr.free_symbols, key=lambda s: column.get(s, -1))
            if any(s not in column for s in free):
                return None
            try:
                terms = (sympy.Poly(expr, *free).terms() if free
                         else [((), expr)])
            except Exception:   # noqa: BLE001 - sympy's polynomial errors: not a polynomial
                return None
            for powers, coeff in terms:
                if not coeff.is_number or not coeff.is_real:
                    return None
                mono = tuple(sorted(column[g] for g, p in zip(free, powers)
                                    for _ in range(int(p))))
                if len(mono) > cls.MAX_DEGREE:
                    return None
                m = monomials.setdefault(mono, len(monomials))
                entries.append((r, m, float(coeff)))
        if len(monomials) > cls.MAX_MONOMIALS:
            return None
        coefficients = np.zeros((len(exprs), len(monomials)))
        for r, m, c in entries:
            coefficients[r, m] += c
        sizes = [len(g) for g in groups]
        n_z = sum(sizes)
        selection = None
        order = sorted(monomials, key=monomials.get)
        if (len(order) == len(exprs) and all(len(m) == 1 for m in order)
                and np.array_equal(coefficients, np.eye(len(exprs)))):
            cols = [m[0] for m in order]
            starts = np.cumsum([0] + sizes)
            g = int(np.searchsorted(starts, cols[0], side="right") - 1)
            if all(starts[g] <= c < starts[g + 1] for c in cols):
                local = [c - int(starts[g]) for c in cols]
                selection = (g, None if local == list(range(sizes[g])) else local)
        degree = max((len(m) for m in order), default=0)
        factors = [np.array([m[d] if d < len(m) else n_z for m in order], np.int64)
                   for d in range(degree)]
        if selection is None and len(order) * len(exprs) > cls.MAX_COEFFICIENTS:
            return None
        return cls(sizes, selection, factors, coefficients, order)

    def bind(self, varying, arrays):
        """This formula with every argument group not in ``varying`` fixed at
        ``arrays[g]`` (``(E, size)``; a solve's constants): their factors are multiplied
        into per-row coefficients ``(E, n_exprs, n_varying_monomials)`` once, so a call
        only gathers the varying columns and takes one weighted sum (three operations
        when the formula is linear in them).  Same signature (the fixed groups'
        arguments are ignored); None where this does not apply (a pick, or a table too
        large)."""
        if self.selection is not None:
            return None
        starts = np.cumsum([0] + list(self.sizes))
        vary_cols = [c for g in sorted(varying) for c in range(starts[g], starts[g + 1])]
        fixed_groups = [g for g in range(len(self.sizes)) if g not in varying]
        fixed_cols = [c for g in fixed_groups for c in range(starts[g], starts[g + 1])]
        vpos = {c: i for i, c in enumerate(vary_cols)}
        fpos = {c: i for i, c in enumerate(fixed_cols)}
        parts = [(tuple(vpos[c] for c in mono if c in vpos),
                  tuple(fpos[c] for c in mono if c in fpos)) for mono in self.monomials]
        v_keys = sorted({v for v, _ in parts})
        f_keys = sorted({f for _, f in parts})
        n_out, n_v = self.coefficients.shape[0], len(v_keys)
        if n_out * n_v > self.MAX_COEFFICIENTS:
            return None
        v_at = {k: i for i, k in enumerate(v_keys)}
        f_at = {k: i for i, k in enumerate(f_keys)}
        flat, f_of, coef = [], [], []
        for m, (v, f) in enumerate(parts):
            for r in np.flatnonzero(self.coefficients[:, m]):
                flat.append(int(r) * n_v + v_at[v])
                f_of.append(f_at[f])
                coef.append(float(self.coefficients[r, m]))
        if not fixed_groups:
            return None
        a0 = arrays[fixed_groups[0]]
        dev, dt, E = a0.device, a0.dtype, a0.shape[0]
        ones = a0.new_ones((E, 1))

        def products(z, keys, n_cols):
            """Per key (a tuple of columns of ``z``; ``n_cols``: the ones column), the
            product of its columns."""
            degree = max((len(k) for k in keys), default=0)
            if degree == 0:
                return z[:, n_cols:].expand(E, len(keys))
            slots = [torch.as_tensor([k[d] if d < len(k) else n_cols for k in keys],
                                     device=dev) for d in range(degree)]
            out = z[:, slots[0]]
            for sl in slots[1:]:
                out = out * z[:, sl]
            return out

        zf = torch.cat([arrays[g] for g in fixed_groups] + [ones], 1)
        phi = products(zf, f_keys, len(fixed_cols))
        values = phi[:, torch.as_tensor(f_of, device=dev)] * torch.as_tensor(coef, dtype=dt,
                                                                              device=dev)
        table = a0.new_zeros((E, n_out * n_v)).index_add(
            1, torch.as_tensor(flat, device=dev), values).view(E, n_out, n_v)
        identity = v_keys == [(i,) for i in range(len(vary_cols))]
        order = sorted(varying)

        def bound(t, *args):
            zv = torch.cat([args[g] for g in order] + ([] if identity else [ones]), 1)
            mv = zv if identity else products(zv, v_keys, len(vary_cols))
            return (table * mv[:, None, :]).sum(-1)

        return bound

    def __call__(self, t, *arrays):
        if self.selection is not None:
            g, cols = self.selection
            a = arrays[g]
            return a if cols is None else a[:, cols]
        a0 = arrays[0]
        key = (a0.dtype, a0.device)
        found = self._tensors.get(key)
        if found is None:
            found = (tuple(torch.as_tensor(f, device=a0.device) for f in self.factors),
                     torch.as_tensor(self.coefficients.T, dtype=a0.dtype, device=a0.device))
            self._tensors[key] = found
        factors, coefficients = found
        z = torch.cat([*arrays, a0.new_ones((a0.shape[0], 1))], 1)
        m = z[:, factors[0]] if factors else z[:, -1:]
        for f in factors[1:]:
            m = m * z[:, f]
        # a product and a sum, not a matrix product: BLAS rounds a row differently
        # depending on how many rows there are, this does not
        return (m[:, :, None] * coefficients).sum(1)

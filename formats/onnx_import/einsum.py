"""Einsum of any equation, from permutes, reshapes, products, sums and ``matmul``.

Each operand first loses its repeated letters (a diagonal: a product with an identity
mask, then a sum) and the letters no other operand and not the output name (a sum).
Two operands then contract with one ``matmul`` (batch letters kept, the contracted ones
flattened into one axis); one or more than two operands as a broadcast product summed
over the contracted letters.  ``...`` stands for the same trailing axes in every operand
(broadcast where sizes are 1).  The operands' static shapes must be known.
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from .importer import _Importer
from .values import _C


def _parse(im: _Importer, node: Any, equation: str, shapes: list[tuple[int, ...]]
           ) -> tuple[list[str], str, dict[str, int]]:
    """Operand terms and output with ``...`` spelled out in fresh letters, and each
    letter's size (the largest over operands: ellipsis axes broadcast)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise im.error(node, f"equation {equation!r} names {len(terms)} operands; the node "
                       f"has {len(shapes)}")
    used = set(eq) - set(".,->")
    if not used <= set(string.ascii_letters):
        raise im.error(node, f"equation {equation!r}: subscripts must be letters")
    spare = [c for c in string.ascii_letters if c not in used]
    ellipsis_rank = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes, strict=True)
                         if "..." in t), default=0)
    dots = "".join(spare[:ellipsis_rank])
    expanded = []
    for term, shape in zip(terms, shapes, strict=True):
        if "..." in term:
            n = len(shape) - (len(term) - 3)
            term = term.replace("...", dots[ellipsis_rank - n:] if n else "")
        if len(term) != len(shape):
            raise im.error(node, f"equation {equation!r}: operand {term!r} has rank "
                           f"{len(shape)}")
        expanded.append(term)
    if arrow:
        out = rhs.replace("...", dots)
    else:  # implicit: the ellipsis, then the letters used once, in alphabetical order
        once = sorted(c for c in used if sum(t.count(c) for t in terms) == 1)
        out = dots + "".join(once)
    sizes: dict[str, int] = {}
    for term, shape in zip(expanded, shapes, strict=True):
        for c, n in zip(term, shape, strict=True):
            if c in sizes and n not in (1, sizes[c]) and sizes[c] != 1:
                raise im.error(node, f"equation {equation!r}: subscript {c!r} has sizes "
                               f"{sizes[c]} and {n}")
            sizes[c] = max(sizes.get(c, 1), n)
    if len(set(out)) != len(out) or not set(out) <= set("".join(expanded)):
        raise im.error(node, f"equation {equation!r}: the output names a subscript twice "
                       "or one no operand has")
    return expanded, out, sizes


def _diagonal(im: _Importer, node: Any, ref: str, term: str, shape: list[int]
              ) -> tuple[str, str, list[int]]:
    """``ref`` with each repeated letter of ``term`` reduced to its diagonal."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        p = term.index(c)
        q = term.index(c, p + 1)
        mask_shape = [1] * len(term)
        mask_shape[p] = mask_shape[q] = shape[p]
        eye = np.eye(shape[p]).reshape(mask_shape)
        ref = im.emit("mul", [ref, im.tensor(_C(eye, "einsum_diagonal"), node)])
        ref = im.emit("sum", [ref], {"dim": [q]})
        term, shape = term[:q] + term[q + 1:], shape[:q] + shape[q + 1:]
    return ref, term, shape


def _reduce_own(im: _Importer, ref: str, term: str, shape: list[int], keep: set[str]
                ) -> tuple[str, str, list[int]]:
    """``ref`` summed over the letters of ``term`` not in ``keep``."""
    drop = [i for i, c in enumerate(term) if c not in keep]
    if not drop:
        return ref, term, shape
    ref = im.emit("sum", [ref], {"dim": drop})
    return (ref, "".join(c for c in term if c in keep),
            [n for i, n in enumerate(shape) if i not in drop])


def _arrange(im: _Importer, ref: str, term: str, order: str) -> str:
    """``ref`` (letters ``term``) with its axes in ``order`` (a permutation of term)."""
    perm = [term.index(c) for c in order]
    return ref if perm == list(range(len(perm))) else im.emit("permute", [ref],
                                                               {"dims": perm})


def einsum(im: _Importer, node: Any, equation: str, operands: list[Any]) -> None:
    """Bind ``node``'s output to ``einsum(equation, *operands)``."""
    shapes = []
    for i, v in enumerate(operands):
        s = im.static_shape(v)
        if s is None:
            raise im.error(node, f"Einsum needs the static shape of operand {i} (ONNX shape "
                           "inference found none)")
        shapes.append(s)
    terms, out, sizes = _parse(im, node, equation, shapes)
    items = []
    for k, (v, term, shape) in enumerate(zip(operands, terms, shapes, strict=True)):
        ref, term, shp = _diagonal(im, node, im.tensor(v, node), term, list(shape))
        others = set(out).union(*(set(t) for j, t in enumerate(terms) if j != k))
        ref, term, shp = _reduce_own(im, ref, term, shp, others)
        items.append((ref, term, shp))
    out_shape = [sizes[c] for c in out]
    name = im.out_name(node)
    if len(items) == 2 and _matmul_ok(items):
        result = _contract_two(im, items, out, sizes)
    else:
        result = _broadcast_product(im, items, out)
    im.bind(node, 0, im.emit("reshape", [result], {"shape": out_shape}, name=name),
            out_shape)


def _matmul_ok(items: list) -> bool:
    (_, ta, sa), (_, tb, sb) = items
    size_a, size_b = dict(zip(ta, sa, strict=True)), dict(zip(tb, sb, strict=True))
    return all(size_a[c] == size_b[c] for c in set(ta) & set(tb))


def _contract_two(im: _Importer, items: list, out: str, sizes: dict[str, int]) -> str:
    """``A`` as (batch, a-only, contracted), ``B`` as (batch, contracted, b-only): one
    batched ``matmul``, then the output's axis order."""
    (ra, ta, _), (rb, tb, _) = items
    batch = "".join(c for c in out if c in ta and c in tb)
    summed = "".join(c for c in ta if c in tb and c not in out)
    a_only = "".join(c for c in ta if c not in tb)
    b_only = "".join(c for c in tb if c not in ta)
    bs = [sizes[c] for c in batch]
    a = _arrange(im, ra, ta, batch + a_only + summed)
    b = _arrange(im, rb, tb, batch + summed + b_only)
    m = math.prod(sizes[c] for c in a_only)
    k = math.prod(sizes[c] for c in summed)
    n = math.prod(sizes[c] for c in b_only)
    a = im.emit("reshape", [a], {"shape": bs + [m, k]})
    b = im.emit("reshape", [b], {"shape": bs + [k, n]})
    product = im.emit("matmul", [a, b])
    have = batch + a_only + b_only
    product = im.emit("reshape", [product], {"shape": [sizes[c] for c in have] or []})
    return _arrange(im, product, have, out)


def _broadcast_product(im: _Importer, items: list, out: str) -> str:
    """Every operand on the axes ``out + contracted`` (size 1 where it lacks a letter),
    multiplied, summed over the contracted axes."""
    contracted = "".join(dict.fromkeys(c for _, t, _ in items for c in t if c not in out))
    axes = out + contracted
    result = None
    for ref, term, shape in items:
        order = "".join(c for c in axes if c in term)
        ref = _arrange(im, ref, term, order)
        size = dict(zip(term, shape, strict=True))
        full = [size.get(c, 1) for c in axes]
        if len(full) != len(term):
            ref = im.emit("reshape", [ref], {"shape": full})
        result = ref if result is None else im.emit("mul", [result, ref])
    if contracted:
        result = im.emit("sum", [result], {"dim": list(range(len(out), len(axes)))})
    return result

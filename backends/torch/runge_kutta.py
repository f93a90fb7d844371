"""One explicit Runge-Kutta step of a :class:`~petab_sciml.backends.torch.tableau.Tableau`:
its stages combined term by term (:func:`rk_step`, the stages unrolled) or in a
``while_loop`` over padded coefficients (:func:`rk_step_looped`, the right-hand side
traced once by ``torch.compile``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from petab_sciml.backends.torch.tableau import Tableau

Field = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""``field(t, y, args) -> dy/dt`` (``y`` a vector, or rows of one in batched solves)."""


def combine(h, ks, weights):
    """``h * sum_j weights[j] k_j`` over the nonzero weights, term by term."""
    out = None
    for w, k in zip(weights, ks):
        if w != 0.0:
            term = k * w
            out = term if out is None else out + term
    return h * out if out is not None else torch.zeros_like(ks[0])


def rk_step(field: Field, tab: Tableau, t, y, f0, h, args):
    """One step: ``(y1, f1, error estimate)``; ``f0 = field(t, y)``."""
    ks = [f0]
    for i, (ci, ai) in enumerate(zip(tab.c, tab.a)):
        yi = y + combine(h, ks, ai)
        ks.append(field(t + ci * h, yi, args))
        if i == len(tab.a) - 1:
            y1 = yi   # first same as last: the last stage's point is the solution
    return y1, ks[-1], combine(h, ks, tab.e)


def coefficients(tab: Tableau, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(a, c, b, e)`` of :func:`rk_step_looped` as tensors: ``a`` padded to
    ``(stages, stages)``, ``c`` with the first stage's 0."""
    n_stages = len(tab.a) + 1
    a = torch.zeros((n_stages, n_stages), dtype=like.dtype, device=like.device)
    for i, row in enumerate(tab.a):
        a[i + 1, : len(row)] = torch.tensor(row, dtype=like.dtype)
    as_t = lambda v: torch.tensor(v, dtype=like.dtype, device=like.device)  # noqa: E731
    return a, as_t((0.0, *tab.c)), as_t(tab.b[:n_stages]), as_t(tab.e[:n_stages])


def rk_step_looped(field: Field, coeffs: tuple[torch.Tensor, ...], t, y, f0, h, args):
    """:func:`rk_step` with the stages in a ``while_loop`` over the padded coefficients
    (:func:`coefficients`): the right-hand side appears once in the traced graph instead
    of once per stage, which keeps ``torch.compile``'s work (and time) small."""
    from torch._higher_order_ops.while_loop import while_loop

    a, c, b, e = coeffs
    n_stages = a.shape[0]
    ks0 = torch.zeros((n_stages, y.shape[0]), dtype=y.dtype, device=y.device)
    ks0 = torch.cat([f0.reshape(1, -1), ks0[1:]])
    one = torch.ones((), dtype=torch.int64, device=y.device)

    def cond(i, ks):
        return i < n_stages

    def body(i, ks):
        row = a.index_select(0, i.reshape(1))[0]
        yi = y + h * weighted_sum(row, ks)
        ti = t + c.index_select(0, i.reshape(1))[0] * h
        f = field(ti, yi, args)
        return i + 1, ks.index_put((i.reshape(1),), f.reshape(1, -1))

    _, ks = while_loop(cond, body, (one, ks0))
    return y + h * weighted_sum(b, ks), ks[n_stages - 1], h * weighted_sum(e, ks)


def weighted_sum(weights: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:
    """``sum_i weights[i] * ks[i]`` (stages on the first axis of ``ks``) as a broadcast
    product and sum: inductor fuses it with the code around it (a matmul is a separate
    library call, and an allocation, per stage), and unlike a BLAS product its rounding
    of a row does not depend on how many rows a batch has."""
    return (weights.reshape((-1,) + (1,) * (ks.dim() - 1)) * ks).sum(0)

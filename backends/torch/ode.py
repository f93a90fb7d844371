"""Adaptive explicit Runge-Kutta solves in PyTorch as one loop that ``torch.compile`` can
turn into native code.

Why not only torchdiffeq: its solver loop is Python, a few dozen small tensor operations
per stage, so a small hybrid model pays Python overhead thousands of times per solve
(0.1-0.6 s per objective on the suite's cases).  Here the whole solve, step-size control
and outputs included, is a single ``torch._higher_order_ops.while_loop`` whose body is
pure tensor code: eager, it runs as a Python loop; compiled (``torch.compile`` with
inductor, ``fullgraph=True``), the loop and the right-hand side (networks included)
become one native function and a solve costs milliseconds.  The Butcher tableaus are
torchdiffeq's (``dopri5``, ``dopri8``); the controller is torchdiffeq's (an RMS error
ratio over every component against ``atol + rtol * max(|y0|, |y1|)``, step factor
``0.9 * ratio^(-1/order)`` clipped to ``[0.2, 10]``, never shrinking after an accepted
step), with Hairer's initial step.

Outputs are taken where steps end: a step is shortened to land exactly on the next output
time, so nothing is interpolated.  A solve fails (``ok`` false, outputs NaN) on more than
``max_steps`` steps, a collapsed step size or a non-finite state; it never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

SAFETY, IFACTOR, DFACTOR = 0.9, 10.0, 0.2


@dataclass(frozen=True)
class Tableau:
    """An explicit Runge-Kutta method with an embedded error estimate.

    Stage ``i`` (``i >= 1``) is evaluated at ``t + c[i - 1] * h`` and
    ``y + h * sum_j a[i - 1][j] k_j``; ``b`` are the solution weights, ``e`` the error
    weights (both over every stage).  The last stage lands on the new solution (first
    same as last), so an accepted step's last stage is the next step's first.
    """

    name: str
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    e: tuple[float, ...]
    order: int


def tableau(name: str) -> Tableau:
    """``dopri5`` or ``dopri8``, from torchdiffeq."""
    from torchdiffeq._impl.dopri5 import _DORMAND_PRINCE_SHAMPINE_TABLEAU
    from torchdiffeq._impl.dopri8 import _DOPRI8_TABLEAU

    table = {"dopri5": (_DORMAND_PRINCE_SHAMPINE_TABLEAU, 5), "dopri8": (_DOPRI8_TABLEAU, 8)}
    if name not in table:
        raise ValueError(f"unknown method {name!r}; compiled solves know "
                         f"{', '.join(table)}")
    t, order = table[name]
    tab = Tableau(name, tuple(t.alpha.tolist()), tuple(tuple(b.tolist()) for b in t.beta),
                  tuple(t.c_sol.tolist()), tuple(t.c_error.tolist()), order)
    if list(tab.a[-1]) != list(tab.b[: len(tab.a[-1])]) or tab.c[-1] != 1.0:
        raise ValueError(f"{name}: the last stage is not the solution (not FSAL)")
    return tab


Field = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""``field(t, y, args) -> dy/dt`` (``y`` a vector)."""


def _rms(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(torch.mean(x * x))


def _combine(h, ks, weights):
    """``h * sum_j weights[j] k_j`` over the nonzero weights."""
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
        yi = y + _combine(h, ks, ai)
        ks.append(field(t + ci * h, yi, args))
        if i == len(tab.a) - 1:
            y1 = yi   # first same as last: the last stage's point is the solution
    return y1, ks[-1], _combine(h, ks, tab.e)


def initial_step(field: Field, tab: Tableau, t0, y0, f0, rtol: float, atol: float, args):
    """Hairer, Norsett & Wanner's starting step (as torchdiffeq and SciPy)."""
    scale = atol + rtol * y0.abs()
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = torch.where((d0 < 1e-5) | (d1 < 1e-5), torch.full_like(d0, 1e-6),
                     0.01 * d0 / torch.clamp(d1, min=1e-300))
    f1 = field(t0 + h0, y0 + h0 * f0, args)
    d2 = _rms((f1 - f0) / scale) / h0
    big = torch.maximum(d1, d2)
    h1 = torch.where(big <= 1e-15, torch.maximum(torch.full_like(h0, 1e-6), h0 * 1e-3),
                     (0.01 / torch.clamp(big, min=1e-300)) ** (1.0 / (tab.order + 1)))
    return torch.minimum(100 * h0, h1)


@dataclass(frozen=True)
class SolveOptions:
    method: str = "dopri8"
    rtol: float = 1e-8
    atol: float = 1e-8
    max_steps: int = 100_000


def make_solve(field: Field, options: SolveOptions, *, loop: str = "python"
               ) -> Callable[..., Any]:
    """``solve(y0, t0, t1, ts, args) -> (ys, y1, ok, n_steps)``: ``y`` at the sorted output
    times ``ts`` (``t0 <= ts <= t1``, at least one), at ``t1``, whether the solve
    succeeded, and the number of steps taken.  ``t0``, ``t1`` are 0-d tensors.

    ``loop="python"`` runs the steps in a Python loop (eager); ``loop="while_loop"`` as one
    ``while_loop`` for :func:`compiled` (the same step code)."""

    tab = tableau(options.method)
    rtol, atol, max_steps = float(options.rtol), float(options.atol), int(options.max_steps)
    inv_order = 1.0 / tab.order

    def solve(y0, t0, t1, ts, args):
        n_out = ts.shape[0]
        f0 = field(t0, y0, args)
        h0 = initial_step(field, tab, t0, y0, f0, rtol, atol, args)
        ys0 = torch.full((n_out, y0.shape[0]), float("nan"), dtype=y0.dtype,
                         device=y0.device)
        zero = torch.zeros((), dtype=torch.int64, device=y0.device)
        good0 = torch.isfinite(h0) & torch.all(torch.isfinite(f0))

        def cond(t, h, y, f, ys, k, n, good):
            return ((t < t1) | (k < n_out)) & (n < max_steps) & good

        def body(t, h, y, f, ys, k, n, good):
            has_out = k < n_out
            kc = torch.clamp(k, max=n_out - 1)
            target = torch.where(has_out, ts.index_select(0, kc.reshape(1))[0], t1)
            gap = target - t
            clipped = gap <= h
            h_try = torch.where(clipped, gap, h)
            y1, f1, err = rk_step(field, tab, t, y, f, h_try, args)
            ratio = _rms(err / (atol + rtol * torch.maximum(y.abs(), y1.abs())))
            accept = (ratio <= 1.0) & torch.all(torch.isfinite(y1))
            hit = accept & clipped & has_out
            t_new = torch.where(accept, torch.where(clipped, target, t + h_try), t)
            y_new = torch.where(accept, y1, y)
            f_new = torch.where(accept, f1, f)
            row = torch.where(hit, y1, ys.index_select(0, kc.reshape(1))[0])
            ys_new = ys.index_put((kc.reshape(1),), row.reshape(1, -1))
            # the next step: torchdiffeq's factor; a step shortened to land on an output
            # keeps the proposal it was shortened from
            factor = torch.where(
                ratio == 0, torch.full_like(ratio, IFACTOR),
                torch.clamp(SAFETY * torch.clamp(ratio, min=1e-300) ** (-inv_order),
                            max=IFACTOR))
            factor = torch.where(accept, torch.clamp(factor, min=1.0),
                                 torch.clamp(factor, min=DFACTOR))
            factor = torch.where(torch.isfinite(ratio), factor, torch.full_like(ratio, DFACTOR))
            h_new = torch.where(accept & clipped, torch.maximum(h, h_try * factor),
                                h_try * factor)
            h_ok = torch.isfinite(h_new) & (h_new > 1e-14 * torch.clamp(t_new.abs(), min=1.0))
            good_new = good & (h_ok | (h_try == 0))
            h_new = torch.where(h_ok, h_new, h)
            return (t_new, h_new, y_new, f_new, ys_new, k + hit.to(k.dtype),
                    n + (h_try > 0).to(n.dtype), good_new)

        state = (t0.clone(), h0, y0.clone(), f0, ys0, zero.clone(), zero.clone(), good0)
        if loop == "while_loop":
            from torch._higher_order_ops.while_loop import while_loop

            state = while_loop(cond, body, state)
        else:
            while bool(cond(*state)):
                state = body(*state)
        t, _, y, _, ys, k, n, good = state
        ok = good & (t >= t1) & (k >= n_out)
        return ys, y, ok, n

    return solve


def compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` compiled whole by ``torch.compile`` (inductor, C++ wrapper, no graph breaks).

    The first call per input signature traces and compiles (seconds to tens of seconds);
    later calls run native code."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp_wrapper = True
    # one compiled solve per problem and signature: many problems in one process
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    return torch.compile(fn, fullgraph=True, dynamic=False)


def solver(field: Field, options: SolveOptions, *, compile: bool) -> Callable[..., Any]:
    """:func:`make_solve`, compiled or eager."""
    if compile:
        return compiled(make_solve(field, options, loop="while_loop"))
    return make_solve(field, options)

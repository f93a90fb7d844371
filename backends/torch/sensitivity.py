"""Forward sensitivities as a ``torch.autograd.Function`` (:class:`ForwardSensitivity`):
the states ``x`` and ``S = dx/d(x0, p)`` integrated together, the backward pass
contracting the cotangents with ``S``.  One experiment (vectors) or a batch (rows)."""

from __future__ import annotations

import torch


class _One:
    """One experiment: ``x0`` ``(n_x,)``, ``p`` ``(n_p,)``; ``y = [x, S.ravel()]``."""

    kind = "aug"

    @staticmethod
    def initial(x0, n_x, n):
        s0 = torch.eye(n_x, n, dtype=x0.dtype, device=x0.device)
        return torch.cat([x0, s0.reshape(-1)])

    @staticmethod
    def steps(steps) -> int:
        return int(steps)

    @staticmethod
    def split(ys, y1, ok, n_x, n):
        """``(x at ts, x1, S at ts, S1)``; ``S`` zero when the solve failed."""
        xs, x1 = ys[:, :n_x], y1[:n_x]
        s_ts = ys[:, n_x:].reshape(ys.shape[0], n_x, n)
        s1 = y1[n_x:].reshape(n_x, n)
        if not bool(ok):
            s_ts, s1 = torch.zeros_like(s_ts), torch.zeros_like(s1)
        return xs, x1, s_ts, s1

    @staticmethod
    def contract(ct_xs, ct_x1, s_ts, s1):
        return torch.einsum("ti,tij->j", ct_xs, s_ts) + ct_x1 @ s1


class _Rows:
    """A batch: ``x0`` ``(E, n_x)``, ``p`` ``(E, n_p)``; each row ``[x, S.ravel()]``."""

    kind = "aug_batched"

    @staticmethod
    def initial(x0, n_x, n):
        s0 = torch.eye(n_x, n, dtype=x0.dtype, device=x0.device).reshape(1, -1)
        return torch.cat([x0, s0.expand(x0.shape[0], -1)], 1)

    @staticmethod
    def steps(steps) -> int:
        return int(steps.sum())

    @staticmethod
    def split(ys, y1, ok, n_x, n):
        """``(x at ts, x1, S at ts, S1)``; ``S`` zero in the rows whose solve failed."""
        E = ys.shape[0]
        xs, x1 = ys[:, :, :n_x], y1[:, :n_x]
        s_ts = ys[:, :, n_x:].reshape(E, -1, n_x, n)
        s1 = y1[:, n_x:].reshape(E, n_x, n)
        s_ts = torch.where(ok[:, None, None, None], s_ts, torch.zeros_like(s_ts))
        s1 = torch.where(ok[:, None, None], s1, torch.zeros_like(s1))
        return xs, x1, s_ts, s1

    @staticmethod
    def contract(ct_xs, ct_x1, s_ts, s1):
        return torch.einsum("eti,etij->ej", ct_xs, s_ts) + torch.einsum("ei,eij->ej",
                                                                        ct_x1, s1)


class ForwardSensitivity(torch.autograd.Function):
    """``apply(x0, p, solvers, arrays, t0, t1, ts) -> (x at ts, x at t1, ok)``: the
    forward-sensitivity system solved by ``solvers``
    (:class:`~petab_sciml.backends.torch.solvers.Solvers`, which counts the steps) with
    ``args = (p, arrays)``; rows of ``x0`` and ``p`` are a batch of experiments.  A
    failed solve gives NaN states and a zero ``S`` (per experiment in a batch)."""

    @staticmethod
    def forward(ctx, x0, p, solvers, arrays, t0, t1, ts):
        layout = _Rows if x0.dim() == 2 else _One
        n_x = x0.shape[-1]
        n = n_x + p.shape[-1]
        y0 = layout.initial(x0.detach(), n_x, n)
        solve = solvers.get(layout.kind, x0.dtype)
        ys, y1, ok, steps = solve(y0, t0, t1, ts, (p.detach(), arrays))
        solvers.n_steps += layout.steps(steps)
        xs, x1, s_ts, s1 = layout.split(ys, y1, ok, n_x, n)
        ctx.save_for_backward(s_ts, s1)
        ctx.n_x = n_x
        ctx.layout = layout
        ctx.mark_non_differentiable(ok)
        return xs, x1, ok

    @staticmethod
    def backward(ctx, ct_xs, ct_x1, _):
        s_ts, s1 = ctx.saved_tensors
        g = ctx.layout.contract(ct_xs, ct_x1, s_ts, s1)
        n_x = ctx.n_x
        return g[..., :n_x], g[..., n_x:], None, None, None, None, None

"""An implicit solver for stiff models in PyTorch: Kvaerno's 5(4) ESDIRK method (the
tableau of diffrax's ``Kvaerno5``, the JAX backend's implicit solver), eager, with
gradients by back-propagation through the steps.

Each step solves its six implicit stages ``z_i = Y_i + h gamma f(t_i, z_i)`` (``Y_i``
the explicit part) by a chord Newton iteration with ``M = I - h gamma J``, ``J`` the
Jacobian at the step's start, factorised once per step.  The iteration runs without
gradient; two more chord iterations run with it, from the converged stage (detached):
their derivative is the implicit function theorem's ``dz = M_z^{-1} (dY + h gamma
df/dp dp)`` up to ``|I - M^{-1} M_z|^2`` (``M_z`` the exact matrix at the stage), the
error of JAX's chord iteration, rather than the derivative of however many iterations
the values needed.  Stage derivatives are ``k_i = (z_i - Y_i) / (h gamma)`` (no
right-hand-side call, which would amplify the iteration's error by the stiffness).

Steps are shortened to land on the output times (nothing is interpolated); a step whose
iteration does not converge in :data:`NEWTON_ITERATIONS` is rejected and retried at a
quarter of its size.  A solve fails (``ok`` false, outputs NaN) on more than
``max_steps`` steps, a collapsed step size or a non-finite state; it never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from petab_sciml.backends.torch.step_size import StepSizeController, rms

GAMMA = 0.26
A = (
    (),
    (0.26,),
    (0.13, 0.84033320996790809),
    (0.22371961478320505, 0.47675532319799699, -0.06470895363112615),
    (0.16648564323248321, 0.10450018841591720, 0.03631482272098715, -0.13090704451073998),
    (0.13855640231268224, 0.0, -0.04245337201752043, 0.02446657898003141,
     0.61943039072480676),
    (0.13659751177640291, 0.0, -0.05496908796538376, -0.04118626728321046,
     0.62993304899016403, 0.06962479448202728),
)
"""Explicit parts of stages 1-7 (stage 0 is explicit: ``k_0 = f(t, y)``)."""
C = (0.0, 0.52, 1.230333209967908, 0.8957659843500759, 0.43639360985864756, 1.0, 1.0)
B_ERROR = tuple(a7 - a6 for a7, a6 in zip(A[6], (*A[5], GAMMA), strict=True)) + (GAMMA,)
"""Error weights over the seven stages (the solution is the last stage: stiffly
accurate)."""
NEWTON_ITERATIONS = 10
NEWTON_TOLERANCE = 1e-3
"""The iteration has converged when its update, in the step controller's weighted RMS
norm, is below this."""
ORDER = 5


class _Method:
    name = "kvaerno5"
    order = ORDER


Field = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]


def autograd_jacobian(field: Field, t, y, args) -> torch.Tensor:
    """``d field / d y`` at ``(t, y)``, without gradient: one backward pass per state."""
    with torch.enable_grad():
        y_ = y.detach().requires_grad_(True)
        f = field(t.detach(), y_, args)
        rows = [torch.autograd.grad(f[i], y_, retain_graph=i + 1 < f.shape[0],
                                    allow_unused=True)[0] for i in range(f.shape[0])]
    return torch.stack([r if r is not None else torch.zeros_like(y) for r in rows])


def _any_requires_grad(args: Any) -> bool:
    return any(isinstance(a, torch.Tensor) and a.requires_grad
               for a in torch.utils._pytree.tree_leaves(args))


def make_implicit_solve(field: Field, rtol: float, atol: float, max_steps: int, *,
                        jacobian: Callable[..., torch.Tensor] | None = None
                        ) -> Callable[..., Any]:
    """``solve(y0, t0, t1, ts, args) -> (ys, y1, ok, n_steps)`` as
    :func:`petab_sciml.backends.torch.ode.make_solve` (eager); ``jacobian(t, y, args)``:
    ``d field / d y`` without gradient (default: one backward pass per state)."""
    return ImplicitSolve(field, rtol, atol, max_steps, jacobian=jacobian)


class ImplicitSolve:
    """The Kvaerno5 solve of one ``field``: calling it solves (see
    :func:`make_implicit_solve`)."""

    def __init__(self, field: Field, rtol: float, atol: float, max_steps: int, *,
                 jacobian: Callable[..., torch.Tensor] | None = None) -> None:
        self.field, self.rtol, self.atol, self.max_steps = field, rtol, atol, max_steps
        self.control = StepSizeController(_Method(), rtol, atol)
        self.jac = jacobian or (lambda t, y, args: autograd_jacobian(field, t, y, args))

    def scale(self, y: torch.Tensor) -> torch.Tensor:
        return self.atol + self.rtol * y.detach().abs()

    def stage(self, t_i, explicit, h, lu, args) -> tuple[torch.Tensor, bool]:
        """The stage ``z = explicit + h gamma f(t_i, z)``: ``(z, converged)``."""
        field = self.field
        hg = h * GAMMA
        with torch.no_grad():
            z = explicit.detach() + hg.detach() * field(t_i, explicit.detach(), args)
            w = self.scale(explicit)
            converged = False
            for _ in range(NEWTON_ITERATIONS):
                residual = z - explicit.detach() - hg.detach() * field(t_i, z, args)
                delta = torch.linalg.lu_solve(*lu, residual[:, None])[:, 0]
                z = z - delta
                if not bool(torch.all(torch.isfinite(z))):
                    break
                if float(rms(delta / w)) < NEWTON_TOLERANCE:
                    converged = True
                    break
        if not (torch.is_grad_enabled() and (explicit.requires_grad or h.requires_grad
                                             or _any_requires_grad(args))):
            return z, converged
        # with gradient: one Newton step from the converged stage (detached) with the
        # exact matrix there, whose derivative is the implicit function theorem's
        n = z.shape[0]
        exact = torch.linalg.lu_factor(torch.eye(n, dtype=z.dtype, device=z.device)
                                       - hg.detach() * self.jac(t_i, z, args))
        residual = z - explicit - hg * field(t_i, z, args)
        z = z - torch.linalg.lu_solve(*exact, residual[:, None])[:, 0]
        return z, converged

    def step(self, t, y, f0, h, args) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
        """One step: ``(y1, error, converged)``."""
        n = y.shape[0]
        lu = torch.linalg.lu_factor(torch.eye(n, dtype=y.dtype, device=y.device)
                                    - (h * GAMMA).detach() * self.jac(t, y, args))
        ks = [f0]
        z = y
        for i in range(1, 7):
            explicit = y + h * sum(a * k for a, k in zip(A[i], ks, strict=True))
            z, converged = self.stage(t + C[i] * h, explicit, h, lu, args)
            if not converged:
                return z, None, False
            ks.append((z - explicit) / (h * GAMMA))
        error = h * sum(b * k for b, k in zip(B_ERROR, ks, strict=True))
        return z, error, True

    def __call__(self, y0, t0, t1, ts, args) -> tuple[torch.Tensor, ...]:
        field, control = self.field, self.control
        n_out = ts.shape[0]
        ok_true = torch.ones((), dtype=torch.bool, device=y0.device)
        if y0.shape[0] == 0:
            return (y0.new_zeros((n_out, 0)), y0, ok_true,
                    torch.zeros((), dtype=torch.int64, device=y0.device))
        f = field(t0, y0, args)
        h = control.initial_step(field, t0, y0.detach(), f.detach(), args).detach()
        t, y, outputs, k, n = t0.detach().clone(), y0, [], 0, 0
        good = bool(torch.isfinite(h)) and bool(torch.all(torch.isfinite(f)))
        while good and (bool(t < t1) or k < n_out) and n < self.max_steps:
            target = ts[k].detach() if k < n_out else t1.detach()
            gap = target - t
            clipped = bool(gap <= h)
            h_try = gap if clipped else h
            n += 1
            if float(h_try) == 0.0:
                outputs.append(y)
                k += 1
                continue
            y1, error, converged = self.step(t, y, f, h_try, args)
            if not converged:
                h = h_try * 0.25
                good = float(h) > 1e-14 * max(abs(float(t)), 1.0)
                continue
            ratio = control.error_ratio(error.detach(), y.detach(), y1.detach())
            accept = bool(ratio <= 1.0) and bool(torch.all(torch.isfinite(y1)))
            if accept:
                t = target if clipped else t + h_try
                y = y1
                f = field(t, y, args)
                if clipped and k < n_out:
                    outputs.append(y)
                    k += 1
            h_new, h_ok = control.next_step(ratio, torch.tensor(accept),
                                            torch.tensor(clipped), h, h_try, t)
            good = bool(h_ok)
            h = h_new.detach()
        ok = good and bool(t >= t1) and k >= n_out
        nan = y0 * float("nan")
        if not ok:
            return (nan.expand(n_out, -1), nan, torch.zeros((), dtype=torch.bool,
                                                            device=y0.device),
                    torch.tensor(n))
        ys = torch.stack(outputs) if outputs else y0.new_zeros((0, y0.shape[0]))
        return ys, y, ok_true, torch.tensor(n)

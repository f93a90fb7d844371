"""Butcher tableaus of the PyTorch solves (torchdiffeq's ``dopri5`` and ``dopri8``) and
the dense output that interpolates inside a step."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
    dense: tuple[tuple[float, ...], ...] | None = None
    """Dense output (``None``: none): per stage, the coefficients (highest power first)
    of a polynomial ``P_i``; ``y(t + theta h) = y + h theta sum_i P_i(theta) k_i``."""


DENSE_OUTPUT = {
    # Bogacki & Shampine's interpolant for Prince & Dormand's 8(7) pair (the same
    # tableau as torchdiffeq's and diffrax's dopri8), as diffrax's Dopri8 uses it (the
    # JAX backend's outputs): P_i for the 14 stages (the 14th the end point's
    # derivative, first same as last), each a degree-5 polynomial in theta.  A
    # 5th-order interpolant (local error O(h^6), tests/backends/torch/test_batched_experiments.py):
    # outputs inside steps carry more error than the steps' ends
    "dopri8": (
        (-6.3448349392860401388, 22.1396504998094068976, -30.0610568289666450593,
         19.9990069333683970610, -6.6910181737837595697, 1.0),
        (0.0,) * 6, (0.0,) * 6, (0.0,) * 6, (0.0,) * 6,
        (-39.6107919852202505218, 116.4422149550342161651, -121.4999627731334642623,
         52.2273532792945524050, -7.6142658045872677172, 0.0),
        (20.3761213808791436958, -67.1451318825957197185, 83.1721004639847717481,
         -46.8919164181093621583, 10.7281392630428866124, 0.0),
        (7.3347098826795362023, -16.5672243527496524646, 9.5724507555993664382,
         -0.1890893225010595467, 0.5526637063753648783, 0.0),
        (32.8801774352459155182, -89.9916014847245016028, 87.8406057677205645007,
         -35.7075975946222072821, 4.2186562625665153803, 0.0),
        (-10.1588990526426760954, 22.6237489648532849093, -17.4152107770762969005,
         6.2736448083240352160, -0.6627209125361597559, 0.0),
        (-12.5401268098782561200, 32.2362340167355370113, -28.5903289514790976966,
         10.3160881272450748458, -1.2636789001135462218, 0.0),
        (29.5553001484516038033, -82.1020315488359848644, 81.6630950584341412934,
         -34.7650769866611817349, 5.4106037898590422230, 0.0),
        (-41.7923486424390588923, 116.2662185791119533462, -114.9375291377009418170,
         47.7457971078225540396, -7.0321379067945741781, 0.0),
        (20.3006925822100825485, -53.9020777466385396792, 50.2558364226176017553,
         -19.0082099341608028453, 2.3537586759714983486, 0.0),
    ),
}
"""Dense-output polynomials (:attr:`Tableau.dense`) of the methods that have one."""


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
                  tuple(t.c_sol.tolist()), tuple(t.c_error.tolist()), order,
                  DENSE_OUTPUT.get(name))
    if list(tab.a[-1]) != list(tab.b[: len(tab.a[-1])]) or tab.c[-1] != 1.0:
        raise ValueError(f"{name}: the last stage is not the solution (not FSAL)")
    return tab


def dense_output_at(dense: torch.Tensor, y: torch.Tensor, stages: torch.Tensor,
                    theta: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``y(t + theta h)`` inside steps from ``t`` of length ``h``: rows ``y`` ``(m, n)``
    (the steps' starts), their stages ``(S, m, n)``, ``theta`` and ``h`` ``(m,)``;
    ``dense`` the method's :attr:`Tableau.dense` as an ``(S, degree + 1)`` tensor.
    Each row's sum runs over its stages alone, in the same order in any batch."""
    with torch.no_grad():
        p = dense[:, 0:1].expand(-1, theta.shape[0])
        for i in range(1, dense.shape[1]):
            p = p * theta + dense[:, i: i + 1]
        weights = p * theta   # (S, m)
    return y + h[:, None] * (weights[:, :, None] * stages).sum(0)

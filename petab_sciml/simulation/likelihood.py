"""PEtab noise models and priors, written once for any array namespace.

``ops`` is the array module of the executor (``jax.numpy`` or ``torch``); only
functions both share are used (``log``, ``abs``, ``where``, ``sum``, ``square``).

Log-likelihood of a measurement ``m`` with simulation ``y`` and noise parameter
``sigma`` (PEtab):

* ``normal``:  ``-0.5 log(2 pi sigma^2) - 0.5 ((h(m) - h(y)) / sigma)^2``
* ``laplace``: ``-log(2 sigma) - |h(m) - h(y)| / sigma``

with ``h`` the observable transformation (``lin``: identity; ``log``/``log10``: the
logarithm, plus the Jacobian term ``-log(m)`` or ``-log(m ln 10)``).
"""

from __future__ import annotations

import math
from typing import Any

from petab_sciml.problem.resolve import Prior

LOG_2PI = math.log(2.0 * math.pi)
LN10 = math.log(10.0)


def log_likelihood(ops: Any, measured: Any, simulated: Any, sigma: Any, transform: int,
                   distribution: int) -> Any:
    """Per-measurement log-likelihood for one (transformation, distribution) pair.

    ``transform``: 0 lin, 1 log, 2 log10; ``distribution``: 0 normal, 1 laplace.
    """
    if transform == 0:
        r = measured - simulated
        jac = 0.0
    elif transform == 1:
        r = ops.log(measured) - ops.log(simulated)
        jac = -ops.log(measured)
    else:
        r = (ops.log(measured) - ops.log(simulated)) / LN10
        jac = -ops.log(measured * LN10)
    if distribution == 0:
        return -0.5 * LOG_2PI - ops.log(sigma) - 0.5 * (r / sigma) ** 2 + jac
    return -math.log(2.0) - ops.log(sigma) - ops.abs(r) / sigma + jac


# --------------------------------------------------------------------------- priors
def _canonical(name: str) -> str:
    name = name.lower().replace("-", "").replace("_", "")
    if name.startswith("parameterscale"):
        # the scale transform is applied by log_prior_at (``parameterScale`` of the row)
        name = name[len("parameterscale"):]
    return name


def on_parameter_scale(prior: Prior) -> bool:
    """Whether ``prior`` (PEtab v1 ``parameterScale*``) applies to the parameter on its
    ``parameterScale`` rather than to its linear value."""
    return prior.distribution.lower().replace("-", "").replace("_", "").startswith(
        "parameterscale")


def log_prior_at(ops: Any, x: Any, prior: Prior, scale: str = "lin") -> Any:
    """Elementwise log-prior of the linear values ``x``: ``parameterScale*`` priors are
    evaluated at ``x`` on ``scale`` (``log``: natural, ``log10``), the others at ``x``."""
    if scale == "log":
        x = ops.log(x)
    elif scale == "log10":
        x = ops.log(x) / LN10
    return log_prior(ops, x, prior)


def log_prior(ops: Any, x: Any, prior: Prior) -> Any:
    """Elementwise log-density of ``prior`` at ``x`` (without truncation to bounds;
    :func:`truncation_log_mass` gives that constant)."""
    name = _canonical(prior.distribution)
    a = prior.parameters[0]
    b = prior.parameters[1] if len(prior.parameters) > 1 else None
    inf = math.inf
    if name == "uniform":
        inside = (x >= a) & (x <= b)
        return ops.where(inside, 0.0 * x - math.log(b - a), 0.0 * x - inf)
    if name == "normal":
        return -0.5 * LOG_2PI - math.log(b) - 0.5 * ((x - a) / b) ** 2
    if name == "laplace":
        return -math.log(2.0 * b) - ops.abs(x - a) / b
    if name == "lognormal":
        lx = ops.log(x)
        return -lx - 0.5 * LOG_2PI - math.log(b) - 0.5 * ((lx - a) / b) ** 2
    if name == "loglaplace":
        lx = ops.log(x)
        return -lx - math.log(2.0 * b) - ops.abs(lx - a) / b
    if name == "loguniform":
        inside = (x >= a) & (x <= b)
        return ops.where(inside, -ops.log(x) - math.log(math.log(b / a)), 0.0 * x - inf)
    if name == "cauchy":
        return -math.log(math.pi * b) - ops.log(1.0 + ((x - a) / b) ** 2)
    if name == "chisquare":
        k = a
        return (k / 2 - 1) * ops.log(x) - x / 2 - (k / 2) * math.log(2) - math.lgamma(k / 2)
    if name == "exponential":
        # PEtab: exponential(scale)
        return -math.log(a) - x / a
    if name == "gamma":
        return (a - 1) * ops.log(x) - x / b - a * math.log(b) - math.lgamma(a)
    if name == "rayleigh":
        return ops.log(x) - 2 * math.log(a) - x ** 2 / (2 * a ** 2)
    raise ValueError(f"unknown prior {prior.distribution!r}")


def _cdf(prior: Prior, x: float) -> float:
    name = _canonical(prior.distribution)
    a = prior.parameters[0]
    b = prior.parameters[1] if len(prior.parameters) > 1 else None
    if math.isinf(x):
        return 0.0 if x < 0 else 1.0
    if name == "uniform":
        return min(max((x - a) / (b - a), 0.0), 1.0)
    if name == "normal":
        return 0.5 * (1 + math.erf((x - a) / (b * math.sqrt(2))))
    if name == "laplace":
        return 0.5 * math.exp((x - a) / b) if x < a else 1 - 0.5 * math.exp(-(x - a) / b)
    if name in ("lognormal", "loglaplace", "loguniform"):
        if x <= 0:
            return 0.0
        base = Prior(name[3:], prior.parameters) if name != "loguniform" else None
        if base is None:
            return min(max(math.log(x / a) / math.log(b / a), 0.0), 1.0)
        return _cdf(base, math.log(x))
    if name == "cauchy":
        return 0.5 + math.atan((x - a) / b) / math.pi
    if name == "exponential":
        return 0.0 if x <= 0 else 1 - math.exp(-x / a)
    if name == "rayleigh":
        return 0.0 if x <= 0 else 1 - math.exp(-x * x / (2 * a * a))
    if name in ("gamma", "chisquare"):
        if x <= 0:
            return 0.0
        try:
            from scipy.special import gammainc
        except ImportError:  # pragma: no cover - scipy is a dev dependency
            return math.nan
        if name == "gamma":
            return float(gammainc(a, x / b))
        return float(gammainc(a / 2, x / 2))
    raise ValueError(f"unknown prior {prior.distribution!r}")


def truncation_log_mass(prior: Prior, lower: float, upper: float) -> float:
    """``log(P(lower <= X <= upper))``: the prior is truncated to the parameter bounds
    (0 when the bounds do not cut into its support)."""
    if math.isinf(lower) and math.isinf(upper):
        return 0.0
    mass = _cdf(prior, upper) - _cdf(prior, lower)
    if not mass > 0:
        return math.nan if math.isnan(mass) else -math.inf
    return math.log(min(mass, 1.0))

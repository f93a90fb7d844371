"""Start points of a multi-start fit (framework-free apart from the network initialiser).

Start ``k`` of a fit with seed ``s`` is drawn from ``numpy.random.default_rng([s, k])``,
so it does not depend on how many starts the fit has, nor on where it runs.

* **Mechanistic parameters** (estimated ones): from the parameter table's initialization
  prior (PEtab v1 columns ``initializationPriorType`` / ``initializationPriorParameters``)
  where given, else from the prior (``priorDistribution`` / ``priorParameters``) where
  given, else uniform between the bounds on the parameter's ``parameterScale`` (log-uniform
  for ``log``/``log10``).  Draws outside the bounds are redrawn.
* **Network arrays**: every estimated element from its layer's default PyTorch
  initialiser (the backend's ``build(network, seed=...)``, seeded from the same
  generator); frozen elements keep their nominal values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from petab_sciml.problem.resolve import Prior
from petab_sciml.simulation.scales import from_scale, to_scale

MAX_REDRAWS = 1000


def start_rng(seed: int, start: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(start)])


def sample_start(problem: Any, seed: int, start: int) -> np.ndarray:
    """The linear parameter vector ``w`` (``plan.pack`` layout) of start ``start``."""
    plan = problem.plan
    rng = start_rng(seed, start)
    w = plan.w0.copy()
    scales = plan.mech_scale or ("lin",) * plan.n_mech
    priors = initialization_priors(problem)
    for i, pid in enumerate(plan.mech_ids):
        w[i] = _draw(rng, priors.get(pid), scales[i], plan.mech_lower[i], plan.mech_upper[i],
                     pid)
    free = plan.free_mask()
    for net in plan.networks:
        seed_net = int(rng.integers(0, 2**31 - 1))
        model = problem.backend.build(net.network, dtype="float64", seed=seed_net)
        init = problem.backend.get_parameters(model)
        for s in net.arrays:
            sl = slice(s.offset, s.offset + s.size)
            value = np.asarray(init[s.layer][s.array], np.float64).reshape(-1)
            w[sl] = np.where(free[sl], value, w[sl])
    return w


def initialization_priors(problem: Any) -> dict[str, tuple[Prior, bool]]:
    """``{parameter id: (prior, is an initialization prior)}`` for mechanistic rows with
    an initialization prior or a prior."""
    from petab_sciml.problem.parameters import PRIORS

    out: dict[str, tuple[Prior, bool]] = {}
    for _, row in problem.context.rows("parameter"):
        pid = row["parameterId"]
        name, params = row["initializationPriorType"], row["initializationPriorParameters"]
        if name:
            key = name.lower().replace("-", "").replace("_", "")
            canonical, n = PRIORS.get(key, (name, 0))
            values = tuple(float(v) for v in params.split(";")) if params else ()
            out[pid] = (Prior(canonical, values), True)
        elif pid in problem.plain_parameters and problem.plain_parameters[pid].prior:
            out[pid] = (problem.plain_parameters[pid].prior, False)
    return out


def _draw(rng: np.random.Generator, prior: tuple[Prior, bool] | None, scale: str,
          lower: float, upper: float, pid: str) -> float:
    lo_s, hi_s = to_scale(np.array([lower, upper]), (scale, scale))
    for _ in range(MAX_REDRAWS):
        if prior is None:
            if not (math.isfinite(lo_s) and math.isfinite(hi_s)):
                raise ValueError(f"parameter {pid!r} has no finite bounds on its "
                                 f"{scale} scale and no prior: cannot draw a start")
            value = float(from_scale(np.array([rng.uniform(lo_s, hi_s)]), (scale,))[0])
        else:
            value = _sample(rng, prior[0], scale)
        if lower <= value <= upper:
            return value
    raise ValueError(f"parameter {pid!r}: {MAX_REDRAWS} draws of {prior[0]} fell outside "
                     f"[{lower:g}, {upper:g}]")


def _sample(rng: np.random.Generator, prior: Prior, scale: str) -> float:
    """One linear value from ``prior`` (``parameterScale*`` priors on ``scale``)."""
    name = prior.distribution.lower().replace("-", "").replace("_", "")
    on_scale = name.startswith("parameterscale")
    if on_scale:
        name = name[len("parameterscale"):]
    p = prior.parameters
    if name == "uniform":
        x = rng.uniform(p[0], p[1])
    elif name == "normal":
        x = rng.normal(p[0], p[1])
    elif name == "laplace":
        x = rng.laplace(p[0], p[1])
    elif name == "lognormal":
        x = math.exp(rng.normal(p[0], p[1]))
    elif name == "loglaplace":
        x = math.exp(rng.laplace(p[0], p[1]))
    elif name == "loguniform":
        x = math.exp(rng.uniform(math.log(p[0]), math.log(p[1])))
    elif name == "cauchy":
        x = p[0] + p[1] * rng.standard_cauchy()
    elif name == "chisquare":
        x = rng.chisquare(p[0])
    elif name == "exponential":
        x = rng.exponential(p[0])
    elif name == "gamma":
        x = rng.gamma(p[0], p[1])
    elif name == "rayleigh":
        x = rng.rayleigh(p[0])
    else:
        raise ValueError(f"cannot sample from prior {prior}")
    if on_scale:
        return float(from_scale(np.array([x]), (scale,))[0])
    return float(x)

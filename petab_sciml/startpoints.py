"""Start points for multi-start optimization of a PEtab SciML problem.

A start point is a full parameter vector ``w`` of a
:class:`~petab_sciml.simulation.plan.SimulationPlan` (linear scale, entries the problem
does not estimate at their nominal values), drawn as follows:

* an estimated mechanistic parameter with an initialization prior (the optional columns
  ``initializationPriorType`` / ``initializationPriorParameters`` of PEtab v1, read by
  :func:`initialization_priors`) or else a prior (``priorDistribution``) is drawn from
  that distribution truncated to its bounds (``parameterScale*`` ones on the parameter's
  ``parameterScale``, the others on its linear value);
* one without a prior is drawn uniformly within its bounds on its ``parameterScale``
  (``log``/``log10``: log-uniformly); such a parameter needs finite bounds there;
* the estimated entries of a network array take the values of the layer's default
  PyTorch initialiser (the backend's ``build(network, seed=...)``), clipped to their
  bounds; entries the problem freezes keep their nominal values.

Start ``k`` of seed ``s`` depends on ``(s, k)`` and the backend only: it is the same
whichever other starts are drawn, in whichever process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from petab_sciml.simulation.likelihood import on_parameter_scale, truncation_log_mass
from petab_sciml.simulation.plan import SimulationError, SimulationPlan
from petab_sciml.simulation.scales import from_scale, on_scale

__all__ = ["start_point", "start_points"]

MechBounds = tuple[Sequence[float], Sequence[float]] | None
InitPriors = Mapping[int, tuple[Any, str]] | None
"""``{mechanistic index: (prior, scale it applies on)}``: start distributions that
replace the parameter table's priors (see :func:`initialization_priors`)."""

_MIN_MASS = 1e-9
"""Smallest prior mass within the bounds that rejection sampling accepts."""


def start_points(plan: SimulationPlan, n: int, *, seed: int = 0, first: int = 0,
                 backend: str = "jax", mech_bounds: MechBounds = None,
                 init_priors: InitPriors = None) -> np.ndarray:
    """Starts ``first .. first + n - 1`` of ``seed``: an ``(n, plan.n_w)`` float64 array
    of full parameter vectors ``w`` (linear scale); see :func:`start_point`."""
    return np.stack([start_point(plan, first + k, seed=seed, backend=backend,
                                 mech_bounds=mech_bounds, init_priors=init_priors)
                     for k in range(n)]) if n > 0 else np.zeros((0, plan.n_w))


def start_point(plan: SimulationPlan, k: int, *, seed: int = 0, backend: str = "jax",
                mech_bounds: MechBounds = None, init_priors: InitPriors = None,
                attempt: int = 0) -> np.ndarray:
    """Start ``k`` of ``seed`` (``w``, float64, linear scale; see the module docstring).

    ``mech_bounds``, two arrays of ``plan.n_mech`` linear values, narrow the range the
    mechanistic parameters are drawn from (intersected with their bounds): the
    initialization bounds of optimizers such as pyPESTO's ``lb_init``/``ub_init``.
    ``init_priors`` replace the priors of the parameters they name.  ``attempt > 0``
    draws another start point for the same ``k`` (to replace one whose objective is not
    finite), again reproducibly.
    """
    from petab_sciml.plugins import get_backend

    key = (k,) if attempt == 0 else (k, attempt)
    mech_seq, net_seq = np.random.SeedSequence(seed, spawn_key=key).spawn(2)
    w = plan.w0.astype(np.float64).copy()
    free = plan.free_mask()
    w[: plan.n_mech] = _mechanistic(plan, np.random.default_rng(mech_seq), mech_bounds,
                                    init_priors)
    impl = get_backend(backend)
    net_seeds = net_seq.generate_state(max(len(plan.networks), 1))
    for net_seed, net in zip(net_seeds, plan.networks):
        if not any(free[s.offset: s.offset + s.size].any() for s in net.arrays):
            continue
        values = impl.get_parameters(impl.build(net.network, dtype="float64",
                                                seed=int(net_seed)))
        for s in net.arrays:
            sl = slice(s.offset, s.offset + s.size)
            init = np.asarray(values[s.layer][s.array], np.float64).reshape(-1)
            w[sl] = np.where(free[sl], init, w[sl])
    net_part = slice(plan.n_mech, plan.n_w)
    w[net_part] = np.clip(w[net_part], plan.w_lower[net_part], plan.w_upper[net_part])
    return w


def _mechanistic(plan: SimulationPlan, rng: np.random.Generator,
                 mech_bounds: MechBounds, init_priors: InitPriors = None) -> np.ndarray:
    prior_of = {int(i): (prior, scale) for prior, idx, _, _, scale in plan.priors
                for i in idx if i < plan.n_mech}
    prior_of.update(init_priors or {})
    scales = plan.mech_scale or ("lin",) * plan.n_mech
    out = np.empty(plan.n_mech)
    for i, pid in enumerate(plan.mech_ids):
        lo, hi = float(plan.w_lower[i]), float(plan.w_upper[i])
        if mech_bounds is not None:
            lo = max(lo, float(mech_bounds[0][i]))
            hi = min(hi, float(mech_bounds[1][i]))
            if not lo <= hi:
                raise SimulationError(f"parameter {pid!r}: the start-point range "
                                      f"[{mech_bounds[0][i]:g}, {mech_bounds[1][i]:g}] "
                                      f"lies outside its bounds [{plan.w_lower[i]:g}, "
                                      f"{plan.w_upper[i]:g}]")
        if i in prior_of:
            prior, scale = prior_of[i]
            out[i] = _truncated_prior(rng, prior, scale, lo, hi, pid)
            continue
        lo_s, hi_s = on_scale((lo, hi), scales[i])
        if not (math.isfinite(lo_s) and math.isfinite(hi_s)):
            raise SimulationError(
                f"parameter {pid!r}: drawing a start point needs finite bounds on its "
                f"parameterScale ({scales[i]}: [{lo_s:g}, {hi_s:g}] from lowerBound {lo:g}, "
                f"upperBound {hi:g}) or a priorDistribution")
        out[i] = from_scale(np.array([rng.uniform(lo_s, hi_s)]), (scales[i],))[0]
    return out


def _truncated_prior(rng: np.random.Generator, prior: Any, scale: str, lo: float, hi: float,
                     pid: str) -> float:
    """One draw of ``prior`` truncated to ``[lo, hi]`` (linear bounds), as a linear value.

    ``scale`` is the scale the prior applies on (``lin`` unless ``parameterScale*``)."""
    lo_s, hi_s = on_scale((lo, hi), scale)
    mass = math.exp(truncation_log_mass(prior, lo_s, hi_s))
    if not mass >= _MIN_MASS:
        raise SimulationError(f"parameter {pid!r}: its prior {prior} has (almost) no mass "
                              f"within its bounds [{lo:g}, {hi:g}]; no start point can be "
                              "drawn")
    batch = int(min(max(64, 4 / mass), 1_000_000))
    for _ in range(1000):
        draws = _draw(rng, prior, batch)
        inside = draws[(draws >= lo_s) & (draws <= hi_s)]
        if inside.size:
            return float(from_scale(inside[:1], (scale,))[0])
    raise SimulationError(f"parameter {pid!r}: no draw of its prior {prior} fell within its "
                          f"bounds [{lo:g}, {hi:g}]")  # pragma: no cover - mass checked


def _draw(rng: np.random.Generator, prior: Any, n: int) -> np.ndarray:
    """``n`` draws of ``prior`` (the distributions of :mod:`~petab_sciml.simulation.likelihood`,
    same parametrisation); ``parameterScale*`` priors give values on the scale."""
    name = prior.distribution.lower().replace("-", "").replace("_", "")
    if on_parameter_scale(prior):
        name = name[len("parameterscale"):]
    a = prior.parameters[0]
    b = prior.parameters[1] if len(prior.parameters) > 1 else None
    if name == "uniform":
        return rng.uniform(a, b, n)
    if name == "normal":
        return rng.normal(a, b, n)
    if name == "laplace":
        return rng.laplace(a, b, n)
    if name == "lognormal":
        return np.exp(rng.normal(a, b, n))
    if name == "loglaplace":
        return np.exp(rng.laplace(a, b, n))
    if name == "loguniform":
        return np.exp(rng.uniform(math.log(a), math.log(b), n))
    if name == "cauchy":
        return a + b * rng.standard_cauchy(n)
    if name == "chisquare":
        return rng.chisquare(a, n)
    if name == "exponential":
        return rng.exponential(a, n)
    if name == "gamma":
        return rng.gamma(a, b, n)
    if name == "rayleigh":
        return rng.rayleigh(a, n)
    raise SimulationError(f"unknown prior {prior.distribution!r}")


def initialization_priors(problem: Any) -> dict[int, tuple[Any, str]]:
    """The initialization priors of a loaded problem's mechanistic parameters:
    ``{index: (prior, scale)}`` from the optional parameter-table columns
    ``initializationPriorType`` / ``initializationPriorParameters`` (PEtab v1 names; PEtab
    v2 dropped them, so they are only read when present).  ``parameterScale*`` types
    apply on the parameter's ``parameterScale``, the others on its linear value."""
    from petab_sciml.problem.parameters import PRIORS
    from petab_sciml.problem.resolve import Prior

    plan = problem.plan
    index = {pid: i for i, pid in enumerate(plan.mech_ids)}
    scales = plan.mech_scale or ("lin",) * plan.n_mech
    out: dict[int, tuple[Any, str]] = {}
    for table, row in problem.context.rows("parameter"):
        n = f"{table.file}, line {row.line}"
        pid, name = row["parameterId"], row["initializationPriorType"].strip()
        if not name or pid not in index:
            continue
        key = name.lower().replace("-", "").replace("_", "")
        if key not in PRIORS:
            raise SimulationError(f"{n} ({pid}): unknown "
                                  f"initializationPriorType {name!r}; known: "
                                  f"{', '.join(sorted(PRIORS))}")
        canonical, count = PRIORS[key]
        text = row["initializationPriorParameters"].strip()
        try:
            values = tuple(float(v) for v in text.split(";")) if text else ()
        except ValueError:
            values = ()
        if count and len(values) != count:
            raise SimulationError(f"{n} ({pid}): "
                                  f"initializationPriorParameters {text!r} must be {count} "
                                  f"numbers separated by ';' for {canonical}")
        prior = Prior(canonical, values)
        scale = scales[index[pid]] if on_parameter_scale(prior) else "lin"
        out[index[pid]] = (prior, scale)
    return out

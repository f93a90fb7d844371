"""From the states at the measured points to the objective: networks in observables,
observables and noise formulas, log-likelihood and log-prior."""

from __future__ import annotations

from typing import Any

import jax

from petab_sciml.simulation.likelihood import log_likelihood, log_prior_at
from petab_sciml.simulation.plan import SimulationPlan

from .experiments import GroupValues
from .networks import BoundNetworks, NetArrays


def network_outputs(plan: SimulationPlan, networks: BoundNetworks, X: Any, TH: Any,
                    groups: GroupValues, data: dict[str, Any], nets: NetArrays,
                    dtype: Any, key: Any = None) -> list[Any]:
    """Per network, its outputs at every measurement (``(n_measurements, n_outputs)``):
    pre-initialization networks from their group, networks in observables evaluated at
    the measurement's time, states ``X`` and parameters ``TH`` (in training mode with a
    PRNG ``key``), zeros for the others."""
    import jax.numpy as jnp

    t_m = data["m_time"]
    group_m = data["m_group"]
    outs = [jnp.zeros((t_m.shape[0], net.n_outputs), dtype) for net in plan.networks]
    for i, j in enumerate(groups.pre_ids):
        outs[j] = groups.pre[i][group_m]
    obs_nets = [j for j, net in enumerate(plan.networks) if net.in_observables]
    if obs_nets:
        arrays_m = [{k: v[group_m] for k, v in a.items()} for a in groups.arrays]

        def point(t, x, theta, outs, arrays):
            outs = list(outs)
            for j in obs_nets:
                outs[j] = networks.outputs(j, t, x, theta, outs, arrays, nets, key=key)
            return outs

        outs = jax.vmap(point)(t_m, X, TH, outs, arrays_m)
    return outs


def observables_and_noise(fns: Any, obs_rows: list[tuple[int, str]], data: dict[str, Any],
                          X: Any, TH: Any, outs: list[Any], dtype: Any
                          ) -> tuple[Any, Any]:
    """``(simulations, sigmas)`` of every measurement (measurement order): the compiled
    observable and noise formulas ``fns.observables[i]``, ``fns.noise[i]`` of each
    measured observable on its rows (``obs_rows``), with their placeholders."""
    import jax.numpy as jnp

    t_m = data["m_time"]
    op = _overrides(TH, data["m_opt"], data["m_opv"])
    npar = _overrides(TH, data["m_npt"], data["m_npv"])
    ys, sigmas = [], []
    for i, key in obs_rows:
        idx = data[key]
        args = (t_m[idx], X[idx], TH[idx], *(o[idx] for o in outs))
        ys.append(fns.observables[i](*args, op[idx])[:, 0])
        sigmas.append(fns.noise[i](*args, op[idx], npar[idx])[:, 0])
    order = data["m_order"]
    y = jnp.concatenate(ys)[order] if ys else jnp.zeros((0,), dtype)
    sigma = jnp.concatenate(sigmas)[order] if sigmas else jnp.zeros((0,), dtype)
    return y, sigma


def log_likelihood_sum(llh_groups: list[tuple[int, int, str]], data: dict[str, Any],
                       y: Any, sigma: Any, dtype: Any) -> Any:
    """The log-likelihood of the measurements, summed per noise model (``llh_groups``:
    transformation code, distribution code, array name of its rows)."""
    import jax.numpy as jnp

    llh = jnp.zeros((), dtype)
    for tr, di, key in llh_groups:
        idx = data[key]
        llh = llh + jnp.sum(log_likelihood(jnp, data["m_value"][idx], y[idx],
                                           sigma[idx], tr, di))
    return llh


def log_prior_sum(plan: SimulationPlan, w: Any, data: dict[str, Any]) -> Any:
    """The log-prior of the parameter vector ``w`` (``prior_{i}``: entries of prior
    ``i``)."""
    import jax.numpy as jnp

    logprior = jnp.asarray(plan.logprior_const, w.dtype)
    for i, (prior, _, _, _, scale) in enumerate(plan.priors):
        logprior = logprior + jnp.sum(log_prior_at(jnp, w[data[f"prior_{i}"]], prior, scale))
    return logprior


def _overrides(theta: Any, index: Any, values: Any) -> Any:
    """Placeholder values per measurement: ``theta[m, index]`` where index >= 0, else
    the number."""
    import jax.numpy as jnp

    if index.shape[1] == 0:
        return jnp.zeros((theta.shape[0], 0), theta.dtype)
    picked = jnp.take_along_axis(theta, jnp.maximum(index, 0), axis=1)
    return jnp.where(index >= 0, picked, values)

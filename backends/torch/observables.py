"""From the states at the measurements to the objective: the networks evaluated at the
measurements, observables and noise (:func:`observables_and_noise`), the log-likelihood
(:func:`log_likelihood_sum`) and the log-prior (:func:`log_prior_sum`)."""

from __future__ import annotations

from typing import Any

import torch

from petab_sciml.backends.torch.layout import TorchLayout
from petab_sciml.backends.torch.networks import Networks
from petab_sciml.backends.torch.sensitivity_parameters import SensitivityParameters
from petab_sciml.simulation.likelihood import log_likelihood, log_prior_at
from petab_sciml.simulation.plan import SimulationPlan


def measurement_outputs(plan: SimulationPlan, networks: Networks,
                        sens: SensitivityParameters, d: dict[str, torch.Tensor], X, TH,
                        group_outs, arrays_all, params, w) -> list[torch.Tensor]:
    """Per network, its outputs at each measurement ``(n_measurements, n_outputs)``:
    pre-initialization outputs of the measurement's group, observable networks
    evaluated at the measurement's states ``X`` and constants ``TH``, zeros for the
    others."""
    t_m = d["m_time"]
    outs_m = [w.new_zeros((t_m.shape[0], n.n_outputs)) for n in plan.networks]
    for j in sens.pre_ids:
        outs_m[j] = torch.stack([go[j] for go in group_outs])[d["m_group"]]
    if sens.obs_nets:
        arrays_m = [{k: v[d["m_group"]] for k, v in a.items()} for a in arrays_all]
        for j in sens.obs_nets:
            outs_m[j] = networks.out(j, t_m, X, TH, outs_m, arrays_m, params[j],
                                     batched=True)
    return outs_m


def observables_and_noise(fns: Any, layout: TorchLayout, d: dict[str, torch.Tensor], X, TH,
                          outs_m, w) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, sigma)``: simulated observables and noise standard deviations in
    measurement-table order."""
    t_m = d["m_time"]
    op = _overrides(TH, d["m_opt"], d["m_opv"])
    npar = _overrides(TH, d["m_npt"], d["m_npv"])
    ys, sigmas = [], []
    for i, key in layout.observable_rows:
        idx = d[key]
        args = (t_m[idx], X[idx], TH[idx], *(o[idx] for o in outs_m))
        ys.append(fns.observables[i](*args, op[idx])[:, 0])
        sigmas.append(fns.noise[i](*args, op[idx], npar[idx])[:, 0])
    y = torch.cat(ys)[d["m_order"]] if ys else w.new_zeros((0,))
    sigma = torch.cat(sigmas)[d["m_order"]] if sigmas else w.new_zeros((0,))
    return y, sigma


def log_likelihood_sum(layout: TorchLayout, d: dict[str, torch.Tensor], y, sigma,
                       w) -> torch.Tensor:
    """The log-likelihood of the measurements given ``y`` and ``sigma``."""
    llh = w.new_zeros(())
    for tr, di, key in layout.likelihood_groups:
        idx = d[key]
        llh = llh + torch.sum(log_likelihood(torch, d["m_value"][idx], y[idx], sigma[idx],
                                             tr, di))
    return llh


def log_prior_sum(plan: SimulationPlan, d: dict[str, torch.Tensor], w) -> torch.Tensor:
    """The log-prior of the parameter vector ``w``."""
    logprior = w.new_tensor(plan.logprior_const)
    for i, (prior, _, _, _, scale) in enumerate(plan.priors):
        logprior = logprior + torch.sum(log_prior_at(torch, w[d[f"prior_{i}"]], prior,
                                                     scale))
    return logprior


def _overrides(theta, index, values):
    """Per measurement, its observable or noise parameters: ``theta[index]`` where the
    index is a constant's (``>= 0``), else the number in ``values``."""
    if index.shape[1] == 0:
        return theta.new_zeros((theta.shape[0], 0))
    picked = torch.gather(theta, 1, index.clamp(min=0))
    return torch.where(index >= 0, picked, values)

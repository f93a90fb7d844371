"""The whole PEtab SciML problem as a ``torch.nn.Module``: the native trainable model in
PyTorch.

``TorchProblem`` holds what a training loop updates as its parameters:

* ``mech``: the estimated mechanistic parameters (``parameter_ids`` order) on their
  ``parameterScale`` (``lin``: the value, ``log``: its natural log, ``log10``);
* ``nets``: an ``nn.ModuleDict`` of every network as its real ``torch.nn`` layers (built
  by the torch backend), in float64.  Arrays the problem does not estimate at all have
  ``requires_grad=False``.

``forward()`` returns the negative log-posterior as a differentiable scalar
(``loss.backward()`` fills ``.grad``); :meth:`TorchProblem.evaluate` also gives the
log-likelihood, log-prior, simulations and ``ok``.  Any ``torch.optim`` optimizer and LR
scheduler works on ``module.parameters()``, and ``.to(dtype)`` / ``.to(device)`` move
everything (float32 solves use tolerances no tighter than 1e-5).

* **Frozen elements** are read from the problem's nominal values, never from the module,
  so their gradient is exactly 0; :meth:`TorchProblem.project_` also resets them.
* **Bounds**: projection after each step (:meth:`TorchProblem.project_`), the same
  method as the JAX model's ``project``.
* **train() / eval()** as torch does: in training mode the parameter table's dropout
  column draws one keep-mask per targeted array per evaluation (from ``generator``, or
  torch's global one) and Dropout/BatchNorm layers of networks evaluated outside the ODE
  behave as in training; in eval mode nothing is dropped.  Networks inside the
  right-hand side run in eval mode during solves (a deterministic right-hand side).
* ``compile=True`` (default) compiles the solves with ``torch.compile`` on the first
  evaluation (a one-time cost per problem; later evaluations run native code).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from petab_sciml.simulation.scales import scale_codes, to_scale


class TorchProblem(torch.nn.Module):
    """The problem's estimated values and objective (see the module docstring)."""

    def __init__(self, problem: Any, params: Any = None, *,
                 generator: torch.Generator | None = None, **options: Any):
        super().__init__()
        from petab_sciml.backends.torch.build import build_module
        from petab_sciml.backends.torch.simulation import TorchExecutor, TorchOptions
        from petab_sciml.problem.dropout import dropout_targets
        from petab_sciml.simulation import build_plan

        plan = getattr(problem, "plan", None) or build_plan(problem.data)
        options.setdefault("compile", True)
        self.plan = plan
        self.parameter_ids: tuple[str, ...] = plan.mech_ids
        self.scales: tuple[str, ...] = plan.mech_scale or ("lin",) * plan.n_mech
        self.generator = generator
        w = plan.w0 if params is None else plan.pack(params)
        self.mech = torch.nn.Parameter(torch.as_tensor(
            to_scale(w[: plan.n_mech], self.scales), dtype=torch.float64))
        nets = {}
        self.dropout_targets: dict[str, list[Any]] = {}
        for net in plan.networks:
            module = build_module(net.network, dtype="float64")
            state = module.state_dict(keep_vars=True)
            with torch.no_grad():
                for s in net.arrays:
                    state[s.key].copy_(torch.as_tensor(
                        w[s.offset: s.offset + s.size].reshape(s.shape)))
            for s in net.arrays:
                if s.ir_trainable and not plan.free_mask()[s.offset: s.offset + s.size].any():
                    state[s.key].requires_grad_(False)
            nets[net.id] = module
            spec = problem.parameters[net.id].dropout if net.id in problem.parameters else {}
            self.dropout_targets[net.id] = dropout_targets(net.network, spec)
        self.nets = torch.nn.ModuleDict(nets)
        self.register_buffer("w0", torch.as_tensor(plan.w0, dtype=torch.float64))
        self.register_buffer("free", torch.as_tensor(plan.free_mask()))
        self.register_buffer("lower", torch.as_tensor(plan.w_lower, dtype=torch.float64))
        self.register_buffer("upper", torch.as_tensor(plan.w_upper, dtype=torch.float64))
        self.register_buffer("mech_lower", torch.as_tensor(
            to_scale(plan.mech_lower, self.scales), dtype=torch.float64))
        self.register_buffer("mech_upper", torch.as_tensor(
            to_scale(plan.mech_upper, self.scales), dtype=torch.float64))
        self.scale_codes = scale_codes(self.scales)
        self.executor = TorchExecutor(plan, TorchOptions(**options),
                                      modules=[nets[n.id] for n in plan.networks])
        self.last: dict[str, Any] | None = None
        """Outputs of the last :meth:`forward` (``llh``, ``logprior``, ...)."""

    # ------------------------------------------------------------------ values
    def vector(self, *, dropout: bool | None = None) -> torch.Tensor:
        """The linear parameter vector ``w`` the simulation reads (``plan.pack`` layout):
        ``mech`` unscaled, every network array, frozen entries at their nominal values,
        and the dropout column applied in training mode (``dropout`` overrides)."""
        from petab_sciml.backends.torch.parameter_dropout import (
            apply_parameter_dropout,
            sample_masks,
        )

        dropout = self.training if dropout is None else dropout
        parts = [unscale(self.mech, self.scale_codes)]
        for net in self.plan.networks:
            state = self.nets[net.id].state_dict(keep_vars=True)
            targets = self.dropout_targets[net.id]
            if dropout and targets:
                masks = sample_masks(targets, self.generator, device=self.mech.device)
                state = apply_parameter_dropout(state, targets, masks)
            for s in net.arrays:
                parts.append(state[s.key].to(self.mech.dtype).reshape(-1))
        w = torch.cat(parts)
        return torch.where(self.free, w, self.w0)

    def evaluate(self) -> dict[str, Any]:
        """``value`` (negative log-posterior, a differentiable scalar; ``inf`` if a solve
        failed), ``llh``, ``logprior``, ``simulations`` (measurement-table order), ``ok``."""
        return self.executor.evaluate(self.vector())

    def forward(self) -> torch.Tensor:
        """The negative log-posterior (training mode: with the dropout column)."""
        out = self.evaluate()
        self.last = out
        return out["value"]

    @torch.no_grad()
    def project_(self) -> TorchProblem:
        """Bounds after a step: clip every value to its bounds (``mech`` on its scale) and
        reset frozen elements to their nominal values, in place."""
        self.mech.copy_(torch.clamp(self.mech, self.mech_lower, self.mech_upper))
        for net in self.plan.networks:
            state = self.nets[net.id].state_dict(keep_vars=True)
            for s in net.arrays:
                if not s.ir_trainable:
                    continue
                sl = slice(s.offset, s.offset + s.size)
                value = state[s.key]
                shape = tuple(s.shape)
                clipped = torch.clamp(value, self.lower[sl].view(shape).to(value.dtype),
                                      self.upper[sl].view(shape).to(value.dtype))
                value.copy_(torch.where(self.free[sl].view(shape), clipped,
                                        self.w0[sl].view(shape).to(value.dtype)))
        return self

    def values(self) -> dict[str, Any]:
        """``{"mech": linear values, "nets": {net: {layer: {array: ndarray}}}}`` (numpy,
        float64, no dropout): the exchange format of ``Simulator`` and ``Problem.save``."""
        with torch.no_grad():
            w = self.vector(dropout=False).detach().to("cpu", torch.float64).numpy()
        return self.plan.unpack(w)


def unscale(values: torch.Tensor, codes: np.ndarray) -> torch.Tensor:
    """Values on their ``parameterScale`` -> linear values (differentiable)."""
    out = values
    for code, fn in ((1, torch.exp), (2, lambda v: 10.0 ** v)):
        idx = np.flatnonzero(codes == code)
        if idx.size:
            index = torch.as_tensor(idx, device=values.device)
            out = out.index_put((index,), fn(values[index]))
    return out

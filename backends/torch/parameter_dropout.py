"""Parameter dropout (the parameter table's ``dropout`` column) for torch modules.

:class:`ParameterDropout` wraps a module built by this backend: in training mode every
forward pass draws fresh keep-masks (from its ``torch.Generator``, or the global one) and
runs the module with the targeted arrays multiplied by ``mask / (1 - p)`` along their
input axis (see :mod:`petab_sciml.problem.dropout`); in eval mode it is the module.
Injected masks (``set_masks``) make passes deterministic for cross-backend tests.
The wrapped module's own parameters are untouched, so gradients flow to them as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from petab_sciml.problem.dropout import DropoutTarget, dropout_targets


def sample_masks(targets: list[DropoutTarget], generator: torch.Generator | None = None,
                 device: Any = None) -> dict[str, dict[str, torch.Tensor]]:
    """Keep-masks (bool, one entry per slice): each slice kept with probability 1 - p."""
    masks: dict[str, dict[str, torch.Tensor]] = {}
    for t in targets:
        u = torch.rand(t.n_slices, generator=generator, device=device, dtype=torch.float64)
        masks.setdefault(t.layer, {})[t.array] = u >= t.p
    return masks


def apply_parameter_dropout(params: Mapping[str, torch.Tensor], targets: list[DropoutTarget],
                            masks: Mapping[str, Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """``{"layer.array": tensor}`` with every target multiplied by its mask factor."""
    out = dict(params)
    for t in targets:
        w = params[t.name]
        keep = torch.as_tensor(masks[t.layer][t.array], device=w.device).to(torch.bool)
        scale = torch.tensor(t.scale, dtype=w.dtype, device=w.device)
        factor = torch.where(keep, scale, torch.zeros((), dtype=w.dtype, device=w.device))
        out[t.name] = w * factor.reshape(t.mask_shape)
    return out


class ParameterDropout(torch.nn.Module):
    """``module`` with parameter dropout ``spec`` (``{layer: {array: p}}``) in training mode."""

    def __init__(self, module: torch.nn.Module, spec: Mapping[str, Mapping[str, float]], *,
                 network: Any = None, generator: torch.Generator | None = None):
        super().__init__()
        if network is None:
            from petab_sciml.backends.torch.build import network_of

            network = network_of(module)
        self.module = module
        self.targets = dropout_targets(network, spec)
        self.generator = generator
        self._masks: Mapping[str, Mapping[str, Any]] | None = None
        self.last_masks: dict[str, dict[str, torch.Tensor]] | None = None

    def set_masks(self, masks: Mapping[str, Mapping[str, Any]] | None) -> None:
        """Use these keep-masks for every training pass (None: draw fresh ones again)."""
        self._masks = masks

    def forward(self, *inputs: Any) -> Any:
        if not self.training or not self.targets:
            return self.module(*inputs)
        device = next(iter(self.module.parameters())).device
        masks = self._masks if self._masks is not None else sample_masks(
            self.targets, self.generator, device)
        self.last_masks = {k: dict(v) for k, v in masks.items()}
        params = dict(self.module.named_parameters())
        params.update(self.module.named_buffers())
        dropped = apply_parameter_dropout(params, self.targets, masks)
        return torch.func.functional_call(self.module, dropped, inputs)

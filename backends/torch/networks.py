"""The plan's networks as the executor calls them, with their arrays taken from the
parameter vector ``w`` (:class:`Networks`).

Two modules per network are built from the IR: a plain one for
``torch.func.functional_call`` (traceable by ``torch.compile``, and by ``vmap``), and a
bound copy whose arrays are plain attributes pointed at views of ``w`` for eager code
(no per-call re-parametrisation).  Neither module's own parameters are ever read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from petab_sciml.backends.torch.build import build_module
from petab_sciml.backends.torch.ordered import order_small_products
from petab_sciml.simulation.plan import SimulationError, SimulationPlan


class Networks:
    """Network calls of one plan.  ``modes_from`` (one module per network, plan order),
    when given, decide each network's train/eval mode (:meth:`sync_modes`);
    ``ordered_products``: their small Linear products in a batch-invariant order
    (:mod:`~petab_sciml.backends.torch.ordered`); ``net_inputs``: per network, the
    compiled formulas of its element inputs ``f(t, x, theta, *outs)`` (None: none)."""

    def __init__(self, plan: SimulationPlan, net_inputs: list[Any], *,
                 modes_from: list[Any] | None = None, ordered_products: bool = False):
        self.plan = plan
        self.net_inputs = net_inputs
        self.modules = [self._build(net) for net in plan.networks]
        self.bound = [self._bind(net) for net in plan.networks]
        if ordered_products:
            for module in (*self.modules, *(m for m, _ in self.bound)):
                order_small_products(module)
        self.mode_of = list(modes_from) if modes_from is not None else list(self.modules)
        self.transparent: dict[int, bool] = {}
        """Per network probed so far: whether it maps a batch row by row
        (:meth:`is_transparent`)."""

    @staticmethod
    def _build(net: Any) -> Any:
        module = build_module(net.network, dtype="float64")
        module.eval()
        return module

    def _bind(self, net: Any) -> tuple[Any, list]:
        """A module whose arrays are plain tensor attributes, and its slots ``(owner
        module, attribute, array slot)``."""
        module = self._build(net)
        slots = []
        for s in net.arrays:
            owner = module.get_submodule(s.layer)
            owner._parameters.pop(s.array, None)
            owner._buffers.pop(s.array, None)
            setattr(owner, s.array, None)
            slots.append((owner, s.array, s))
        return module, slots

    def sync_modes(self) -> None:
        """Give both modules of each network the train/eval mode of its mode source."""
        for (module, _), plain, source in zip(self.bound, self.modules, self.mode_of):
            if module.training != source.training:
                module.train(source.training)
                plain.train(source.training)

    def params(self, j: int, flat: torch.Tensor, base: int) -> dict[str, torch.Tensor]:
        """``{"layer.array": view}`` of network ``j``'s arrays in ``flat`` (which starts at
        offset ``base`` of ``w``)."""
        out = {}
        for s in self.plan.networks[j].arrays:
            start = s.offset - base
            view = flat[start: start + s.size].view(s.shape)
            if s.array == "num_batches_tracked":
                view = view.round().to(torch.int64)
            out[s.key] = view
        return out

    def out(self, j, t, x, theta, outs, arrays, params, batched: bool = False,
            functional: bool = False):
        """Mapped outputs of network ``j`` at ``(t, x, theta, outs)``: its element inputs
        from their formulas, then :meth:`forward`."""
        fn = self.net_inputs[j]
        values = fn(t, x, theta, *outs) if fn is not None else None
        return self.forward(j, values, arrays, params, batched, functional)

    def forward(self, j, values, arrays, params, batched: bool = False,
                functional: bool = False):
        """Mapped outputs of network ``j`` from its element inputs ``values`` (every
        ``elements`` argument concatenated) and its array inputs ``arrays[j]``, with its
        arrays ``params`` (``{"layer.array": tensor}``).  ``functional`` calls
        ``functional_call`` (traceable by ``torch.compile``), else the bound copy;
        ``batched``: ``vmap`` over the leading axis."""
        from torch.func import functional_call, vmap

        plan = self.plan.networks[j]
        inputs = []
        for inp in plan.inputs:
            if inp.kind == "array":
                inputs.append(arrays[j][inp.arg])
            else:
                v = values[..., inp.start: inp.start + inp.size]
                inputs.append(v.reshape(v.shape[:-1] + tuple(inp.shape)))
        if functional:
            module = self.modules[j]
        else:
            module = self.bound[j][0]
            for owner, name, slot in self.bound[j][1]:
                object.__setattr__(owner, name, params[slot.key])

        def call(*xs):
            result = (functional_call(module, params, xs, strict=False) if functional
                      else module(*xs))
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            picked = []
            for arg, index in plan.output_index:
                block = result[arg] if index is None else result[arg][index]
                if block.numel() != 1:
                    raise SimulationError(f"network {plan.id!r}: output {arg} has "
                                          f"{block.numel()} elements; map single elements")
                picked.append(block.reshape(()))
            return torch.stack(picked) if picked else result[0].new_zeros((0,))

        if batched:
            return vmap(call, randomness="different")(*inputs)
        return call(*inputs)

    def batched(self, j, params, arrays):
        """``forward(values) -> (E, n_outputs)``: network ``j`` applied to a batch (element
        inputs ``values`` (E, ...), array inputs ``arrays[j]`` (E, ...)) with its arrays
        ``params``.  A network that maps a batch row by row (:meth:`is_transparent`) is
        called once on the batch (:meth:`direct`); others go through :meth:`forward`
        (``vmap``)."""
        if not self.is_transparent(j):
            return lambda values: self.forward(j, values, arrays, params, batched=True,
                                               functional=True)
        return self.direct(j, params, arrays)

    def direct(self, j, params, arrays):
        """:meth:`batched` as one call of the bound copy on the batch."""
        net = self.plan.networks[j]
        module, slots = self.bound[j]
        bindings = [(owner, name, params[slot.key]) for owner, name, slot in slots]
        fixed = {i: arrays[j][inp.arg] for i, inp in enumerate(net.inputs)
                 if inp.kind == "array"}
        elements = [(i, inp.start, inp.start + inp.size, tuple(inp.shape))
                    for i, inp in enumerate(net.inputs) if inp.kind != "array"]
        n_in = len(net.inputs)
        n_out = len(net.output_index)
        whole = net.output_index == tuple((0, (i,)) for i in range(n_out))

        def forward(values):
            for owner, name, tensor in bindings:
                object.__setattr__(owner, name, tensor)
            inputs = [None] * n_in
            for i, tensor in fixed.items():
                inputs[i] = tensor
            for i, a, b, shape in elements:
                v = values[:, a:b]
                inputs[i] = v.reshape((v.shape[0],) + shape)
            result = module(*inputs)
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            first = result[0]
            if whole and first.dim() == 2 and first.shape[1] == n_out:
                return first
            picked = [result[arg].reshape(result[arg].shape[0], -1)[:, 0] if index is None
                      else result[arg][(slice(None), *index)]
                      for arg, index in net.output_index]
            return torch.stack(picked, 1) if picked else first.new_zeros((first.shape[0], 0))

        return forward

    def is_transparent(self, j: int) -> bool:
        """Whether network ``j`` maps a batch row by row: called on inputs with a leading
        batch axis, it gives what ``vmap`` over the rows gives (same shapes, values to
        1e-12).  Found once per network by a probe with random inputs and arrays; a
        network that fails the probe (or raises) is always vmapped."""
        found = self.transparent.get(j)
        if found is not None:
            return found
        net = self.plan.networks[j]
        gen = torch.Generator().manual_seed(0)
        E, dt = 3, torch.float64
        n_el = max((inp.start + inp.size for inp in net.inputs if inp.kind != "array"),
                   default=0)
        values = torch.randn((E, n_el), generator=gen, dtype=dt)
        arrays: list[dict[str, torch.Tensor]] = [{} for _ in self.plan.networks]
        for inp in net.inputs:
            if inp.kind == "array":
                shape = np.asarray(inp.data).shape[1:]
                arrays[j][inp.arg] = torch.randn((E, *shape), generator=gen, dtype=dt)
        flat = torch.rand((self.plan.n_w,), generator=gen, dtype=dt) + 0.5
        params = self.params(j, flat, 0)
        try:
            with torch.no_grad():
                ref = self.forward(j, values, arrays, params, batched=True, functional=True)
                got = self.direct(j, params, arrays)(values)
            found = (got.shape == ref.shape and bool(torch.all(torch.isfinite(ref)))
                     and bool(torch.all(torch.abs(got - ref)
                                        <= 1e-12 * torch.clamp(ref.abs(), min=1.0))))
        except Exception:   # noqa: BLE001 - any failure: keep the general path
            found = False
        self.transparent[j] = found
        return found


class rhs_networks_in_eval_mode:
    """Context: the networks inside the right-hand side (``rhs_nets``) run in eval mode
    during solves (an adaptive solver needs a deterministic right-hand side)."""

    def __init__(self, networks: Networks, rhs_nets: list[int]):
        self.modules = [m for j in rhs_nets
                        for m in (networks.modules[j], networks.bound[j][0]) if m.training]

    def __enter__(self):
        for m in self.modules:
            m.train(False)

    def __exit__(self, *exc):
        for m in self.modules:
            m.train(True)

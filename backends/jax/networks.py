"""The plan's networks bound to the executor: their arrays sliced out of the parameter
vector ``w``, their inputs read from states and parameters, their outputs mapped to
single values."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from petab_sciml.simulation.plan import SimulationError, SimulationPlan

NetArrays = list[tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]]
"""Per network: ``(params, buffers)``, nested dicts ``{layer: {array: value}}``."""


class BoundNetworks:
    """Forward functions of the plan's networks (float64) and how their inputs and
    outputs connect to the model."""

    def __init__(self, plan: SimulationPlan, input_formulas: list[Any]):
        """``input_formulas``: per network, the compiled formulas of its inputs
        (``f(t, x, theta, *outs)``, or None)."""
        from .model import make_forward

        self.plan = plan
        self._inputs = [symbol_picker(net.input_exprs, plan.groups()) or fn
                        for net, fn in zip(plan.networks, input_formulas)]
        self.forwards = [make_forward(net.network, dtype="float64")[0]
                         for net in plan.networks]
        """Eval-mode forward functions ``f(params, inputs, buffers)``."""
        self._train_forwards: dict[int, Any] = {}

    def train_forward(self, j: int) -> Any:
        """Training-mode forward function of network ``j`` (built on first use)."""
        found = self._train_forwards.get(j)
        if found is None:
            from .model import make_forward

            found = make_forward(self.plan.networks[j].network, train=True,
                                 dtype="float64")[0]
            self._train_forwards[j] = found
        return found

    def arrays(self, w: Any) -> NetArrays:
        """Per network: (params, buffers) nested dicts sliced out of ``w``."""
        out = []
        for net in self.plan.networks:
            params: dict[str, dict[str, Any]] = {}
            buffers: dict[str, dict[str, Any]] = {}
            for s in net.arrays:
                value = w[s.offset: s.offset + s.size].reshape(s.shape)
                target = params if s.ir_trainable else buffers
                target.setdefault(s.layer, {})[s.array] = value
            out.append((params, buffers))
        return out

    def outputs(self, j: int, t: Any, x: Any, theta: Any, outs: list[Any],
                arrays: list[dict[str, Any]], nets: NetArrays, key: Any = None) -> Any:
        """Outputs (mapped ids) of network ``j``; ``outs`` holds the other groups.  With a
        PRNG ``key`` the network runs in training mode (Dropout layers, batch statistics;
        updated running statistics are discarded)."""
        import jax.numpy as jnp

        plan = self.plan.networks[j]
        fn = self._inputs[j]
        values = fn(t, x, theta, *outs) if fn is not None else None
        inputs = []
        for inp in plan.inputs:
            if inp.kind == "array":
                inputs.append(arrays[j][inp.arg])
            else:
                inputs.append(values[inp.start: inp.start + inp.size].reshape(inp.shape))
        params, buffers = nets[j]
        if key is not None:
            result = self.train_forward(j)(params, tuple(inputs), jax.random.fold_in(key, j),
                                           buffers)[0]
        else:
            result = self.forwards[j](params, tuple(inputs), buffers)
        picked = []
        for arg, index in plan.output_index:
            out = result[arg]
            block = out if index is None else out[index]
            if block.size != 1:
                raise SimulationError(f"network {plan.id!r}: output {arg} "
                                      f"{'' if index is None else list(index)} has "
                                      f"{block.size} elements; map single elements")
            picked.append(block.reshape(()))
        if not picked:
            return jnp.zeros((0,), x.dtype if x is not None else theta.dtype)
        return jnp.stack(picked)


def stochastic(network: Any) -> bool:
    """Whether a network behaves differently in training mode (dropout, batch norm)."""
    from petab_sciml.catalogue import LAYERS

    for layer in network.layers.values():
        spec = LAYERS.get(layer.type)
        if spec is not None and (spec.stochastic or spec.type.startswith("BatchNorm")):
            return True
    return any("dropout" in str(n.target) for n in network.nodes)


def symbol_picker(exprs: list[Any], groups: list[Any]) -> Any:
    """``f(t, *arrays) -> values`` of ``exprs`` when each is a plain symbol of one of
    ``groups`` (a network input mapped to states or parameters, the common case), else
    None.  The values are then read with one slice or gather of the argument instead of
    the compiled formulas' element-wise reads and stack: under ``jax.vmap`` over
    experiments those become a concatenation and a transpose before the network's first
    product (and pads of every element in the gradient), at every Runge-Kutta stage."""
    import jax.numpy as jnp

    if not exprs or not all(getattr(e, "is_Symbol", False) for e in exprs):
        return None
    where = {name: (g, i) for g, group in enumerate(groups) for i, name in enumerate(group)}
    found = [where.get(e.name) for e in exprs]
    if any(f is None for f in found) or len({g for g, _ in found}) != 1:
        return None
    g = found[0][0]
    index = np.array([i for _, i in found], np.int64)
    if np.array_equal(index, np.arange(index[0], index[0] + index.size)):
        start, stop = int(index[0]), int(index[0] + index.size)

        def contiguous(t, *arrays):
            return arrays[g][..., start:stop]

        return contiguous

    def gathered(t, *arrays):
        return jnp.take(arrays[g], index, axis=-1)

    return gathered

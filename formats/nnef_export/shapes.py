"""Shapes and default values for the NNEF writer: NNEF inputs have fixed shapes, and
every value's shape is known by running the network once in PyTorch (eval mode)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from petab_sciml.catalogue import FUNCTIONS
from petab_sciml.errors import NetworkError, require
from petab_sciml.network import Network, Ref

_TENSOR_KINDS = ("tensor", "tensor|number", "tensors")
"""Catalogue parameter kinds passed positionally to the PyTorch function."""


def node_shapes(network: Network, params: Mapping[str, Mapping[str, Any]],
                input_shapes: Sequence[Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Shape of every node's value for inputs of ``input_shapes`` (torch, eval mode)."""
    torch = require("torch", "torch")
    from petab_sciml.backends.torch import BACKEND
    from petab_sciml.backends.torch.build import _python_index
    from petab_sciml.backends.torch.functions import TORCH_FUNCTIONS

    model = BACKEND.build(network)
    if params:
        BACKEND.set_parameters(model, params, strict=False)
    model.eval()
    values: dict[str, Any] = {}
    placeholders = iter(input_shapes)
    nodes = network.node_map

    def arg(v: Any) -> Any:
        if isinstance(v, Ref):
            return values[v.name]
        if isinstance(v, tuple) and v and all(isinstance(r, Ref) for r in v):
            return [values[r.name] for r in v]
        return v

    with torch.no_grad():
        for name in network.order:
            node = nodes[name]
            if node.op == "placeholder":
                values[name] = torch.zeros(tuple(next(placeholders)))
            elif node.op == "get_attr":
                values[name] = model.get_parameter(node.target) if node.target in dict(
                    model.named_parameters()) else model.get_buffer(node.target)
            elif node.op == "call_module":
                values[name] = model.get_submodule(node.target)(
                    *[arg(r) for r in node.bound["inputs"]])
            elif node.op in ("call_function", "call_method"):
                spec = FUNCTIONS[node.function]
                args, kwargs = [], {}
                for p in spec.params:
                    if p.ignored:
                        continue
                    value = arg(node.bound[p.name])
                    if p.kind == "index":
                        value = _python_index(value)
                    if p.kind in _TENSOR_KINDS:
                        args.append(value)
                    else:
                        kwargs[p.name] = value
                values[name] = TORCH_FUNCTIONS[node.function](*args, **kwargs)
    return {k: tuple(v.shape) for k, v in values.items() if hasattr(v, "shape")}


def default_input_shapes(network: Network, params: Mapping[str, Any]) -> list[list[int]]:
    """Smallest input shapes the network accepts: from the first layer reading each input
    (Linear: [1, in_features]; convolution-like: [1, C, S, ...] with the smallest S that
    runs)."""
    guesses: list[list[list[int]]] = []
    for ph in network.placeholders:
        options: list[list[int]] = []
        for node in network.nodes:
            if node.op != "call_module" or Ref(ph.name) not in node.bound["inputs"]:
                continue
            layer = network.layers[node.target]
            cfg, n = layer.config, layer.spec.spatial_dims
            if layer.type == "Linear":
                options = [[1, cfg["in_features"]]]
            elif layer.type == "Bilinear":
                index = list(node.bound["inputs"]).index(Ref(ph.name))
                options = [[1, cfg["in1_features" if index == 0 else "in2_features"]]]
            elif n is not None:
                channels = cfg.get("in_channels", cfg.get("num_features"))
                lead = [1, channels] if channels is not None else [1, 1]
                options = [lead + [s] * n for s in range(1, 65)]
            elif layer.type == "PReLU":
                options = [[1, cfg["num_parameters"]]]
            elif layer.type == "LayerNorm":
                shape = cfg["normalized_shape"]
                options = [[1, *([shape] if isinstance(shape, int) else shape)]]
            break
        if not options:
            raise NetworkError("cannot tell the input shapes of this network; pass "
                               "input_shapes", file=network.source, entry=f"input {ph.name!r}")
        guesses.append(options)
    for combo in itertools.islice(itertools.product(*guesses), 4096):
        try:
            node_shapes(network, params, combo)
        except Exception:  # noqa: BLE001 - try the next size
            continue
        return [list(s) for s in combo]
    raise NetworkError("no small input shape runs through this network; pass input_shapes",
                       file=network.source)


def default_parameters(network: Network) -> dict[str, dict[str, np.ndarray]]:
    """PyTorch's initial values (seed 0) of the network's arrays (zeros without torch)."""
    try:
        from petab_sciml.backends.torch import BACKEND

        return BACKEND.get_parameters(BACKEND.build(network))
    except Exception:  # noqa: BLE001 - torch missing: zeros
        return {g: {a: np.zeros(i.shape, i.dtype or np.float32) for a, i in arrays.items()}
                for g, arrays in network.parameter_arrays().items()}

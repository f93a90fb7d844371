"""The portable subset of the NN model YAML: what the official ``petab_sciml`` reader
(``NNModel.to_pytorch_module``) and libpetab's SciML lint both know.

The official reader builds each layer as ``torch.nn.<layer_type>(**args)`` and each
``call_function`` node as ``torch.<target>`` (``flatten``, ``cat``) or
``torch.nn.functional.<target>``; libpetab accepts only the specification's layer and
activation-function lists.  Our YAML goes further (tensor arithmetic, reshapes,
indexing, free parameters, ...).  :func:`portable_network` rewrites a network into the
portable subset where a portable spelling exists and otherwise raises, naming every node
and layer that has no portable form; :func:`portability_problems` only lists them.
"""

from __future__ import annotations

from typing import Any

from petab_sciml.catalogue import canonical_function
from petab_sciml.errors import NetworkError
from petab_sciml.network import Network
from petab_sciml.official_api import ActivationFunctions, Layers, TensorOps

__all__ = ["PORTABLE_FUNCTIONS", "PORTABLE_LAYERS", "portability_problems",
           "portable_network"]

PORTABLE_LAYERS = frozenset(m.value for m in Layers) | {
    # used by the official test suite's own networks
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "LayerNorm",
}
"""Layer types of the specification's list, plus the norm layers its test suite uses."""

PORTABLE_FUNCTIONS = frozenset(m.value for m in ActivationFunctions) | \
    frozenset(m.value for m in TensorOps)
"""Function names of the specification's lists (as ``call_function`` or method names)."""


def portability_problems(network: Network) -> list[str]:
    """One line per layer or node of ``network`` that has no portable form."""
    return _rewrite(network)[1]


def portable_network(network: Network) -> Network:
    """``network`` in the portable subset: non-spec spellings of spec functions renamed,
    activation layers (``nn.ReLU``...) written as the spec function they apply,
    constructor arguments PyTorch does not take dropped where they hold their default,
    several outputs written as one list.  Raises :class:`NetworkError` naming every node
    and layer with no portable form."""
    rewritten, problems = _rewrite(network)
    if problems:
        raise NetworkError("no portable form (the official petab_sciml reader and "
                           "libpetab know the specification's layers and functions only): "
                           + "; ".join(problems), file=network.source)
    return rewritten


def _rewrite(network: Network) -> tuple[Network, list[str]]:
    problems: list[str] = []
    layers = []
    lowered: dict[str, tuple[str, dict[str, Any]]] = {}
    for layer in network.layers.values():
        activation = _as_function_call(layer)
        if layer.type not in PORTABLE_LAYERS and activation is not None:
            lowered[layer.id] = activation
            continue
        if layer.type not in PORTABLE_LAYERS:
            problems.append(f"layer {layer.id!r} ({layer.type}) is not a specification layer")
            continue
        args: dict[str, Any] = {}
        for arg in layer.spec.args:
            if arg.name not in layer.args:
                continue
            value = layer.args[arg.name]
            if not arg.torch and value == arg.default:
                continue  # PyTorch's constructor does not take it; default, so nothing lost
            other = getattr(arg.default, "other", None)
            if not arg.torch and other is not None and value == layer.config.get(other):
                args[arg.name] = value  # e.g. norm layers' bias = affine, as the suite writes
                continue
            if not arg.torch:
                problems.append(f"layer {layer.id!r} ({layer.type}): argument {arg.name}="
                                f"{value!r} has no PyTorch constructor argument")
            args[arg.name] = value
        layers.append({"layer_id": layer.id, "layer_type": layer.type, "args": args})
    nodes = []
    for node in network.nodes:
        raw = {"name": node.name, "op": node.op, "target": node.target,
               "args": list(node.args), "kwargs": dict(node.kwargs)}
        if node.op == "call_module" and node.target in lowered:
            raw["op"], (raw["target"], raw["kwargs"]) = "call_function", lowered[node.target]
        elif node.op in ("call_function", "call_method"):
            name = _portable_name(node.op, node.target, node.function)
            if name is None:
                problems.append(f"forward node {node.name!r} ({node.op} {node.target}) is not "
                                "a specification function")
            else:
                raw["target"] = name
        elif node.op == "get_attr":
            problems.append(f"forward node {node.name!r} (get_attr {node.target}): parameters "
                            "outside layers have no portable form")
        elif node.op == "output":
            outputs = [r.name for r in node.bound["outputs"]]
            raw["args"] = [outputs] if len(outputs) > 1 else outputs
        nodes.append(raw)
    if network.free_parameters and not problems:
        problems.append("free parameters have no portable form")
    if problems:
        return network, problems
    return Network.build(network.id, network.inputs, layers, nodes,
                         source=network.source), []


def _as_function_call(layer: Any) -> tuple[str, dict[str, Any]] | None:
    """An activation layer (``nn.ReLU``, ``nn.Softplus(beta=2)``...) as the portable
    ``call_function`` that computes the same: (function name, keyword arguments that
    differ from the function's defaults); None for other layers or when the function has
    no portable spelling.  The official reader has no activation layers, but every
    specification activation function."""
    function = layer.spec.function
    if function is None:
        return None
    name = _portable_name("call_function", function, function)
    if name is None:
        return None
    kwargs = {arg.name: layer.args[arg.name] for arg in layer.spec.args
              if not arg.ignored and arg.name in layer.args
              and layer.args[arg.name] != arg.default}
    return name, kwargs


def _portable_name(op: str, target: str, function: str | None) -> str | None:
    """The spec spelling of a call target, or None."""
    if target in PORTABLE_FUNCTIONS:
        return target
    for name in PORTABLE_FUNCTIONS:
        if function is not None and canonical_function(op, name) == function:
            return name
    return None

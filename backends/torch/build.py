"""Build a ``torch.fx.GraphModule`` from a network IR, and move arrays in and out.

The module's submodules are real ``torch.nn`` layers named by layer id, so
``state_dict`` keys read ``layer1.weight``.  The forward is an fx graph compiled to Python
code once at build time; calling the module runs that generated code, with no per-call
interpretation of the IR.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.fx

from petab_sciml.arrays import check_parameters
from petab_sciml.backend_api import ParameterArrays
from petab_sciml.backends.torch.functions import TORCH_FUNCTIONS
from petab_sciml.catalogue import FUNCTIONS
from petab_sciml.errors import NetworkError
from petab_sciml.network import Network, Ref

DTYPES = {"float32": torch.float32, "float64": torch.float64}
_RESERVED = set(dir(torch.fx.GraphModule)) | {"graph", "code", "meta"}


def torch_dtype(dtype: str) -> torch.dtype:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}") from None


def _python_index(index: Any) -> Any:
    """A catalogue ``index`` value as a Python index (slices, Ellipsis)."""
    if isinstance(index, list):
        return tuple(_python_index(i) for i in index)
    if isinstance(index, Mapping):
        return slice(*index["slice"])
    if index == "...":
        return Ellipsis
    return index


def _graph_value(value: Any, env: Mapping[str, torch.fx.Node]) -> Any:
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, tuple) and value and all(isinstance(v, Ref) for v in value):
        return [env[v.name] for v in value]
    return value


def build_module(network: Network, *, dtype: str = "float32", seed: int = 0
                 ) -> torch.fx.GraphModule:
    """The trainable torch module of ``network``, PyTorch-default initialised from ``seed``."""
    root = torch.nn.Module()
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        for layer in network.layers.values():
            if layer.id in _RESERVED:
                raise NetworkError(f"layer id {layer.id!r} clashes with an attribute of "
                                   "torch.nn.Module; rename the layer", file=network.source,
                                   entry=f"layer {layer.id!r}")
            cls = getattr(torch.nn, layer.type)
            root.add_module(layer.id, cls(**layer.spec.torch_kwargs(layer.config)))
        for param in network.free_parameters.values():
            if not hasattr(root, param.group):
                root.add_module(param.group, torch.nn.Module())
            holder = getattr(root, param.group)
            tensor = torch.zeros(param.shape)
            if param.trainable:
                holder.register_parameter(param.array, torch.nn.Parameter(tensor))
            else:
                holder.register_buffer(param.array, tensor)
    finally:
        torch.random.set_rng_state(generator_state)

    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    nodes = network.node_map
    for name in network.order:
        node = nodes[name]
        if node.op == "placeholder":
            env[name] = graph.placeholder(_identifier(node.name))
        elif node.op == "call_module":
            env[name] = graph.call_module(node.target, tuple(
                tuple(env[r.name] for r in x) if isinstance(x, tuple) else env[x.name]
                for x in node.bound["inputs"]))
        elif node.op in ("call_function", "call_method"):
            env[name] = _call_function(graph, node.function, node.bound, env)
        elif node.op == "get_attr":
            env[name] = graph.get_attr(f"{node.bound['group']}.{node.bound['array']}")
        else:
            outputs = [env[r.name] for r in node.bound["outputs"]]
            graph.output(outputs[0] if len(outputs) == 1 else tuple(outputs))
    module = torch.fx.GraphModule(root, graph, class_name=_identifier(network.id))
    # GraphModule copies only what the graph uses; keep every layer (an unused layer, or
    # one read only through get_attr) so state_dict holds all of the network's arrays.
    for child_name, child in root.named_children():
        if not hasattr(module, child_name):
            module.add_module(child_name, child)
        elif getattr(module, child_name) is not child:
            setattr(module, child_name, child)
    module.meta["petab_sciml_network"] = network
    module.meta["petab_sciml_dtype"] = torch_dtype(dtype)
    return module.to(torch_dtype(dtype))


def _call_function(graph: torch.fx.Graph, function: str, bound: Mapping[str, Any],
                   env: Mapping[str, torch.fx.Node]) -> torch.fx.Node:
    spec = FUNCTIONS[function]
    args, kwargs = [], {}
    for param in spec.params:
        if param.ignored:
            continue
        value = _graph_value(bound[param.name], env)
        if param.kind == "index":
            value = _python_index(value)
        if param.kind in ("tensor", "tensor|number", "tensors"):
            args.append(value)
        else:
            kwargs[param.name] = value
    return graph.call_function(TORCH_FUNCTIONS[function], tuple(args), kwargs)


def _identifier(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"_{out}"


def network_of(module: torch.nn.Module) -> Network:
    """The IR a module was built from."""
    try:
        return module.meta["petab_sciml_network"]
    except (AttributeError, KeyError):
        raise TypeError("not a module built by petab_sciml.backends.torch") from None


def load_parameters(module: torch.nn.Module, params: ParameterArrays, *,
                    strict: bool = True) -> None:
    """Copy ``{group: {array: value}}`` into the module (checked against the IR)."""
    network = network_of(module)
    check_parameters(network, params, strict=strict)
    state = dict(module.named_parameters()) | dict(module.named_buffers())
    with torch.no_grad():
        for group, arrays in params.items():
            for array, value in arrays.items():
                target = state[f"{group}.{array}"]
                target.copy_(torch.as_tensor(np.asarray(value)).to(target.dtype))


def parameters_of(module: torch.nn.Module) -> dict[str, dict[str, np.ndarray]]:
    """All parameters and buffers as ``{group: {array: ndarray}}``."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, value in module.state_dict().items():
        group, _, array = key.partition(".")
        out.setdefault(group, {})[array] = value.detach().cpu().numpy().copy()
    return out


def _as_tensors(module: torch.nn.Module, inputs: Sequence[Any]) -> list[torch.Tensor]:
    dtype = _module_dtype(module)
    return [torch.as_tensor(np.asarray(x)).to(dtype) for x in inputs]


def _module_dtype(module: torch.nn.Module) -> torch.dtype:
    return module.meta.get("petab_sciml_dtype", torch.get_default_dtype())


def _outputs(result: Any) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def forward_numpy(module: torch.nn.Module, inputs: Sequence[Any], *, train: bool = False,
                  seed: int | None = None) -> tuple[np.ndarray, ...]:
    """Run the module on numpy inputs; numpy outputs."""
    module.train(train)
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        result = module(*_as_tensors(module, inputs))
    return tuple(o.detach().cpu().numpy() for o in _outputs(result))


def forward_each_numpy(module: torch.nn.Module, inputs: Sequence[Any]
                       ) -> tuple[np.ndarray, ...]:
    """The module (eval mode) at each point: inputs and outputs with a leading axis of
    points, each point evaluated alone (``torch.func.vmap``)."""
    module.train(False)
    with torch.no_grad():
        result = torch.func.vmap(lambda *xs: module(*xs))(*_as_tensors(module, inputs))
    return tuple(o.detach().cpu().numpy() for o in _outputs(result))


def vjp_numpy(module: torch.nn.Module, inputs: Sequence[Any], cotangents: Sequence[Any], *,
              train: bool = False, seed: int | None = None
              ) -> tuple[dict[str, dict[str, np.ndarray]], tuple[np.ndarray, ...]]:
    """Gradient of ``sum_k <cotangents[k], outputs[k]>`` w.r.t. every trainable array
    and every input: ``(arrays, inputs)`` (zeros where the outputs do not depend)."""
    module.train(train)
    if seed is not None:
        torch.manual_seed(seed)
    xs = [x.requires_grad_(True) for x in _as_tensors(module, inputs)]
    outputs = _outputs(module(*xs))
    if len(outputs) != len(cotangents):
        raise ValueError(f"the network gives {len(outputs)} output(s), got "
                         f"{len(cotangents)} cotangent(s)")
    total = sum((o * torch.as_tensor(np.asarray(c)).to(o.dtype)).sum()
                for o, c in zip(outputs, cotangents, strict=True))
    named = list(module.named_parameters())
    wanted = [p for _, p in named if p.requires_grad] + xs
    found = (torch.autograd.grad(total, wanted, allow_unused=True)
             if isinstance(total, torch.Tensor) and total.requires_grad else [None] * len(wanted))
    grad_of = {id(t): g for t, g in zip(wanted, found, strict=True)}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for key, param in named:   # zeros for a frozen array or one the outputs do not use
        group, _, array = key.partition(".")
        grad = grad_of.get(id(param))
        grad = grad if grad is not None else torch.zeros_like(param)
        arrays.setdefault(group, {})[array] = grad.detach().cpu().numpy().copy()
    input_grads = tuple((g if (g := grad_of.get(id(x))) is not None else torch.zeros_like(x))
                        .detach().cpu().numpy() for x in xs)
    return arrays, input_grads


def mean_forward_numpy(module: torch.nn.Module, inputs: Sequence[Any], *, passes: int,
                       seed: int = 0, chunk: int = 4096) -> tuple[np.ndarray, ...]:
    """Mean of ``passes`` training-mode forward passes, each with fresh dropout masks.

    Passes are vectorised with ``torch.func.vmap(randomness="different")`` so that every
    pass sees the inputs exactly as a single call would (batched or not).
    """
    module.train(True)
    torch.manual_seed(seed)
    tensors = _as_tensors(module, inputs)
    batched = torch.func.vmap(lambda *xs: module(*xs), randomness="different")
    totals: list[torch.Tensor] | None = None
    done = 0
    with torch.no_grad():
        while done < passes:
            n = min(chunk, passes - done)
            stacked = [x.unsqueeze(0).expand(n, *x.shape) for x in tensors]
            sums = [o.sum(0) for o in _outputs(batched(*stacked))]
            totals = sums if totals is None else [t + s for t, s in zip(totals, sums)]
            done += n
    assert totals is not None
    return tuple((t / passes).cpu().numpy() for t in totals)


def gradients_numpy(module: torch.nn.Module, inputs: Sequence[Any], *, train: bool = False,
                    seed: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Gradient of the sum of all outputs w.r.t. every trainable array."""
    module.train(train)
    if seed is not None:
        torch.manual_seed(seed)
    module.zero_grad(set_to_none=True)
    total = sum(o.sum() for o in _outputs(module(*_as_tensors(module, inputs))))
    if isinstance(total, torch.Tensor) and total.requires_grad:
        total.backward()
    # Arrays the outputs do not depend on (an unused layer) get zero gradients.
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, param in module.named_parameters():
        group, _, array = key.partition(".")
        grad = param.grad if param.grad is not None else torch.zeros_like(param)
        out.setdefault(group, {})[array] = grad.detach().cpu().numpy().copy()
    return out

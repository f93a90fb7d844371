"""The network IR as an ``equinox.Module``, and the pure, jit-once forward function.

:class:`JaxModel` holds one layer module per IR layer (:mod:`.layers`) and the free
parameter arrays; its static part is the validated :class:`~petab_sciml.network.Network`.
Parameters are exchanged as nested dicts ``{group: {array: Array}}`` whose flattened keys
``group.array`` are the PyTorch ``state_dict`` names:

* ``model.parameters()`` — the trainable arrays (what gradients are taken for),
* ``model.buffers()`` — the rest (running statistics, non-trainable free parameters).

:meth:`JaxModel.apply` is a pure function of ``(params, buffers, inputs)`` that uses only
the *structure* of ``self``; :func:`make_forward` wraps it into ``fn(params, inputs)`` that
can be jitted once (``jax.jit(fn)``) or called inside another jitted function (an ODE
right-hand side) without retracing when parameter values change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.network import Network, Ref

from .functions import FUNCTIONS
from .layer_base import LayerModule
from .layers import init_arrays, make_layer

Array = jax.Array
Nested = dict[str, dict[str, Array]]

DTYPES = ("float32", "float64")


class _Static:
    """Hashable-by-identity holder for the (unhashable) network in a static field."""

    __slots__ = ("network",)

    def __init__(self, network: Network):
        self.network = network

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and other.network is self.network

    def __hash__(self) -> int:
        return id(self.network)


def check_dtype(dtype: Any) -> str:
    name = jnp.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    # the backend's process-wide JAX settings, made before its first computation:
    # one CPU device per core (devices.py) and float64 when asked for
    from .devices import use_cpu_cores_by_default

    use_cpu_cores_by_default()
    if name == "float64" and not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)
    return name


def _int_dtype() -> Any:
    return jnp.int64 if jax.config.jax_enable_x64 else jnp.int32


def _resolve(value: Any, env: Mapping[str, Any]) -> Any:
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, tuple):
        return tuple(_resolve(v, env) for v in value)
    return value


class JaxModel(eqx.Module):
    """An IR network as an equinox module (PyTorch layout and semantics).

    ``model(*inputs, train=False, key=None)`` returns the tuple of outputs; ``run`` also
    returns the updated buffers; ``apply`` is the pure form used by jitted code.
    """

    layers: dict[str, LayerModule]
    free: dict[str, dict[str, Array]]
    static: _Static = eqx.field(static=True)
    dtype: str = eqx.field(static=True)

    # --------------------------------------------------------------- structure
    @property
    def network(self) -> Network:
        return self.static.network

    def parameters(self) -> Nested:
        """Trainable arrays, ``{group: {array: Array}}`` (PyTorch names)."""
        return self._select(True)

    def buffers(self) -> Nested:
        """Non-trainable arrays (running statistics, fixed free parameters)."""
        return self._select(False)

    def arrays(self) -> Nested:
        """All arrays (trainable and buffers)."""
        out: Nested = {}
        for group, arrays in self.network.parameter_arrays().items():
            out[group] = {name: self._get(group, name) for name in arrays}
        return out

    def _get(self, group: str, name: str) -> Array:
        if group in self.layers:
            return self.layers[group].array(name)
        return self.free[group][name]

    def _select(self, trainable: bool) -> Nested:
        out: Nested = {}
        for group, arrays in self.network.parameter_arrays().items():
            sel = {n: self._get(group, n) for n, info in arrays.items()
                   if info.trainable == trainable}
            if sel:
                out[group] = sel
        return out

    def with_arrays(self, *nested: Mapping[str, Mapping[str, Array]] | None) -> JaxModel:
        """A copy with the arrays of the given nested dicts replaced (pure; trace-time only
        work under jit)."""
        merged: dict[str, dict[str, Array]] = {}
        for tree in nested:
            for group, arrays in (tree or {}).items():
                merged.setdefault(group, {}).update(arrays)
        if not merged:
            return self
        layers = dict(self.layers)
        free = {g: dict(a) for g, a in self.free.items()}
        for group, arrays in merged.items():
            if group in layers:
                layers[group] = layers[group].with_arrays(arrays)
            else:
                free[group].update(arrays)
        return JaxModel(layers, free, self.static, self.dtype)

    # --------------------------------------------------------------- evaluation
    def run(self, inputs: Sequence[Array] | Array, *, train: bool = False,
            key: Array | None = None) -> tuple[tuple[Array, ...], Nested]:
        """Evaluate the graph; returns ``(outputs, new_buffers)``.

        ``new_buffers`` equals :meth:`buffers` except for running statistics updated in
        training mode.  ``key`` is needed in training mode when the network has dropout;
        every ``call_module`` node gets its own key (``fold_in`` of the node's position).
        """
        net = self.network
        model = self
        if not isinstance(inputs, (list, tuple)):
            inputs = (inputs,)
        if len(inputs) != len(net.inputs):
            raise ValueError(f"network {net.id!r} takes {len(net.inputs)} input(s) "
                             f"({', '.join(net.inputs)}), got {len(inputs)}")
        env: dict[str, Any] = {}
        updates: dict[str, dict[str, Array]] = {}
        nodes = net.node_map
        n_placeholder = 0
        outputs: tuple[Array, ...] = ()
        for position, name in enumerate(net.order):
            node = nodes[name]
            op = node.op
            if op == "placeholder":
                env[name] = jnp.asarray(inputs[n_placeholder])
                n_placeholder += 1
            elif op == "call_module":
                layer = model.layers[node.target]
                xs = [_resolve(r, env) for r in node.bound["inputs"]]
                sub = None
                if train and layer.stochastic:
                    if key is None:
                        raise ValueError("a PRNG key is required in training mode: layer "
                                         f"{node.target!r} is stochastic (dropout)")
                    sub = jax.random.fold_in(key, position)
                y, upd = layer.forward(*xs, train=train, key=sub)
                if upd:
                    updates.setdefault(node.target, {}).update(upd)
                    # A layer called twice sees its already-updated statistics.
                    model = model.with_arrays({node.target: upd})
                env[name] = y
            elif op in ("call_function", "call_method"):
                args = {k: _resolve(v, env) for k, v in node.bound.items()}
                env[name] = FUNCTIONS[node.function](**args)
            elif op == "get_attr":
                env[name] = model._get(node.bound["group"], node.bound["array"])
            else:  # output
                outputs = tuple(env[r.name] for r in node.bound["outputs"])
        new_buffers = self.buffers()
        for group, upd in updates.items():
            new_buffers.setdefault(group, {}).update(upd)
        return outputs, new_buffers

    def __call__(self, *inputs: Array, train: bool = False, key: Array | None = None
                 ) -> tuple[Array, ...]:
        return self.run(inputs, train=train, key=key)[0]

    def apply(self, params: Mapping, buffers: Mapping | None, inputs: Sequence[Array] | Array,
              *, train: bool = False, key: Array | None = None
              ) -> tuple[tuple[Array, ...], Nested]:
        """Pure evaluation with the given arrays: ``(outputs, new_buffers)``.

        Only the structure of ``self`` is used (its arrays are replaced by ``params`` and
        ``buffers``), so jitting a function that calls this traces once per input shape.
        """
        return self.with_arrays(params, buffers).run(inputs, train=train, key=key)

    def skeleton(self) -> JaxModel:
        """The same module with every array replaced by ``None`` (structure only), so a
        closure over it embeds no array constants in jitted code."""
        params = self.parameters()
        buffers = self.buffers()
        blank = {g: dict.fromkeys(a) for g, a in params.items()}
        for g, a in buffers.items():
            blank.setdefault(g, {}).update(dict.fromkeys(a))
        return self.with_arrays(blank)


# --------------------------------------------------------------------------- construction
def build_model(network: Network, *, dtype: str = "float32", seed: int = 0,
                arrays: Mapping[str, Mapping[str, Any]] | None = None) -> JaxModel:
    """A :class:`JaxModel` of ``network`` with PyTorch-default initial arrays (free
    parameters start at zero), optionally overridden by ``arrays`` (PyTorch layout).

    ``dtype="float64"`` switches on JAX's x64 mode (only then).
    """
    dtype = check_dtype(dtype)
    jdtype = jnp.dtype(dtype)
    spec = network.parameter_arrays()
    layers: dict[str, LayerModule] = {}
    for i, (layer_id, layer) in enumerate(network.layers.items()):
        infos = spec.get(layer_id, {})
        initial = {}
        if infos:
            initial = init_arrays(layer.type, {n: (a.shape, a.dtype) for n, a in infos.items()},
                                  np.random.default_rng([seed, i]), jdtype, _int_dtype(),
                                  config=layer.config)
        layers[layer_id] = make_layer(layer.type, layer.config, initial)
    free: dict[str, dict[str, Array]] = {}
    for p in network.free_parameters.values():
        free.setdefault(p.group, {})[p.array] = jnp.asarray(np.zeros(p.shape, jdtype))
    model = JaxModel(layers, free, _Static(network), dtype)
    if arrays:
        model = model.with_arrays(convert_arrays(model, arrays))
    return model


def convert_arrays(model: JaxModel, arrays: Mapping[str, Mapping[str, Any]], *,
                   strict: bool = False) -> Nested:
    """Check names and shapes of nested ``arrays`` against the network and convert them to
    JAX arrays of the model's dtype (fixed-dtype buffers keep their integer type).

    Unknown names and wrong shapes are errors; with ``strict`` every trainable array must
    be given (buffers are always optional).
    """
    from petab_sciml.errors import PetabSciMLError

    spec = model.network.parameter_arrays()
    jdtype = jnp.dtype(model.dtype)
    out: Nested = {}
    if not isinstance(arrays, Mapping):
        raise PetabSciMLError(f"parameters must be a mapping {{group: {{array: values}}}}, "
                              f"got {type(arrays).__name__}")
    for group, given in arrays.items():
        if group not in spec:
            raise PetabSciMLError(
                f"unknown parameter group {group!r} for network {model.network.id!r} "
                f"(known: {', '.join(spec) or 'none'})", entry=str(group))
        if not isinstance(given, Mapping):
            raise PetabSciMLError(f"parameters of {group!r} must be a mapping "
                                  f"{{array: values}}", entry=str(group))
        for name, value in given.items():
            if name not in spec[group]:
                raise PetabSciMLError(
                    f"unknown array {name!r} of {group!r} (known: "
                    f"{', '.join(spec[group])})", entry=f"{group}.{name}")
            info = spec[group][name]
            arr = _to_numpy(value)
            if tuple(arr.shape) != tuple(info.shape):
                raise PetabSciMLError(
                    f"shape mismatch: expected {tuple(info.shape)} (PyTorch layout), got "
                    f"{tuple(arr.shape)}", entry=f"{group}.{name}")
            target = np.dtype(_int_dtype()) if info.dtype else jdtype
            out.setdefault(group, {})[name] = jnp.asarray(arr.astype(target, copy=False))
    if strict:
        missing = [f"{g}.{n}" for g, arrs in spec.items() for n, info in arrs.items()
                   if info.trainable and n not in out.get(g, {})]
        if missing:
            raise PetabSciMLError(f"missing trainable parameter array(s): "
                                  f"{', '.join(missing)}", entry=missing[0])
    return out


def _to_numpy(value: Any) -> Any:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)


# --------------------------------------------------------------------------- pure forward
def make_forward(network: Network | JaxModel, *, train: bool = False, dtype: str = "float32",
                 seed: int = 0) -> tuple[Callable[..., Any], Nested]:
    """A pure forward function and the initial trainable parameters.

    Eval mode: ``fn(params, inputs, buffers=None) -> outputs`` (a tuple, one array per
    network output).  Training mode: ``fn(params, inputs, key=None, buffers=None) ->
    (outputs, new_buffers)``.  ``inputs`` is a tuple with one array per network input (a
    bare array for a single-input network).  ``params`` is the nested dict of trainable
    arrays; ``buffers`` defaults to the model's buffers (closed over as constants — pass
    them to vary them).  ``fn`` is not jitted: ``jax.jit(fn)`` compiles it once per input
    shape, and it can be called inside another jitted function (an ODE right-hand side).
    ``network`` may also be a :class:`JaxModel`, whose arrays are then used.
    """
    model = network if isinstance(network, JaxModel) else build_model(network, dtype=dtype,
                                                                      seed=seed)
    skeleton = model.skeleton()
    default_buffers = model.buffers()

    if train:
        def forward_train(params, inputs, key=None, buffers=None):
            b = default_buffers if buffers is None else buffers
            return skeleton.apply(params, b, inputs, train=True, key=key)
        return forward_train, model.parameters()

    def forward(params, inputs, buffers=None):
        b = default_buffers if buffers is None else buffers
        return skeleton.apply(params, b, inputs, train=False)[0]
    return forward, model.parameters()

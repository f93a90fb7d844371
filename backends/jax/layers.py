"""One ``equinox.Module`` per catalogue layer type, in PyTorch layout and semantics.

The layer modules share :class:`~.layer_base.LayerModule`; families with more than a few
types live in their own modules (:mod:`.convolution`, :mod:`.pooling`,
:mod:`.normalization`, :mod:`.recurrent`), the rest here.  :func:`make_layer` builds the
module of any catalogue layer type, :func:`init_arrays` its PyTorch-default arrays.

Argument names and defaults come from :mod:`petab_sciml.catalogue` (``Layer.config`` is
already resolved); the layer modules only turn them into arrays maths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.catalogue import LAYERS, RECURRENT_GATES

from . import ops
from .convolution import make_conv
from .functions import FUNCTIONS
from .layer_base import Array, LayerModule, layer_family, static_field
from .normalization import NORM_FAMILIES, make_norm
from .pooling import POOL_FAMILIES, make_pool
from .recurrent import make_recurrent


# --------------------------------------------------------------------------- dense
class Linear(LayerModule):
    weight: Array
    bias: Array | None
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x: Array) -> Array:
        return ops.linear(x, self.weight, self.bias)


class Bilinear(LayerModule):
    weight: Array
    bias: Array | None
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x1: Array, x2: Array) -> Array:
        return ops.bilinear(x1, x2, self.weight, self.bias)


class Flatten(LayerModule):
    start_dim: int = static_field()
    end_dim: int = static_field()

    def apply(self, x: Array) -> Array:
        return ops.flatten(x, self.start_dim, self.end_dim)


# --------------------------------------------------------------------------- dropout
class Dropout(LayerModule):
    """Dropout, Dropout1d/2d/3d (channel-wise) and AlphaDropout, with PyTorch's masks.

    Element-wise masks differ for every element (hence every sample); channel-wise masks
    are drawn per (sample, channel).  Eval mode, or ``p == 0``, is the identity.
    """

    p: float = static_field()
    kind: str = static_field()  # "element", "1d", "2d", "3d", "alpha"
    stochastic: ClassVar[bool] = True

    _ALPHA: ClassVar[float] = 1.7580993408473766  # PyTorch's alpha_dropout constant

    def forward(self, x: Array, train: bool = False, key: Array | None = None):
        if not train or self.p == 0:
            return x, {}
        if self.p == 1:
            return x * jnp.zeros((), x.dtype), {}
        if key is None:
            raise ValueError("dropout in training mode needs a PRNG key")
        keep = 1.0 - self.p
        if self.kind == "alpha":
            mask = jax.random.bernoulli(key, keep, x.shape).astype(x.dtype)
            a = 1.0 / math.sqrt((self._ALPHA ** 2 * self.p + 1) * keep)
            b = (mask - 1) * (self._ALPHA * a) + self._ALPHA * a * self.p
            return x * (mask * a) + b, {}
        if self.kind == "element":
            mask = jax.random.bernoulli(key, keep, x.shape).astype(x.dtype)
            return x * (mask / keep), {}
        # Channel-wise ("feature") dropout, with PyTorch's handling of unbatched inputs.
        unbatched = {"1d": 2, "2d": None, "3d": 4}[self.kind]
        if self.kind == "1d":
            ops.check_rank(x, (2, 3), "Dropout1d")
        if x.ndim == unbatched:
            return self.forward(x[None], train, key)[0][0], {}
        if x.ndim < 2:
            raise ValueError(f"channel-wise dropout needs at least 2 dimensions, got {x.ndim}")
        shape = x.shape[:2] + (1,) * (x.ndim - 2)
        mask = jax.random.bernoulli(key, keep, shape).astype(x.dtype)
        return x * (mask / keep), {}


# --------------------------------------------------------------------------- activations
class PReLU(LayerModule):
    """``torch.nn.PReLU``: ``x`` where positive, else ``weight * x``, one weight per
    channel (axis 1; inputs of rank < 2 have one channel) or one weight for all."""

    weight: Array
    array_names: ClassVar[tuple[str, ...]] = ("weight",)

    def apply(self, x: Array) -> Array:
        n = self.weight.shape[0]
        if n == 1:
            slope = self.weight.reshape(())
        else:
            channels = x.shape[1] if x.ndim >= 2 else 1
            if channels != n:
                raise ValueError(f"PReLU: mismatch of parameter numbers and input channel "
                                 f"size. Found parameter numbers = {n} and channel size = "
                                 f"{channels}")
            slope = self.weight.reshape((n,) + (1,) * (x.ndim - 2))
        return jnp.where(x > 0, x, slope * x)


class FunctionLayer(LayerModule):
    """An activation module (``nn.ReLU``, ``nn.LeakyReLU(0.2)``...): the catalogue
    function it applies, with the layer's arguments."""

    function: str = static_field()
    kwargs: tuple[tuple[str, Any], ...] = static_field()

    def apply(self, x: Array) -> Array:
        return FUNCTIONS[self.function](input=x, **dict(self.kwargs))


# --------------------------------------------------------------------------- factory
def make_layer(layer_type: str, cfg: Mapping[str, Any], arrays: Mapping[str, Array]
               ) -> LayerModule:
    """The module of a layer of catalogue type ``layer_type`` with resolved arguments
    ``cfg`` and parameter ``arrays`` (PyTorch names and layout)."""
    family, n = layer_family(layer_type)
    a = {name: arrays.get(name) for name in ("weight", "bias")}
    if family == "Linear":
        return Linear(**a)
    if family == "Bilinear":
        return Bilinear(**a)
    if family == "Flatten":
        return Flatten(start_dim=cfg["start_dim"], end_dim=cfg["end_dim"])
    if family in ("Dropout", "AlphaDropout"):
        kind = "alpha" if family == "AlphaDropout" else (f"{n}d" if n else "element")
        return Dropout(p=float(cfg["p"]), kind=kind)
    if family in ("Conv", "ConvTranspose"):
        return make_conv(family, n, cfg, arrays)
    if family in POOL_FAMILIES:
        return make_pool(family, n, cfg)
    if family in NORM_FAMILIES:
        return make_norm(family, n, cfg, arrays)
    if family == "PReLU":
        return PReLU(weight=arrays.get("weight"))
    if family in RECURRENT_GATES:
        return make_recurrent(layer_type, family, cfg, arrays)
    function = LAYERS[layer_type].function
    if function is not None:
        ignored = {a.name for a in LAYERS[layer_type].args if a.ignored}
        return FunctionLayer(function=function, kwargs=tuple(
            (k, v) for k, v in cfg.items() if k not in ignored))
    raise NotImplementedError(f"the JAX backend has no implementation of layer type "
                              f"{layer_type!r}")


# --------------------------------------------------------------------------- initialisation
_NORMS = ("BatchNorm", "InstanceNorm", "LayerNorm")


def init_arrays(layer_type: str, shapes: Mapping[str, tuple[tuple[int, ...], str | None]],
                rng: np.random.Generator, dtype: Any, int_dtype: Any,
                config: Mapping[str, Any] | None = None) -> dict[str, Array]:
    """PyTorch's default initial values of a layer's arrays.

    ``shapes`` maps array names to ``(shape, fixed dtype or None)``.  Weights and biases of
    Linear/Conv/ConvTranspose are U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with PyTorch's fan_in
    (``weight.shape[1] * prod(kernel)``), Bilinear uses 1/sqrt(in1_features), norms start
    at weight 1, bias 0, running mean 0, running variance 1, no batches tracked.  PReLU's
    weight is its ``init`` argument (from the resolved layer ``config``; the catalogue
    default without it).  Values are drawn with numpy (eager JAX random numbers would
    compile a kernel per shape).
    """
    family, _ = layer_family(layer_type)
    out: dict[str, Array] = {}
    if family in RECURRENT_GATES:  # every array U(-1/sqrt(hidden), 1/sqrt(hidden))
        bound = 1.0 / math.sqrt((config or {})["hidden_size"])
        return {name: jnp.asarray(rng.uniform(-bound, bound, shape).astype(dtype))
                for name, (shape, _) in shapes.items()}
    if family == "PReLU":
        default = next(a.default for a in LAYERS["PReLU"].args if a.name == "init")
        init = (config or {}).get("init", default)
        return {name: jnp.asarray(np.full(shape, init, dtype))
                for name, (shape, _) in shapes.items()}
    if family in _NORMS:
        for name, (shape, fixed) in shapes.items():
            if fixed is not None:
                out[name] = jnp.asarray(np.zeros(shape, int_dtype))
            elif name in ("weight", "running_var"):
                out[name] = jnp.asarray(np.ones(shape, dtype))
            else:
                out[name] = jnp.asarray(np.zeros(shape, dtype))
        return out
    wshape = shapes["weight"][0]
    if family == "Bilinear":
        fan_in = wshape[1]
    else:
        fan_in = wshape[1] * int(np.prod(wshape[2:], dtype=np.int64))
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    for name, (shape, _) in shapes.items():
        out[name] = jnp.asarray(rng.uniform(-bound, bound, shape).astype(dtype))
    return out

"""One ``equinox.Module`` per catalogue layer type, in PyTorch layout and semantics.

A layer module holds its parameter arrays as fields named like the PyTorch ``state_dict``
entries (``weight``, ``bias``, ``running_mean``, ...; ``None`` where the layer has no such
array) and its resolved catalogue arguments as static fields.  ``forward(*xs, train, key)``
returns ``(y, updates)``, where ``updates`` maps buffer names to their new values (BatchNorm
running statistics in training mode) — state is returned, never mutated.  Calling the
module returns ``y`` only.

Argument names and defaults come from :mod:`petab_sciml.catalogue` (``Layer.config`` is
already resolved); this module only turns them into arrays maths.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.catalogue import LAYERS, RECURRENT_GATES, as_tuple

from . import ops

Array = jax.Array


class LayerModule(eqx.Module):
    """Base class: ``forward`` gives ``(output, buffer updates)``; ``__call__`` the output."""

    array_names: ClassVar[tuple[str, ...]] = ()
    stochastic: ClassVar[bool] = False

    def forward(self, *xs: Array, train: bool = False, key: Array | None = None
                ) -> tuple[Array, dict[str, Array]]:
        return self.apply(*xs), {}

    def apply(self, *xs: Array) -> Array:  # pragma: no cover - overridden
        raise NotImplementedError

    def __call__(self, *xs: Array, train: bool = False, key: Array | None = None) -> Array:
        return self.forward(*xs, train=train, key=key)[0]

    def arrays(self) -> dict[str, Array]:
        """The arrays this layer has (PyTorch ``state_dict`` names)."""
        return {n: getattr(self, n) for n in self.array_names if getattr(self, n) is not None}

    def array(self, name: str) -> Array:
        """One array by its PyTorch name."""
        return getattr(self, name)

    def with_arrays(self, arrays: Mapping[str, Array]) -> LayerModule:
        """A copy with the given arrays replaced (a trace-time operation under jit)."""
        return dataclasses.replace(self, **arrays) if arrays else self


def _static(**kw: Any) -> Any:
    return eqx.field(static=True, **kw)


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
    start_dim: int = _static()
    end_dim: int = _static()

    def apply(self, x: Array) -> Array:
        return ops.flatten(x, self.start_dim, self.end_dim)


# --------------------------------------------------------------------------- dropout
class Dropout(LayerModule):
    """Dropout, Dropout1d/2d/3d (channel-wise) and AlphaDropout, with PyTorch's masks.

    Element-wise masks differ for every element (hence every sample); channel-wise masks
    are drawn per (sample, channel).  Eval mode, or ``p == 0``, is the identity.
    """

    p: float = _static()
    kind: str = _static()  # "element", "1d", "2d", "3d", "alpha"
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


# --------------------------------------------------------------------------- convolution
class Conv(LayerModule):
    weight: Array
    bias: Array | None
    stride: tuple[int, ...] = _static()
    padding: tuple[tuple[int, int], ...] = _static()
    dilation: tuple[int, ...] = _static()
    groups: int = _static()
    padding_mode: str = _static()
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x: Array) -> Array:
        n = len(self.stride)
        ops.check_rank(x, (n + 1, n + 2), f"Conv{n}d")
        return ops.batched(ops.conv, x, n + 1, self.weight, self.bias, stride=self.stride,
                           padding=self.padding, dilation=self.dilation, groups=self.groups,
                           padding_mode=self.padding_mode)


class ConvTranspose(LayerModule):
    weight: Array
    bias: Array | None
    stride: tuple[int, ...] = _static()
    padding: tuple[int, ...] = _static()
    output_padding: tuple[int, ...] = _static()
    dilation: tuple[int, ...] = _static()
    groups: int = _static()
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x: Array) -> Array:
        n = len(self.stride)
        ops.check_rank(x, (n + 1, n + 2), f"ConvTranspose{n}d")
        return ops.batched(ops.conv_transpose, x, n + 1, self.weight, self.bias,
                           stride=self.stride, padding=self.padding,
                           output_padding=self.output_padding, dilation=self.dilation,
                           groups=self.groups)


# --------------------------------------------------------------------------- pooling
class MaxPool(LayerModule):
    kernel_size: tuple[int, ...] = _static()
    stride: tuple[int, ...] = _static()
    padding: tuple[int, ...] = _static()
    dilation: tuple[int, ...] = _static()
    ceil_mode: bool = _static()

    def apply(self, x: Array) -> Array:
        n = len(self.kernel_size)
        what = f"MaxPool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        return ops.batched(ops.max_pool, x, n + 1, self.kernel_size, self.stride, self.padding,
                           self.dilation, self.ceil_mode, what)


class AvgPool(LayerModule):
    kernel_size: tuple[int, ...] = _static()
    stride: tuple[int, ...] = _static()
    padding: tuple[int, ...] = _static()
    ceil_mode: bool = _static()
    count_include_pad: bool = _static()
    divisor_override: int | None = _static()

    def apply(self, x: Array) -> Array:
        n = len(self.kernel_size)
        what = f"AvgPool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        return ops.batched(ops.avg_pool, x, n + 1, self.kernel_size, self.stride, self.padding,
                           self.ceil_mode, self.count_include_pad, self.divisor_override, what)


class LPPool(LayerModule):
    norm_type: float = _static()
    kernel_size: tuple[int, ...] = _static()
    stride: tuple[int, ...] = _static()
    ceil_mode: bool = _static()

    def apply(self, x: Array) -> Array:
        n = len(self.kernel_size)
        what = f"LPPool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        return ops.batched(ops.lp_pool, x, n + 1, self.norm_type, self.kernel_size,
                           self.stride, self.ceil_mode, what)


class AdaptivePool(LayerModule):
    output_size: tuple[int | None, ...] = _static()
    mode: str = _static()  # "max" or "avg"

    def apply(self, x: Array) -> Array:
        n = len(self.output_size)
        what = f"Adaptive{self.mode.capitalize()}Pool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        spatial = x.shape[-n:]
        size = tuple(s if o is None else o for s, o in zip(spatial, self.output_size))
        fn = ops.adaptive_max_pool if self.mode == "max" else ops.adaptive_avg_pool
        return ops.batched(fn, x, n + 1, size)


# --------------------------------------------------------------------------- normalisation
class _Norm(LayerModule):
    weight: Array | None
    bias: Array | None
    running_mean: Array | None
    running_var: Array | None
    num_batches_tracked: Array | None
    spatial_dims: int = _static()
    eps: float = _static()
    momentum: float | None = _static()
    track_running_stats: bool = _static()
    array_names: ClassVar[tuple[str, ...]] = (
        "weight", "bias", "running_mean", "running_var", "num_batches_tracked")

    def _affine(self, y: Array) -> Array:
        if self.weight is None:
            return y
        shape = (1, -1) + (1,) * (y.ndim - 2)
        return y * self.weight.reshape(shape) + self.bias.reshape(shape)


class BatchNorm(_Norm):
    """``torch.nn.BatchNormNd``: batch statistics in training mode (or without running
    statistics), running statistics in eval mode; running statistics updated like PyTorch
    (unbiased variance, ``momentum=None`` as the cumulative average)."""

    def forward(self, x: Array, train: bool = False, key: Array | None = None):
        n = self.spatial_dims
        ranks = (2, 3) if n == 1 else (n + 2,)
        ops.check_rank(x, ranks, f"BatchNorm{n}d")
        use_batch_stats = train or not self.track_running_stats
        shape = (1, -1) + (1,) * (x.ndim - 2)
        updates: dict[str, Array] = {}
        if use_batch_stats:
            axes = (0, *range(2, x.ndim))
            count = math.prod(x.shape[a] for a in axes)
            if count == 1:
                raise ValueError(f"Expected more than 1 value per channel when training, got "
                                 f"input size {tuple(x.shape)}")
            mean = jnp.mean(x, axis=axes)
            var = jnp.mean(jnp.square(x - mean.reshape(shape)), axis=axes)
            if train and self.track_running_stats:
                tracked = self.num_batches_tracked + 1
                if self.momentum is None:
                    factor = 1.0 / tracked.astype(x.dtype)
                else:
                    factor = self.momentum
                unbiased = var * (count / (count - 1))
                updates = {
                    "running_mean": (1 - factor) * self.running_mean + factor * mean,
                    "running_var": (1 - factor) * self.running_var + factor * unbiased,
                    "num_batches_tracked": tracked,
                }
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean.reshape(shape)) * jax.lax.rsqrt(var.reshape(shape) + self.eps)
        return self._affine(y), updates


class InstanceNorm(_Norm):
    """``torch.nn.InstanceNormNd``: per-sample, per-channel statistics; with
    ``track_running_stats`` the running statistics are the batch mean of the instance
    statistics (``momentum=None`` leaves them unchanged, as in PyTorch) and are used in
    eval mode.  ``num_batches_tracked`` is never incremented (as in PyTorch)."""

    def forward(self, x: Array, train: bool = False, key: Array | None = None):
        n = self.spatial_dims
        ops.check_rank(x, (n + 1, n + 2), f"InstanceNorm{n}d")
        if x.ndim == n + 1:
            y, updates = self.forward(x[None], train, key)
            return y[0], updates
        use_input_stats = train or not self.track_running_stats
        axes = tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * n
        updates: dict[str, Array] = {}
        if use_input_stats:
            count = math.prod(x.shape[2:])
            if count == 1:
                raise ValueError(f"Expected more than 1 spatial element when training, got "
                                 f"input size {tuple(x.shape)}")
            mean = jnp.mean(x, axis=axes, keepdims=True)
            var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
            y = (x - mean) * jax.lax.rsqrt(var + self.eps)
            if self.track_running_stats:
                m = 0.0 if self.momentum is None else self.momentum
                inst_mean = mean.reshape(x.shape[:2]).mean(axis=0)
                inst_var = (var.reshape(x.shape[:2]) * (count / (count - 1))).mean(axis=0)
                updates = {
                    "running_mean": (1 - m) * self.running_mean + m * inst_mean,
                    "running_var": (1 - m) * self.running_var + m * inst_var,
                }
        else:
            y = ((x - self.running_mean.reshape(shape))
                 * jax.lax.rsqrt(self.running_var.reshape(shape) + self.eps))
        return self._affine(y), updates


class LayerNorm(LayerModule):
    weight: Array | None
    bias: Array | None
    normalized_shape: tuple[int, ...] = _static()
    eps: float = _static()
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x: Array) -> Array:
        k = len(self.normalized_shape)
        if x.ndim < k or tuple(x.shape[x.ndim - k:]) != self.normalized_shape:
            raise ValueError(f"LayerNorm: expected an input whose trailing dimensions are "
                             f"{list(self.normalized_shape)}, got shape {tuple(x.shape)}")
        axes = tuple(range(x.ndim - k, x.ndim))
        mean = jnp.mean(x, axis=axes, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


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


class LocalResponseNorm(LayerModule):
    """``torch.nn.LocalResponseNorm``: ``x / (k + alpha * mean of x**2 over the channel
    window [c - size//2, c + (size-1)//2])**beta``, zero-padded at the ends (PyTorch's
    window; ONNX's LRN centres even windows one channel later)."""

    size: int = _static()
    alpha: float = _static()
    beta: float = _static()
    k: float = _static()

    def apply(self, x: Array) -> Array:
        if x.ndim < 3:
            raise ValueError(f"Expected 3D or higher dimensionality input (got {x.ndim} "
                             "dimensions)")
        sq = jnp.square(x)
        pads = [(0, 0)] * x.ndim
        pads[1] = (self.size // 2, (self.size - 1) // 2)
        sq = jnp.pad(sq, pads)
        channels = x.shape[1]
        total = sq[:, :channels]
        for j in range(1, self.size):
            total = total + sq[:, j:j + channels]
        return x / jnp.power(total * (self.alpha / self.size) + self.k, self.beta)


class FunctionLayer(LayerModule):
    """An activation module (``nn.ReLU``, ``nn.LeakyReLU(0.2)``...): the catalogue
    function it applies, with the layer's arguments."""

    function: str = _static()
    kwargs: tuple[tuple[str, Any], ...] = _static()

    def apply(self, x: Array) -> Array:
        from .functions import FUNCTIONS

        return FUNCTIONS[self.function](input=x, **dict(self.kwargs))


# --------------------------------------------------------------------------- recurrent
class Recurrent(LayerModule):
    """``torch.nn.RNN``, ``LSTM`` and ``GRU``: PyTorch's gate order and equations, arrays
    by PyTorch name (``weight_ih_l0``, ``bias_hh_l1_reverse``...), inputs ``(L, N, H_in)``
    (``(N, L, H_in)`` with ``batch_first``, ``(L, H_in)`` unbatched), optional initial
    state; returns ``(output, h_n)`` (LSTM: ``(output, (h_n, c_n))``).  Dropout between
    layers in training mode (fresh masks, as PyTorch draws them)."""

    params: dict[str, Array | None]
    mode: str = _static()  # "RNN", "LSTM", "GRU"
    nonlinearity: str = _static()
    hidden_size: int = _static()
    proj_size: int = _static()
    num_layers: int = _static()
    bidirectional: bool = _static()
    batch_first: bool = _static()
    dropout: float = _static()

    @property
    def stochastic(self) -> bool:  # type: ignore[override]
        return self.dropout > 0 and self.num_layers > 1

    def arrays(self) -> dict[str, Array]:
        return {n: a for n, a in self.params.items() if a is not None}

    def array(self, name: str) -> Array:
        return self.params[name]

    def with_arrays(self, arrays: Mapping[str, Array]) -> LayerModule:
        if not arrays:
            return self
        return dataclasses.replace(self, params={**self.params, **arrays})

    def _cell(self, k: int, sfx: str):
        p = self.params
        w_hh = p[f"weight_hh_l{k}{sfx}"]
        b_hh = p.get(f"bias_hh_l{k}{sfx}")
        w_hr = p.get(f"weight_hr_l{k}{sfx}")

        def hidden_part(h):
            g = h @ w_hh.T
            return g if b_hh is None else g + b_hh

        if self.mode == "LSTM":
            def step(carry, xw):
                h, c = carry
                i, f, g, o = jnp.split(xw + hidden_part(h), 4, axis=-1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                if w_hr is not None:
                    h = h @ w_hr.T
                return (h, c), h
        elif self.mode == "GRU":
            def step(h, xw):
                xr, xz, xn = jnp.split(xw, 3, axis=-1)
                hr, hz, hn = jnp.split(hidden_part(h), 3, axis=-1)
                r = jax.nn.sigmoid(xr + hr)
                z = jax.nn.sigmoid(xz + hz)
                n = jnp.tanh(xn + r * hn)
                h = (1 - z) * n + z * h
                return h, h
        else:
            act = jnp.tanh if self.nonlinearity == "tanh" else jax.nn.relu

            def step(h, xw):
                h = act(xw + hidden_part(h))
                return h, h
        return step

    def forward(self, x: Array, hx: Any = None, train: bool = False,
                key: Array | None = None):
        what = self.mode
        ops.check_rank(x, (2, 3), what)
        unbatched = x.ndim == 2
        if unbatched:
            x = x[:, None]
            if hx is not None:
                hx = tuple(h[:, None] for h in hx) if self.mode == "LSTM" else hx[:, None]
        elif self.batch_first:
            x = jnp.swapaxes(x, 0, 1)
        n_dir = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        batch = x.shape[1]
        if hx is None:
            h0 = jnp.zeros((self.num_layers * n_dir, batch, out_size), x.dtype)
            c0 = jnp.zeros((self.num_layers * n_dir, batch, self.hidden_size), x.dtype)
        elif self.mode == "LSTM":
            h0, c0 = hx
        else:
            h0, c0 = hx, None
        expected = (self.num_layers * n_dir, batch, out_size)
        if tuple(h0.shape) != expected:
            raise ValueError(f"{what}: expected hidden size {expected}, got {tuple(h0.shape)}")
        layer_input = x
        h_n, c_n = [], []
        for k in range(self.num_layers):
            outs = []
            for d in range(n_dir):
                sfx = "_reverse" if d else ""
                w_ih = self.params[f"weight_ih_l{k}{sfx}"]
                b_ih = self.params.get(f"bias_ih_l{k}{sfx}")
                seq = layer_input if d == 0 else jnp.flip(layer_input, 0)
                xw = seq @ w_ih.T
                if b_ih is not None:
                    xw = xw + b_ih
                index = k * n_dir + d
                init = (h0[index], c0[index]) if self.mode == "LSTM" else h0[index]
                carry, ys = jax.lax.scan(self._cell(k, sfx), init, xw)
                outs.append(ys if d == 0 else jnp.flip(ys, 0))
                if self.mode == "LSTM":
                    h_n.append(carry[0])
                    c_n.append(carry[1])
                else:
                    h_n.append(carry)
            layer_input = outs[0] if n_dir == 1 else jnp.concatenate(outs, axis=-1)
            if train and self.dropout > 0 and k < self.num_layers - 1:
                if key is None:
                    raise ValueError("dropout in training mode needs a PRNG key")
                keep = 1.0 - self.dropout
                mask = jax.random.bernoulli(jax.random.fold_in(key, k), keep,
                                            layer_input.shape).astype(x.dtype)
                layer_input = layer_input * mask / keep if keep > 0 else layer_input * 0
        output = layer_input
        hn = jnp.stack(h_n)
        cn = jnp.stack(c_n) if self.mode == "LSTM" else None
        if unbatched:
            output, hn = output[:, 0], hn[:, 0]
            cn = None if cn is None else cn[:, 0]
        elif self.batch_first:
            output = jnp.swapaxes(output, 0, 1)
        result = (output, (hn, cn)) if self.mode == "LSTM" else (output, hn)
        return result, {}


# --------------------------------------------------------------------------- factory
def _family(layer_type: str) -> tuple[str, int | None]:
    """``("Conv", 2)`` for ``Conv2d``; ``(type, None)`` for types without a dimension."""
    if layer_type[-2:] in ("1d", "2d", "3d"):
        return layer_type[:-2], int(layer_type[-2])
    return layer_type, None


def _conv_padding(cfg: Mapping[str, Any], n: int) -> tuple[tuple[int, int], ...]:
    pad = cfg["padding"]
    if pad == "valid":
        return ((0, 0),) * n
    if pad == "same":
        if any(s != 1 for s in as_tuple(cfg["stride"], n)):
            raise ValueError("padding='same' is not supported for strided convolutions")
        return tuple(ops.same_padding(as_tuple(cfg["kernel_size"], n),
                                      as_tuple(cfg["dilation"], n)))
    return tuple((p, p) for p in as_tuple(pad, n))


def make_layer(layer_type: str, cfg: Mapping[str, Any], arrays: Mapping[str, Array]
               ) -> LayerModule:
    """The module of a layer of catalogue type ``layer_type`` with resolved arguments
    ``cfg`` and parameter ``arrays`` (PyTorch names and layout)."""
    family, n = _family(layer_type)
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
    if family == "Conv":
        return Conv(**a, stride=as_tuple(cfg["stride"], n), padding=_conv_padding(cfg, n),
                    dilation=as_tuple(cfg["dilation"], n), groups=cfg["groups"],
                    padding_mode=cfg["padding_mode"])
    if family == "ConvTranspose":
        return ConvTranspose(**a, stride=as_tuple(cfg["stride"], n),
                             padding=as_tuple(cfg["padding"], n),
                             output_padding=as_tuple(cfg["output_padding"], n),
                             dilation=as_tuple(cfg["dilation"], n), groups=cfg["groups"])
    if family in ("MaxPool", "AvgPool", "LPPool"):
        kernel = as_tuple(cfg["kernel_size"], n)
        stride = kernel if cfg["stride"] is None else as_tuple(cfg["stride"], n)
        if family == "MaxPool":
            return MaxPool(kernel_size=kernel, stride=stride, padding=as_tuple(cfg["padding"], n),
                           dilation=as_tuple(cfg["dilation"], n), ceil_mode=cfg["ceil_mode"])
        if family == "AvgPool":
            return AvgPool(kernel_size=kernel, stride=stride, padding=as_tuple(cfg["padding"], n),
                           ceil_mode=cfg["ceil_mode"], count_include_pad=cfg["count_include_pad"],
                           divisor_override=cfg.get("divisor_override"))
        return LPPool(norm_type=float(cfg["norm_type"]), kernel_size=kernel, stride=stride,
                      ceil_mode=cfg["ceil_mode"])
    if family in ("AdaptiveMaxPool", "AdaptiveAvgPool"):
        size = cfg["output_size"]
        size = (size,) * n if size is None or isinstance(size, int) else tuple(size)
        return AdaptivePool(output_size=size, mode="max" if "Max" in family else "avg")
    if family in ("BatchNorm", "InstanceNorm"):
        cls = BatchNorm if family == "BatchNorm" else InstanceNorm
        return cls(**a, running_mean=arrays.get("running_mean"),
                   running_var=arrays.get("running_var"),
                   num_batches_tracked=arrays.get("num_batches_tracked"), spatial_dims=n,
                   eps=float(cfg["eps"]),
                   momentum=None if cfg["momentum"] is None else float(cfg["momentum"]),
                   track_running_stats=cfg["track_running_stats"])
    if family == "LayerNorm":
        return LayerNorm(**a, normalized_shape=as_tuple(cfg["normalized_shape"], 1),
                         eps=float(cfg["eps"]))
    if family == "PReLU":
        return PReLU(weight=arrays.get("weight"))
    if family == "LocalResponseNorm":
        return LocalResponseNorm(size=cfg["size"], alpha=float(cfg["alpha"]),
                                 beta=float(cfg["beta"]), k=float(cfg["k"]))
    if family in RECURRENT_GATES:
        names = [a.name for a in LAYERS[layer_type].array_specs(cfg) if a.present(cfg)]
        return Recurrent(params={n: arrays.get(n) for n in names}, mode=family,
                         nonlinearity=cfg.get("nonlinearity", "tanh"),
                         hidden_size=cfg["hidden_size"], proj_size=cfg.get("proj_size", 0),
                         num_layers=cfg["num_layers"], bidirectional=cfg["bidirectional"],
                         batch_first=cfg["batch_first"], dropout=float(cfg["dropout"]))
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
    family, _ = _family(layer_type)
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

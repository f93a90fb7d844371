"""JAX implementations of the catalogue functions, with PyTorch semantics.

Each implementation is called with the node's bound arguments (catalogue parameter names,
defaults already filled in by the IR, node references replaced by arrays).  Arguments the
catalogue marks as ignored (``inplace``, ``_stacklevel``, ``dtype``) arrive in ``**_``.

Piecewise functions are written with ``jnp.where`` so that gradients at the breakpoints
are PyTorch's (one-sided, never 0.5 from a ``max`` tie) and never NaN from an unselected
branch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.catalogue import POOL_FUNCTIONS, implicit_softmax_dim

from . import ops

FUNCTIONS: dict[str, Callable[..., Any]] = {}


def _impl(name: str):
    def register(fn):
        FUNCTIONS[name] = fn
        return fn
    return register


def _clip(x, lo, hi):
    """Hard clipping with zero gradient at and beyond the bounds (PyTorch's hardtanh)."""
    return jnp.where(x <= lo, lo, jnp.where(x >= hi, hi, x)).astype(x.dtype)


def _softplus(x):
    return jnp.logaddexp(x, jnp.zeros((), x.dtype))


# --------------------------------------------------------------------------- activations
@_impl("relu")
def _relu(input, **_):
    return jax.nn.relu(input)  # max(x, 0); gradient 0 at 0, as in PyTorch


@_impl("relu6")
def _relu6(input, **_):
    return _clip(input, 0.0, 6.0)


@_impl("hardtanh")
def _hardtanh(input, min_val, max_val, **_):
    return _clip(input, min_val, max_val)


@_impl("hardswish")
def _hardswish(input, **_):
    x = input
    return jnp.where(x <= -3, jnp.zeros((), x.dtype), jnp.where(x >= 3, x, x * (x + 3) / 6))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _elu_core(x, alpha, scale=1.0, input_scale=1.0):
    neg = alpha * scale * jnp.expm1(jnp.minimum(x, 0) * input_scale)
    return jnp.where(x > 0, scale * x, neg)


@_impl("selu")
def _selu(input, **_):
    return _elu_core(input, _SELU_ALPHA, _SELU_SCALE)


@_impl("elu")
def _elu(input, alpha, **_):
    return _elu_core(input, alpha)


@_impl("celu")
def _celu(input, alpha, **_):
    return _elu_core(input, alpha, 1.0, 1.0 / alpha)


@_impl("silu")
def _silu(input, **_):
    return input * jax.nn.sigmoid(input)


@_impl("leaky_relu")
def _leaky_relu(input, negative_slope, **_):
    return jnp.where(input > 0, input, input * negative_slope)


@_impl("gelu")
def _gelu(input, approximate, **_):
    x = input
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + jnp.tanh(inner))
    return 0.5 * x * (1 + jax.lax.erf(x * (1.0 / math.sqrt(2.0))))


@_impl("logsigmoid")
def _logsigmoid(input, **_):
    return -_softplus(-input)


@_impl("tanhshrink")
def _tanhshrink(input, **_):
    return input - jnp.tanh(input)


@_impl("softsign")
def _softsign(input, **_):
    return input / (1 + jnp.abs(input))


@_impl("softplus")
def _softplus_fn(input, beta, threshold, **_):
    z = input * beta
    return jnp.where(z > threshold, input, _softplus(z) / beta)


@_impl("tanh")
def _tanh(input, **_):
    return jnp.tanh(input)


@_impl("sigmoid")
def _sigmoid(input, **_):
    return jax.nn.sigmoid(input)


@_impl("hardsigmoid")
def _hardsigmoid(input, **_):
    x = input
    return jnp.where(x <= -3, jnp.zeros((), x.dtype),
                     jnp.where(x >= 3, jnp.ones((), x.dtype), x / 6 + 0.5))


@_impl("mish")
def _mish(input, **_):
    return input * jnp.tanh(_softplus(input))


def _softmax_axis(x, dim):
    if dim is None:
        dim = implicit_softmax_dim(x.ndim)
    return ops.norm_dim(dim, x.ndim, "softmax")


@_impl("softmax")
def _softmax(input, dim, **_):
    if input.ndim == 0:
        return jnp.ones_like(input)
    return jax.nn.softmax(input, axis=_softmax_axis(input, dim))


@_impl("log_softmax")
def _log_softmax(input, dim, **_):
    if input.ndim == 0:
        return jnp.zeros_like(input)
    return jax.nn.log_softmax(input, axis=_softmax_axis(input, dim))


# --------------------------------------------------------------------------- arithmetic
@_impl("add")
def _add(input, other, alpha, **_):
    return input + (other if alpha == 1 else alpha * other)


@_impl("sub")
def _sub(input, other, alpha, **_):
    return input - (other if alpha == 1 else alpha * other)


@_impl("mul")
def _mul(input, other, **_):
    return input * other


@_impl("div")
def _div(input, other, rounding_mode=None, **_):
    if rounding_mode == "floor":
        return jnp.floor_divide(input, other) if _integral(input, other) \
            else jnp.floor(input / other)
    if rounding_mode == "trunc":
        return jnp.trunc(input / other)
    return input / other


def _integral(*values) -> bool:
    return all(jnp.issubdtype(jnp.result_type(v), jnp.integer) for v in values)


@_impl("chunk")
def _chunk(input, chunks, dim=0, **_):
    """torch.chunk: pieces of ceil(size / chunks) along ``dim``."""
    size = input.shape[dim]
    step = -(-size // chunks)
    starts = list(range(0, size, step))
    if len(starts) != chunks:
        raise ValueError(f"chunk: a size of {size} does not split into {chunks} pieces")
    return tuple(jax.lax.slice_in_dim(input, s, min(s + step, size), axis=dim)
                 for s in starts)


@_impl("unflatten")
def _unflatten(input, dim, sizes, **_):
    dim = dim % input.ndim
    sizes = list(_dims(sizes))
    if -1 in sizes:
        known = int(np.prod([s for s in sizes if s != -1]))
        sizes[sizes.index(-1)] = input.shape[dim] // known
    return jnp.reshape(input, input.shape[:dim] + tuple(sizes) + input.shape[dim + 1:])


@_impl("reshape_as")
def _reshape_as(input, other, **_):
    return jnp.reshape(input, other.shape)


@_impl("floor")
def _floor(input, **_):
    return jnp.floor(input)


@_impl("ceil")
def _ceil(input, **_):
    return jnp.ceil(input)


@_impl("round")
def _round(input, decimals=0, **_):
    if decimals == 0:
        return jnp.round(input)  # half to even, as PyTorch
    scale = 10.0 ** decimals
    return jnp.round(input * scale) / scale


@_impl("trunc")
def _trunc(input, **_):
    return jnp.trunc(input)


@_impl("cumsum")
def _cumsum(input, dim, **_):
    return jnp.cumsum(input, axis=dim)


@_impl("floor_divide")
def _floor_divide(input, other, **_):
    return _div(input, other, "floor")


@_impl("remainder")
def _remainder(input, other, **_):
    return input - other * _div(input, other, "floor")


@_impl("neg")
def _neg(input, **_):
    return -input


@_impl("pow")
def _pow(input, exponent, **_):
    return jnp.power(input, exponent)


@_impl("matmul")
def _matmul(input, other, **_):
    return jnp.matmul(input, other)


@_impl("exp")
def _exp(input, **_):
    return jnp.exp(input)


@_impl("log")
def _log(input, **_):
    return jnp.log(input)


@_impl("sqrt")
def _sqrt(input, **_):
    return jnp.sqrt(input)


@_impl("abs")
def _abs(input, **_):
    return jnp.abs(input)


@_impl("clamp")
def _clamp(input, min, max, **_):  # noqa: A002 - PyTorch's parameter names
    # PyTorch: min(max(x, min), max), gradient 1 inside the closed interval.
    y = input
    if min is not None:
        y = jnp.where(y < min, jnp.asarray(min, y.dtype), y)
    if max is not None:
        y = jnp.where(y > max, jnp.asarray(max, y.dtype), y)
    return y


# --------------------------------------------------------------------------- shapes
def _dims(value) -> tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)


@_impl("cat")
def _cat(tensors, dim, **_):
    return jnp.concatenate(tensors, axis=dim)


@_impl("stack")
def _stack(tensors, dim, **_):
    return jnp.stack(tensors, axis=dim)


@_impl("flatten")
def _flatten(input, start_dim, end_dim, **_):
    return ops.flatten(input, start_dim, end_dim)


@_impl("reshape")
def _reshape(input, shape, **_):
    return jnp.reshape(input, _dims(shape))


@_impl("permute")
def _permute(input, dims, **_):
    return jnp.transpose(input, _dims(dims))


@_impl("transpose")
def _transpose(input, dim0, dim1, **_):
    if input.ndim == 0:
        return input
    return jnp.swapaxes(input, dim0, dim1)


@_impl("squeeze")
def _squeeze(input, dim, **_):
    x = input
    if dim is None:
        return jnp.squeeze(x)
    axes = {ops.norm_dim(d, x.ndim, "squeeze") for d in _dims(dim)}
    # PyTorch leaves dimensions whose size is not 1 in place.
    axes = tuple(sorted(a for a in axes if x.ndim and x.shape[a] == 1))
    return jnp.squeeze(x, axis=axes) if axes else x


@_impl("contiguous")
def _contiguous(input, **_):
    return input


@_impl("unsqueeze")
def _unsqueeze(input, dim, **_):
    return jnp.expand_dims(input, dim)


def _index_item(item):
    if item == "...":
        return Ellipsis
    if isinstance(item, dict):
        return slice(*item["slice"])
    return item


@_impl("getitem")
def _getitem(input, index, **_):
    if isinstance(index, (list, tuple)):
        return input[tuple(_index_item(i) for i in index)]
    return input[_index_item(index)]


def _reduce_axes(dim):
    if dim is None:
        return None
    axes = _dims(dim)
    return None if not axes else axes  # PyTorch reduces over everything for dim=[]


@_impl("sum")
def _sum(input, dim, keepdim, **_):
    return jnp.sum(input, axis=_reduce_axes(dim), keepdims=keepdim)


@_impl("mean")
def _mean(input, dim, keepdim, **_):
    return jnp.mean(input, axis=_reduce_axes(dim), keepdims=keepdim)


# --------------------------------------------------------------------------- math
@_impl("maximum")
def _maximum(input, other, **_):
    return jnp.maximum(input, other)  # ties: half the gradient to each, as in PyTorch


@_impl("minimum")
def _minimum(input, other, **_):
    return jnp.minimum(input, other)


@_impl("erf")
def _erf(input, **_):
    return jax.lax.erf(input)


@_impl("sign")
def _sign(input, **_):
    # PyTorch: sign(nan) = 0 and sign(-0.) = 0 (jnp.sign keeps nan and -0.).
    x = input
    one = jnp.ones((), x.dtype)
    return jnp.where(x > 0, one, jnp.where(x < 0, -one, jnp.zeros((), x.dtype)))


@_impl("sin")
def _sin(input, **_):
    return jnp.sin(input)


@_impl("cos")
def _cos(input, **_):
    return jnp.cos(input)


# --------------------------------------------------------------------------- comparisons
@_impl("gt")
def _gt(input, other, **_):
    return jnp.greater(input, other)


@_impl("lt")
def _lt(input, other, **_):
    return jnp.less(input, other)


@_impl("ge")
def _ge(input, other, **_):
    return jnp.greater_equal(input, other)


@_impl("le")
def _le(input, other, **_):
    return jnp.less_equal(input, other)


@_impl("eq")
def _eq(input, other, **_):
    return jnp.equal(input, other)


@_impl("where")
def _where(condition, input, other, **_):
    condition = jnp.asarray(condition)
    if condition.dtype != jnp.bool_:
        raise TypeError(f"where: the condition must be a bool tensor (a comparison), got "
                        f"{condition.dtype}")
    if not isinstance(input, jax.Array) and not isinstance(other, jax.Array):
        # Two numbers: PyTorch's default dtype (float32), whatever the model's dtype.
        input, other = jnp.float32(input), jnp.float32(other)
    return jnp.where(condition, input, other)


# --------------------------------------------------------------------------- reductions
@_impl("amax")
def _amax(input, dim, keepdim, **_):
    return jnp.max(input, axis=_reduce_axes(dim), keepdims=keepdim)


@_impl("amin")
def _amin(input, dim, keepdim, **_):
    return jnp.min(input, axis=_reduce_axes(dim), keepdims=keepdim)


@_impl("prod")
def _prod(input, dim, keepdim, **_):
    return jnp.prod(input, axis=dim, keepdims=keepdim)


@_impl("flip")
def _flip(input, dims, **_):
    return jnp.flip(input, axis=_dims(dims))


# --------------------------------------------------------------------------- padding
_PAD_RANKS = {2: (2, 3), 4: (3, 4), 6: (4, 5)}
"""Input ranks PyTorch accepts for non-constant padding of 1, 2 or 3 dimensions."""


def _pad_indices(n: int, lo: int, hi: int, mode: str):
    """Source indices (numpy) along one axis of ``F.pad`` in ``mode``, as PyTorch."""
    if mode == "circular":
        # PyTorch crops negative pads first, then wraps (at most once) around the rest.
        start, stop = max(-lo, 0), n - max(-hi, 0)
        lo, hi, m = max(lo, 0), max(hi, 0), stop - start
        if m <= 0 or lo > m or hi > m:
            raise ValueError("pad: padding value causes wrapping around more than once")
        return start + (np.arange(m + lo + hi) - lo) % m
    j = np.arange(n + lo + hi) - lo
    if mode == "replicate":
        return np.clip(j, 0, n - 1)
    if lo >= n or hi >= n:  # reflect
        raise ValueError(f"pad: padding size should be less than the corresponding input "
                         f"dimension, but got padding ({lo}, {hi}) for size {n}")
    j = np.abs(j)
    return np.where(j > n - 1, 2 * (n - 1) - j, j)


@_impl("pad")
def _pad(input, pad, mode, value, **_):
    x = input
    pad = [int(p) for p in pad]
    k = len(pad) // 2
    if len(pad) > 2 * x.ndim:
        raise ValueError(f"pad: padding length should be less than or equal to two times the "
                         f"input dimension but got padding length {len(pad)} and input of "
                         f"dimension {x.ndim}")
    sizes = []
    for i in range(k):
        axis = x.ndim - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if x.shape[axis] + lo + hi < 0:
            raise ValueError(f"pad: padding ({lo}, {hi}) crops more than the size "
                             f"{x.shape[axis]} of dimension {axis}")
        sizes.append((axis, lo, hi))
    if mode == "constant":
        config = [(0, 0, 0)] * x.ndim
        for axis, lo, hi in sizes:
            config[axis] = (lo, hi, 0)
        fill = jnp.asarray(0 if value is None else value, x.dtype)
        return jax.lax.pad(x, fill, config)
    if value is not None:
        raise ValueError(f'pad: padding mode "{mode}" doesn\'t take in value argument')
    if x.ndim not in _PAD_RANKS.get(len(pad), ()):
        raise ValueError(f"pad: padding size {len(pad)} is not supported for {x.ndim}D input "
                         f"in mode {mode!r} (PyTorch pads the last 1, 2 or 3 dimensions of "
                         "2D/3D, 3D/4D or 4D/5D inputs)")
    for axis, lo, hi in sizes:
        if lo or hi:
            x = jnp.take(x, jnp.asarray(_pad_indices(x.shape[axis], lo, hi, mode)), axis=axis)
    return x


# --------------------------------------------------------------------------- functional pools
def _layer_function(name: str):
    """A functional pool (``F.max_pool2d``...) runs the layer of the same maths."""
    layer_type = POOL_FUNCTIONS[name]

    def apply(input, **config):
        from .layers import make_layer

        return make_layer(layer_type, config, {}).apply(input)

    return apply


for _name in POOL_FUNCTIONS:
    FUNCTIONS[_name] = _layer_function(_name)

"""Activation functions of the catalogue in JAX, with PyTorch semantics.

Piecewise functions are written with ``jnp.where`` so that gradients at the breakpoints
are PyTorch's (one-sided, never 0.5 from a ``max`` tie) and never NaN from an unselected
branch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from petab_sciml.catalogue import implicit_softmax_dim

from . import ops
from .function_registry import implements


def _clip(x, lo, hi):
    """Hard clipping with zero gradient at and beyond the bounds (PyTorch's hardtanh)."""
    return jnp.where(x <= lo, lo, jnp.where(x >= hi, hi, x)).astype(x.dtype)


def _softplus(x):
    return jnp.logaddexp(x, jnp.zeros((), x.dtype))


# --------------------------------------------------------------------------- activations
@implements("relu")
def _relu(input, **_):
    return jax.nn.relu(input)  # max(x, 0); gradient 0 at 0, as in PyTorch


@implements("relu6")
def _relu6(input, **_):
    return _clip(input, 0.0, 6.0)


@implements("hardtanh")
def _hardtanh(input, min_val, max_val, **_):
    return _clip(input, min_val, max_val)


@implements("hardswish")
def _hardswish(input, **_):
    x = input
    return jnp.where(x <= -3, jnp.zeros((), x.dtype), jnp.where(x >= 3, x, x * (x + 3) / 6))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _elu_core(x, alpha, scale=1.0, input_scale=1.0):
    # where, not minimum(x, 0): at x = 0 PyTorch takes the negative branch's derivative
    # (minimum would split a tie's gradient in half)
    neg = alpha * scale * jnp.expm1(jnp.where(x > 0, 0.0, x) * input_scale)
    return jnp.where(x > 0, scale * x, neg)


@implements("selu")
def _selu(input, **_):
    return _elu_core(input, _SELU_ALPHA, _SELU_SCALE)


@implements("elu")
def _elu(input, alpha, **_):
    return _elu_core(input, alpha)


@implements("celu")
def _celu(input, alpha, **_):
    return _elu_core(input, alpha, 1.0, 1.0 / alpha)


@implements("silu")
def _silu(input, **_):
    return input * jax.nn.sigmoid(input)


@implements("leaky_relu")
def _leaky_relu(input, negative_slope, **_):
    return jnp.where(input > 0, input, input * negative_slope)


@implements("gelu")
def _gelu(input, approximate, **_):
    x = input
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + jnp.tanh(inner))
    return 0.5 * x * (1 + jax.lax.erf(x * (1.0 / math.sqrt(2.0))))


@implements("logsigmoid")
def _logsigmoid(input, **_):
    return -_softplus(-input)


@implements("tanhshrink")
def _tanhshrink(input, **_):
    return input - jnp.tanh(input)


@implements("softsign")
def _softsign(input, **_):
    return input / (1 + jnp.abs(input))


@implements("softplus")
def _softplus_fn(input, beta, threshold, **_):
    z = input * beta
    return jnp.where(z > threshold, input, _softplus(z) / beta)


@implements("tanh")
def _tanh(input, **_):
    return jnp.tanh(input)


@implements("sigmoid")
def _sigmoid(input, **_):
    return jax.nn.sigmoid(input)


@implements("hardsigmoid")
def _hardsigmoid(input, **_):
    x = input
    return jnp.where(x <= -3, jnp.zeros((), x.dtype),
                     jnp.where(x >= 3, jnp.ones((), x.dtype), x / 6 + 0.5))


@implements("mish")
def _mish(input, **_):
    return input * jnp.tanh(_softplus(input))


def _softmax_axis(x, dim):
    if dim is None:
        dim = implicit_softmax_dim(x.ndim)
    return ops.norm_dim(dim, x.ndim, "softmax")


@implements("softmax")
def _softmax(input, dim, **_):
    if input.ndim == 0:
        return jnp.ones_like(input)
    return jax.nn.softmax(input, axis=_softmax_axis(input, dim))


@implements("log_softmax")
def _log_softmax(input, dim, **_):
    if input.ndim == 0:
        return jnp.zeros_like(input)
    return jax.nn.log_softmax(input, axis=_softmax_axis(input, dim))


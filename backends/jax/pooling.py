"""Pooling: ``torch.nn`` max, average, power-average and adaptive pools as layer modules,
and their maths on batched channel-first arrays (PyTorch's window and divisor
formulas)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.catalogue import as_tuple

from . import ops
from .layer_base import Array, LayerModule, static_field

POOL_FAMILIES = ("MaxPool", "AvgPool", "LPPool", "AdaptiveMaxPool", "AdaptiveAvgPool")


def pool_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape``."""
    eff = d * (k - 1) + 1
    num = size + 2 * p - eff + ((s - 1) if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_geometry(spatial, kernel, stride, padding, dilation, ceil_mode, what):
    outs, pads = [], []
    for size, k, s, p, d in zip(spatial, kernel, stride, padding, dilation):
        if p > k // 2:
            raise ValueError(f"{what}: pad should be at most half of the kernel size, got "
                             f"padding={p} for kernel_size={k}")
        out = pool_out_size(size, k, s, p, d, ceil_mode)
        if out < 1:
            raise ValueError(f"{what}: output size would be {out} for input size {size}, "
                             f"kernel_size={k}, stride={s}, padding={p}, dilation={d}")
        need = (out - 1) * s + d * (k - 1) + 1
        pads.append((p, max(need - size - p, 0)))
        outs.append(out)
    return outs, pads


def max_pool(x: jax.Array, kernel, stride, padding, dilation, ceil_mode: bool,
             what: str = "MaxPool") -> jax.Array:
    outs, pads = _pool_geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode,
                                what)
    if all(d == 1 for d in dilation):
        # A Python scalar init makes JAX use its differentiable reduce_window_max.
        return jax.lax.reduce_window(
            x, -jnp.inf, jax.lax.max, (1, 1, *kernel), (1, 1, *stride),
            [(0, 0), (0, 0), *pads],
        )
    # JAX has no VJP for a dilated max window: take the maximum of the strided slices at
    # every kernel offset instead, one window axis at a time (the maximum is separable:
    # kh + kw slices, not kh * kw; a 60 x 80 window took 26 s to compile as 4,800).
    # PyTorch's window scan gives a tie's whole gradient to the first maximum in
    # row-major window order, and a nan wins (``jnp.maximum`` would split a tie's
    # gradient in half): reducing the last axis first, then outwards, each by "a later
    # value wins only if greater or nan", picks that same element.
    result = jnp.pad(x, [(0, 0), (0, 0), *pads], constant_values=-jnp.inf)
    for axis in reversed(range(len(kernel))):
        k, d, s, n = kernel[axis], dilation[axis], stride[axis], outs[axis]
        best = None
        for o in range(k):
            new = jax.lax.slice_in_dim(result, o * d, o * d + (n - 1) * s + 1, s, axis=2 + axis)
            best = new if best is None else jnp.where((new > best) | jnp.isnan(new), new, best)
        result = best
    return result


def _avg_divisors(size: int, out: int, k: int, s: int, p: int, include_pad: bool) -> np.ndarray:
    """Per-dimension window sizes as PyTorch's avg_pool kernels count them."""
    counts = np.empty(out, dtype=np.int64)
    for o in range(out):
        start = o * s - p
        end = min(start + k, size + p)
        if include_pad:
            counts[o] = end - start
        else:
            counts[o] = min(end, size) - max(start, 0)
    return counts


def avg_pool(x: jax.Array, kernel, stride, padding, ceil_mode: bool, count_include_pad: bool,
             divisor_override: int | None, what: str = "AvgPool") -> jax.Array:
    n = x.ndim - 2
    ones = (1,) * n
    outs, pads = _pool_geometry(x.shape[2:], kernel, stride, padding, ones, ceil_mode, what)
    # A Python scalar init makes JAX use its differentiable reduce_window_sum.
    total = jax.lax.reduce_window(
        x, 0.0, jax.lax.add, (1, 1, *kernel), (1, 1, *stride), [(0, 0), (0, 0), *pads],
    )
    if divisor_override is not None:
        return total / divisor_override
    div = np.ones((), dtype=np.int64)
    for size, out, k, s, p in zip(x.shape[2:], outs, kernel, stride, padding):
        div = np.multiply.outer(div, _avg_divisors(size, out, k, s, p, count_include_pad))
    div = np.maximum(div, 1)  # windows entirely in padding sum to zero, as in PyTorch
    return total / jnp.asarray(div, dtype=x.dtype)


def lp_pool(x: jax.Array, norm_type: float, kernel, stride, ceil_mode: bool,
            what: str = "LPPool") -> jax.Array:
    """``torch.nn.functional.lp_poolNd`` (avg-pool of x**p, times the window size, ** 1/p)."""
    n = x.ndim - 2
    zeros = (0,) * n
    if norm_type == math.inf:
        return max_pool(jnp.abs(x), kernel, stride, zeros, (1,) * n, ceil_mode, what)
    if norm_type == -math.inf:
        return -max_pool(-jnp.abs(x), kernel, stride, zeros, (1,) * n, ceil_mode, what)
    out = avg_pool(x ** norm_type, kernel, stride, zeros, ceil_mode, True, None, what)
    out = jnp.sign(out) * jax.nn.relu(jnp.abs(out))
    return (out * math.prod(kernel)) ** (1.0 / norm_type)


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows: [floor(i*L/out), ceil((i+1)*L/out))."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def adaptive_avg_pool(x: jax.Array, output_size: Sequence[int]) -> jax.Array:
    """Separable averaging with a constant (out, L) matrix per spatial axis."""
    n = x.ndim - 2
    for axis, out in zip(range(2, 2 + n), output_size):
        size = x.shape[axis]
        if out == size:
            continue
        if size % out == 0:
            k = size // out
            shape = x.shape[:axis] + (out, k) + x.shape[axis + 1:]
            x = x.reshape(shape).mean(axis=axis + 1)
            continue
        mat = np.zeros((out, size))
        for i, (a, b) in enumerate(adaptive_windows(size, out)):
            mat[i, a:b] = 1.0 / (b - a)
        x = jnp.moveaxis(jnp.tensordot(x, jnp.asarray(mat, x.dtype), axes=[[axis], [1]]),
                         -1, axis)
    return x


def adaptive_max_pool(x: jax.Array, output_size: Sequence[int]) -> jax.Array:
    """Separable max over PyTorch's adaptive windows (gather + masked max per axis)."""
    n = x.ndim - 2
    for axis, out in zip(range(2, 2 + n), output_size):
        size = x.shape[axis]
        if out == size:
            continue
        if size % out == 0:
            k = size // out
            shape = x.shape[:axis] + (out, k) + x.shape[axis + 1:]
            x = x.reshape(shape).max(axis=axis + 1)
            continue
        windows = adaptive_windows(size, out)
        width = max(b - a for a, b in windows)
        idx = np.zeros((out, width), dtype=np.int32)
        valid = np.zeros((out, width), dtype=bool)
        for i, (a, b) in enumerate(windows):
            idx[i, : b - a] = np.arange(a, b)
            idx[i, b - a:] = a
            valid[i, : b - a] = True
        g = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=axis)
        g = g.reshape(x.shape[:axis] + (out, width) + x.shape[axis + 1:])
        mask_shape = (1,) * axis + (out, width) + (1,) * (x.ndim - axis - 1)
        g = jnp.where(jnp.asarray(valid.reshape(mask_shape)), g, -jnp.inf)
        x = g.max(axis=axis + 1)
    return x


class MaxPool(LayerModule):
    kernel_size: tuple[int, ...] = static_field()
    stride: tuple[int, ...] = static_field()
    padding: tuple[int, ...] = static_field()
    dilation: tuple[int, ...] = static_field()
    ceil_mode: bool = static_field()

    def apply(self, x: Array) -> Array:
        n = len(self.kernel_size)
        what = f"MaxPool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        return ops.batched(max_pool, x, n + 1, self.kernel_size, self.stride, self.padding,
                           self.dilation, self.ceil_mode, what)


class AvgPool(LayerModule):
    kernel_size: tuple[int, ...] = static_field()
    stride: tuple[int, ...] = static_field()
    padding: tuple[int, ...] = static_field()
    ceil_mode: bool = static_field()
    count_include_pad: bool = static_field()
    divisor_override: int | None = static_field()

    def apply(self, x: Array) -> Array:
        n = len(self.kernel_size)
        what = f"AvgPool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        return ops.batched(avg_pool, x, n + 1, self.kernel_size, self.stride, self.padding,
                           self.ceil_mode, self.count_include_pad, self.divisor_override, what)


class LPPool(LayerModule):
    norm_type: float = static_field()
    kernel_size: tuple[int, ...] = static_field()
    stride: tuple[int, ...] = static_field()
    ceil_mode: bool = static_field()

    def apply(self, x: Array) -> Array:
        n = len(self.kernel_size)
        what = f"LPPool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        return ops.batched(lp_pool, x, n + 1, self.norm_type, self.kernel_size,
                           self.stride, self.ceil_mode, what)


class AdaptivePool(LayerModule):
    output_size: tuple[int | None, ...] = static_field()
    mode: str = static_field()  # "max" or "avg"

    def apply(self, x: Array) -> Array:
        n = len(self.output_size)
        what = f"Adaptive{self.mode.capitalize()}Pool{n}d"
        ops.check_rank(x, (n + 1, n + 2), what)
        spatial = x.shape[-n:]
        size = tuple(s if o is None else o for s, o in zip(spatial, self.output_size))
        fn = adaptive_max_pool if self.mode == "max" else adaptive_avg_pool
        return ops.batched(fn, x, n + 1, size)


def make_pool(family: str, n: int, cfg: Mapping[str, Any]) -> LayerModule:
    """The pool module of ``family`` (:data:`POOL_FAMILIES`) of ``n`` spatial dimensions
    with resolved arguments ``cfg``."""
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
    size = cfg["output_size"]
    size = (size,) * n if size is None or isinstance(size, int) else tuple(size)
    return AdaptivePool(output_size=size, mode="max" if "Max" in family else "avg")

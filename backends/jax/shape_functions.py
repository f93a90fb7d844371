"""Shape, indexing and padding functions of the catalogue in JAX, with PyTorch
semantics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import ops
from .function_registry import as_dims, implements


@implements("chunk")
def _chunk(input, chunks, dim=0, **_):
    """torch.chunk: pieces of ceil(size / chunks) along ``dim``."""
    size = input.shape[dim]
    step = -(-size // chunks)
    starts = list(range(0, size, step))
    if len(starts) != chunks:
        raise ValueError(f"chunk: a size of {size} does not split into {chunks} pieces")
    return tuple(jax.lax.slice_in_dim(input, s, min(s + step, size), axis=dim)
                 for s in starts)


@implements("unflatten")
def _unflatten(input, dim, sizes, **_):
    dim = dim % input.ndim
    sizes = list(as_dims(sizes))
    if -1 in sizes:
        known = int(np.prod([s for s in sizes if s != -1]))
        sizes[sizes.index(-1)] = input.shape[dim] // known
    return jnp.reshape(input, input.shape[:dim] + tuple(sizes) + input.shape[dim + 1:])


@implements("reshape_as")
def _reshape_as(input, other, **_):
    return jnp.reshape(input, other.shape)


@implements("cat")
def _cat(tensors, dim, **_):
    return jnp.concatenate(tensors, axis=dim)


@implements("stack")
def _stack(tensors, dim, **_):
    return jnp.stack(tensors, axis=dim)


@implements("flatten")
def _flatten(input, start_dim, end_dim, **_):
    return ops.flatten(input, start_dim, end_dim)


@implements("reshape")
def _reshape(input, shape, **_):
    return jnp.reshape(input, as_dims(shape))


@implements("permute")
def _permute(input, dims, **_):
    return jnp.transpose(input, as_dims(dims))


@implements("transpose")
def _transpose(input, dim0, dim1, **_):
    if input.ndim == 0:
        return input
    return jnp.swapaxes(input, dim0, dim1)


@implements("squeeze")
def _squeeze(input, dim, **_):
    x = input
    if dim is None:
        return jnp.squeeze(x)
    axes = {ops.norm_dim(d, x.ndim, "squeeze") for d in as_dims(dim)}
    # PyTorch leaves dimensions whose size is not 1 in place.
    axes = tuple(sorted(a for a in axes if x.ndim and x.shape[a] == 1))
    return jnp.squeeze(x, axis=axes) if axes else x


@implements("contiguous")
def _contiguous(input, **_):
    return input


@implements("unsqueeze")
def _unsqueeze(input, dim, **_):
    return jnp.expand_dims(input, dim)


def _index_item(item):
    if item == "...":
        return Ellipsis
    if isinstance(item, dict):
        return slice(*item["slice"])
    return item


@implements("getitem")
def _getitem(input, index, **_):
    if isinstance(index, (list, tuple)):
        return input[tuple(_index_item(i) for i in index)]
    return input[_index_item(index)]


@implements("flip")
def _flip(input, dims, **_):
    return jnp.flip(input, axis=as_dims(dims))


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


@implements("pad")
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

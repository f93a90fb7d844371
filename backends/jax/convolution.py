"""Convolutions: ``torch.nn.ConvNd`` and ``ConvTransposeNd`` as layer modules, and their
maths on batched channel-first arrays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from petab_sciml.catalogue import as_tuple

from . import ops
from .layer_base import Array, LayerModule, static_field

_CONV_DIMS = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"),
              3: ("NCDHW", "OIDHW", "NCDHW")}
_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def same_padding(kernel: Sequence[int], dilation: Sequence[int]) -> list[tuple[int, int]]:
    """PyTorch's ``padding='same'``: total d*(k-1), the odd extra element on the right."""
    out = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        out.append((total // 2, total - total // 2))
    return out


def conv(x: jax.Array, weight: jax.Array, bias: jax.Array | None, *, stride: Sequence[int],
         padding: Sequence[tuple[int, int]], dilation: Sequence[int], groups: int,
         padding_mode: str = "zeros") -> jax.Array:
    """``torch.nn.ConvNd`` on a batched input; ``weight`` is (O, I/groups, *k)."""
    n = x.ndim - 2
    if padding_mode != "zeros" and any(p != (0, 0) for p in padding):
        widths = [(0, 0), (0, 0), *padding]
        x = jnp.pad(x, widths, mode=_PAD_MODES[padding_mode])
        padding = [(0, 0)] * n
    y = jax.lax.conv_general_dilated(
        x, weight, window_strides=tuple(stride), padding=[tuple(p) for p in padding],
        rhs_dilation=tuple(dilation), feature_group_count=groups,
        dimension_numbers=_CONV_DIMS[n],
    )
    if bias is not None:
        y = y + bias[(None, slice(None)) + (None,) * n]
    return y


def conv_transpose(x: jax.Array, weight: jax.Array, bias: jax.Array | None, *,
                   stride: Sequence[int], padding: Sequence[int],
                   output_padding: Sequence[int], dilation: Sequence[int],
                   groups: int) -> jax.Array:
    """``torch.nn.ConvTransposeNd`` on a batched input; ``weight`` is (I, O/groups, *k).

    The gradient of a strided convolution: dilate the input by ``stride``, pad each side by
    ``d*(k-1) - p`` (plus ``output_padding`` on the right) and convolve with the spatially
    flipped kernel whose in/out axes are swapped within each group.
    """
    n = x.ndim - 2
    cin = weight.shape[0]
    cout_g = weight.shape[1]
    kernel = weight.shape[2:]
    w = weight.reshape((groups, cin // groups, cout_g) + kernel)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * cout_g, cin // groups) + kernel)
    w = jnp.flip(w, axis=tuple(range(2, 2 + n)))
    pads = []
    for k, p, op, d in zip(kernel, padding, output_padding, dilation):
        edge = d * (k - 1) - p
        pads.append((edge, edge + op))
    y = jax.lax.conv_general_dilated(
        x, w, window_strides=(1,) * n, padding=pads, lhs_dilation=tuple(stride),
        rhs_dilation=tuple(dilation), feature_group_count=groups,
        dimension_numbers=_CONV_DIMS[n],
    )
    if bias is not None:
        y = y + bias[(None, slice(None)) + (None,) * n]
    return y


class Conv(LayerModule):
    weight: Array
    bias: Array | None
    stride: tuple[int, ...] = static_field()
    padding: tuple[tuple[int, int], ...] = static_field()
    dilation: tuple[int, ...] = static_field()
    groups: int = static_field()
    padding_mode: str = static_field()
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x: Array) -> Array:
        n = len(self.stride)
        ops.check_rank(x, (n + 1, n + 2), f"Conv{n}d")
        return ops.batched(conv, x, n + 1, self.weight, self.bias, stride=self.stride,
                           padding=self.padding, dilation=self.dilation, groups=self.groups,
                           padding_mode=self.padding_mode)


class ConvTranspose(LayerModule):
    weight: Array
    bias: Array | None
    stride: tuple[int, ...] = static_field()
    padding: tuple[int, ...] = static_field()
    output_padding: tuple[int, ...] = static_field()
    dilation: tuple[int, ...] = static_field()
    groups: int = static_field()
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x: Array) -> Array:
        n = len(self.stride)
        ops.check_rank(x, (n + 1, n + 2), f"ConvTranspose{n}d")
        return ops.batched(conv_transpose, x, n + 1, self.weight, self.bias,
                           stride=self.stride, padding=self.padding,
                           output_padding=self.output_padding, dilation=self.dilation,
                           groups=self.groups)


def _conv_padding(cfg: Mapping[str, Any], n: int) -> tuple[tuple[int, int], ...]:
    pad = cfg["padding"]
    if pad == "valid":
        return ((0, 0),) * n
    if pad == "same":
        if any(s != 1 for s in as_tuple(cfg["stride"], n)):
            raise ValueError("padding='same' is not supported for strided convolutions")
        return tuple(same_padding(as_tuple(cfg["kernel_size"], n),
                                      as_tuple(cfg["dilation"], n)))
    return tuple((p, p) for p in as_tuple(pad, n))


def make_conv(family: str, n: int, cfg: Mapping[str, Any], arrays: Mapping[str, Array]
              ) -> LayerModule:
    """The ``Conv`` or ``ConvTranspose`` module (``family``) of ``n`` spatial dimensions
    with resolved arguments ``cfg`` and ``arrays`` (``weight``, ``bias``)."""
    a = {name: arrays.get(name) for name in ("weight", "bias")}
    if family == "Conv":
        return Conv(**a, stride=as_tuple(cfg["stride"], n), padding=_conv_padding(cfg, n),
                    dilation=as_tuple(cfg["dilation"], n), groups=cfg["groups"],
                    padding_mode=cfg["padding_mode"])
    return ConvTranspose(**a, stride=as_tuple(cfg["stride"], n),
                         padding=as_tuple(cfg["padding"], n),
                         output_padding=as_tuple(cfg["output_padding"], n),
                         dilation=as_tuple(cfg["dilation"], n), groups=cfg["groups"])

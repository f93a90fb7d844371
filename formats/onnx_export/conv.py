"""Conv1d/2d/3d (Conv, with a Pad in front for non-zero padding modes) and
ConvTranspose1d/2d/3d; unbatched inputs get a batch axis for the op."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from petab_sciml.catalogue import as_tuple

from ..export_common import conv_padding
from .exporter import _Exporter, spatial_dims
from .registry import layer

_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
"""PyTorch padding modes -> ONNX Pad modes."""


def _circular_opset(config: Mapping[str, Any]) -> int:
    return 19 if config.get("padding_mode") == "circular" else 17


@layer("Conv1d", "Conv2d", "Conv3d", opset=_circular_opset)
def _conv(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    c = lay.config
    n = spatial_dims(lay)
    xb, added = ex.unbatch(ins[0], n, lay.type)
    pads = conv_padding(c, n)
    begins, ends = [p for p, _ in pads], [q for _, q in pads]
    mode = c["padding_mode"]
    if mode != "zeros" and (any(begins) or any(ends)):
        onnx_mode = _PAD_MODES[mode]
        if onnx_mode == "wrap" and ex.opset < 19:
            raise ex.error("circular padding needs opset 19 or newer")
        xb = ex.op("Pad", [xb, ex.ints([0, 0] + begins + [0, 0] + ends, "pads")],
                   mode=onnx_mode)
        begins, ends = [0] * n, [0] * n
    y = ex.op("Conv", _inputs(ex, lay, xb), **_window(c, n), pads=begins + ends,
              group=int(c["groups"]))
    return ex.rebatch(y, added)


@layer("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", opset=_circular_opset)
def _conv_transpose(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    c = lay.config
    n = spatial_dims(lay)
    xb, added = ex.unbatch(ins[0], n, lay.type)
    p = list(as_tuple(c["padding"], n))
    y = ex.op("ConvTranspose", _inputs(ex, lay, xb), **_window(c, n), pads=p + p,
              output_padding=list(as_tuple(c["output_padding"], n)), group=int(c["groups"]))
    return ex.rebatch(y, added)


def _inputs(ex: _Exporter, lay: Any, xb: str) -> list[str]:
    """The input, the weight and (if any) the bias of a convolution."""
    args = [xb, ex.init(lay.id, "weight")]
    if lay.config["bias"]:
        args.append(ex.init(lay.id, "bias"))
    return args


def _window(c: Mapping[str, Any], n: int) -> dict[str, list[int]]:
    """The kernel_shape, strides and dilations attributes of a convolution."""
    return {"kernel_shape": list(as_tuple(c["kernel_size"], n)),
            "strides": list(as_tuple(c["stride"], n)),
            "dilations": list(as_tuple(c["dilation"], n))}

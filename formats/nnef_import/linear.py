"""``linear`` -> a Linear layer (a layer applied twice is called again), and
``matmul`` (with its transposes)."""

from __future__ import annotations

from typing import Any

from petab_sciml.formats.graph_building import Tensor

from .lifter import _Array, _input, _Lifter, _out
from .registry import handles


@handles("matmul")
def _matmul(lf: _Lifter, op: Any) -> Tensor:
    a, b = _input(lf, op, "A"), _input(lf, op, "B")
    a, b = lf.tensor(a, "matmul"), lf.tensor(b, "matmul")
    if op.attribs.get("transposeA"):
        a = lf.call("transpose", {"input": a, "dim0": -2, "dim1": -1})
    if op.attribs.get("transposeB"):
        b = lf.call("transpose", {"input": b, "dim0": -2, "dim1": -1})
    return lf.call("matmul", {"input": a, "other": b}, base=_out(op))


def _bias(lf: _Lifter, value: Any, layer_id: str, n: int) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != 0:
            raise lf.error(f"a constant bias {value} is not supported")
        return False
    array = lf.array(value, "bias")
    lf.claim(array, layer_id, "bias", (n,))
    return True


@handles("linear")
def _linear(lf: _Lifter, op: Any) -> Tensor:
    weight = lf.array(_input(lf, op, "filter"), "linear filter")
    if weight.data.ndim != 2:
        raise lf.error(f"linear filter must be 2-d, got shape {weight.data.shape}")
    out_f, in_f = weight.data.shape
    bias_value = _input(lf, op, "bias")
    owner = lf.shared([weight, bias_value])
    if owner is not None:
        return lf.reuse(owner, "Linear", {"in_features": int(in_f), "out_features": int(
            out_f), "bias": isinstance(bias_value, _Array)}, [_input(lf, op, "input")],
            _out(op))
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", (out_f, in_f))
    has_bias = _bias(lf, bias_value, layer_id, out_f)
    return lf.add_layer(layer_id, "Linear", {"in_features": int(in_f),
                                            "out_features": int(out_f), "bias": has_bias},
                        [_input(lf, op, "input")], _out(op))

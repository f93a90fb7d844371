"""LSTM, GRU and RNN -> torch.nn.LSTM / GRU / RNN layers (one layer per ONNX node).

ONNX stacks the gates of each direction in another order than PyTorch (LSTM ``i o f c``
vs ``i f g o``; GRU ``z r h`` vs ``r z n``), keeps both directions in one array and the
input and recurrence biases in one vector; the converter reorders and splits them into
PyTorch's ``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0`` (and
``..._reverse``).  The outputs are PyTorch's reshaped to ONNX's layout: ``Y`` has a
direction axis (``(L, D, N, H)``; ``(N, L, D, H)`` with ``layout=1``).  A
``direction="reverse"`` node runs a forward layer on the time-flipped sequence.

What PyTorch's layers cannot compute is refused with the reason: other activations,
``clip``, ``input_forget``, peepholes, varying ``sequence_lens`` and GRU with
``linear_before_reset=0`` (PyTorch's GRU applies the reset gate after the recurrence
matmul, which is ONNX's ``linear_before_reset=1``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C

_ORDER = {"LSTM": ("iofc", "ifco"), "GRU": ("zrh", "rzh"), "RNN": ("i", "i")}
"""ONNX gate order, PyTorch gate order (same letters)."""
_DEFAULT_ACTIVATIONS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh")}


def _reorder(w: np.ndarray, op: str) -> np.ndarray:
    onnx_order, torch_order = _ORDER[op]
    blocks = np.split(w, len(onnx_order), axis=0)
    return np.concatenate([blocks[onnx_order.index(g)] for g in torch_order], axis=0)


def _nonlinearity(im: _Importer, node: Any, op: str, at: dict, n_dir: int) -> str:
    acts = [(a.decode() if isinstance(a, bytes) else str(a)).lower()
            for a in at.get("activations", [])]
    if "activation_alpha" in at or "activation_beta" in at:
        raise im.error(node, "activation_alpha/activation_beta are not supported")
    if op == "RNN":
        acts = acts or ["tanh"] * n_dir
        if len(set(acts)) != 1 or acts[0] not in ("tanh", "relu"):
            raise im.error(node, f"activations {acts} are not supported (torch.nn.RNN has "
                           "one nonlinearity, Tanh or Relu)")
        return acts[0]
    default = list(_DEFAULT_ACTIVATIONS[op]) * n_dir
    if acts and acts != default:
        raise im.error(node, f"activations {acts} are not supported (PyTorch's {op} uses "
                       f"{', '.join(_DEFAULT_ACTIVATIONS[op])})")
    return "tanh"


@handles("LSTM", "GRU", "RNN")
def _recurrent(im: _Importer, node: Any, ins: list) -> None:
    op = node.op_type
    at = im.attrs(node)
    direction = at.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise im.error(node, f"direction {direction!r} is not supported")
    n_dir = 2 if direction == "bidirectional" else 1
    nonlinearity = _nonlinearity(im, node, op, at, n_dir)
    if at.get("clip") is not None:
        raise im.error(node, "clip (cell clipping) is not supported: PyTorch's recurrent "
                       "layers do not clip")
    if at.get("input_forget", 0):
        raise im.error(node, "input_forget=1 (coupled input and forget gates) is not "
                       "supported")
    if op == "GRU" and not at.get("linear_before_reset", 0):
        raise im.error(node, "linear_before_reset=0 is not supported: PyTorch's GRU applies "
                       "the reset gate after the recurrence matmul (linear_before_reset=1)")
    if op == "LSTM" and len(ins) > 7 and ins[7] is not None:
        peep = im.static(node, 7, "P (peepholes)")
        if np.any(peep):
            raise im.error(node, "peephole connections (input P) are not supported")
    layout = int(at.get("layout", 0))
    x = ins[0]
    x_shape = im.shape(x)
    time_axis, batch_axis = (1, 0) if layout else (0, 1)
    if len(ins) > 4 and ins[4] is not None:
        lens = im.static(node, 4, "sequence_lens")
        steps = None if x_shape is None else x_shape[time_axis]
        if steps is None or np.any(np.asarray(lens) != steps):
            raise im.error(node, "sequence_lens must equal the sequence length for every "
                           "sample (padded sequences are not supported)")
    w = im.static(node, 1, "W")
    r = im.static(node, 2, "R")
    b = im.static(node, 3, "B") if len(ins) > 3 and ins[3] is not None else None
    hidden = int(at.get("hidden_size", r.shape[-1]))
    gates = len(_ORDER[op][0]) * hidden
    if w.shape[:2] != (n_dir, gates) or r.shape != (n_dir, gates, hidden):
        raise im.error(node, f"W {tuple(w.shape)} and R {tuple(r.shape)} do not fit "
                       f"hidden_size {hidden} with {n_dir} direction(s)")
    arrays: dict[str, tuple[np.ndarray, Any, str]] = {}
    for d in range(n_dir):
        sfx = "_reverse" if d else ""
        note = f"direction {d}, gates {_ORDER[op][0]} -> {_ORDER[op][1]}"
        arrays[f"weight_ih_l0{sfx}"] = (_reorder(w[d], op), ins[1], note)
        arrays[f"weight_hh_l0{sfx}"] = (_reorder(r[d], op), ins[2], note)
        if b is not None:
            arrays[f"bias_ih_l0{sfx}"] = (_reorder(b[d, :gates], op), ins[3], note)
            arrays[f"bias_hh_l0{sfx}"] = (_reorder(b[d, gates:], op), ins[3], note)
    args: dict[str, Any] = {"input_size": int(w.shape[2]), "hidden_size": hidden}
    if op == "RNN" and nonlinearity != "tanh":
        args["nonlinearity"] = nonlinearity
    if b is None:
        args["bias"] = False
    if layout:
        args["batch_first"] = True
    if n_dir == 2:
        args["bidirectional"] = True

    seq = im.tensor(x, node)
    if direction == "reverse":
        seq = im.emit("flip", [seq], {"dims": [time_axis]})
    layer_inputs: list[Any] = [seq]
    states = [_state(im, node, ins, k, layout) for k in ((5, 6) if op == "LSTM" else (5,))]
    if any(s is not None for s in states):
        if op == "LSTM":
            layer_inputs.append([s if s is not None else _zeros_like_state(im, node, other)
                                 for s, other in zip(states, states[::-1])])
        else:
            layer_inputs.append(states[0])
    ref = im.add_layer(node, op, args, arrays, layer_inputs)

    if im.used(node, 0):
        out = im.emit("getitem", [ref], {"index": 0})
        if direction == "reverse":
            out = im.emit("flip", [out], {"dims": [time_axis]})
        dir_axis = 2 if layout else 1
        if n_dir == 1:
            y = im.emit("unsqueeze", [out], {"dim": dir_axis}, name=im.out_name(node, 0))
        else:
            halves = [im.emit("getitem", [out], {"index": ["...", {"slice": s}]})
                      for s in ([None, hidden, None], [hidden, None, None])]
            y = im.emit("stack", [halves], {"dim": dir_axis}, name=im.out_name(node, 0))
        im.bind(node, 0, y)
    n_states = 2 if op == "LSTM" else 1
    if any(im.used(node, k) for k in range(1, n_states + 1)):
        final = im.emit("getitem", [ref], {"index": 1},
                        name=None if op == "LSTM" or layout else im.out_name(node, 1))
    for k in range(1, n_states + 1):
        if not im.used(node, k):
            continue
        state = final
        name = im.out_name(node, k)
        if op == "LSTM":
            state = im.emit("getitem", [final], {"index": k - 1},
                            name=None if layout else name)
        if layout:  # PyTorch's states are (D, N, H) whatever batch_first says
            state = im.emit("transpose", [state], {"dim0": 0, "dim1": 1}, name=name)
        im.bind(node, k, state)
    if any(im.used(node, k) for k in range(n_states + 1, len(node.output))):
        raise im.error(node, f"{op} has no output {len(node.output) - 1}")


def _state(im: _Importer, node: Any, ins: list, index: int, layout: int) -> str | None:
    """An initial state input in PyTorch's (D, N, H) layout, or None (absent or zero:
    PyTorch's default)."""
    if index >= len(ins) or ins[index] is None:
        return None
    v = ins[index]
    value = im.array(v)
    if value is not None and isinstance(v, _C) and not np.any(value):
        return None
    ref = im.tensor(v, node)
    if layout:
        ref = im.emit("transpose", [ref], {"dim0": 0, "dim1": 1})
    return ref


def _zeros_like_state(im: _Importer, node: Any, other: str | None) -> str:
    """A zero state shaped like ``other`` (an LSTM given only one of h_0 and c_0)."""
    return im.emit("mul", [other, 0.0])

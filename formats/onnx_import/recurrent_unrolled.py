"""LSTM, GRU and RNN that PyTorch's layers cannot compute, unrolled over the static
sequence length with ONNX's own equations.

Used where the layer path refuses: a weight, recurrence weight or bias the network
computes (no layer can hold it), GRU with ``linear_before_reset=0`` (ONNX's default:
the reset gate multiplies the state before the recurrence product) and LSTM peepholes
``P``.  Per direction and step, with ONNX's gate order (LSTM ``i o f c``, GRU ``z r h``):

* RNN: ``H = act(x W^T + H R^T + Wb + Rb)``;
* GRU: ``z, r = sigmoid(...)``; ``h = tanh(x Wh^T + (r * H) Rh^T + Rbh + Wbh)``, or with
  ``linear_before_reset`` ``tanh(x Wh^T + r * (H Rh^T + Rbh) + Wbh)``;
  ``H = (1 - z) * h + z * H``;
* LSTM: ``i, f = sigmoid(... + P * C)``, ``c = tanh(...)``, ``C = f * C + i * c``,
  ``o = sigmoid(... + Po * C)``, ``H = o * tanh(C)``.

The default activations only (RNN: Tanh or Relu); ``clip``, ``input_forget`` and varying
``sequence_lens`` stay refused as on the layer path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _Importer
from .values import _C

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def needs_unrolling(im: _Importer, node: Any, ins: list) -> bool:
    """Whether the node needs this path: computed W/R/B, GRU without
    ``linear_before_reset`` or LSTM peepholes."""
    at = im.attrs(node)
    if node.op_type == "GRU" and not at.get("linear_before_reset", 0):
        return True
    for index in (1, 2, 3, 7):
        if index >= len(node.input) or not node.input[index]:
            continue
        try:
            value, _ = im.folded(node, index, "input")
        except Exception:  # noqa: BLE001 - computed from the network inputs
            return True
        if index == 7 and np.any(value):
            return True
    return False


def _cut(im: _Importer, x: str, start: int, stop: int) -> str:
    return im.emit("getitem", [x], {"index": ["...", {"slice": [start, stop, None]}]})


def unrolled(im: _Importer, node: Any, ins: list, nonlinearity: str) -> None:
    """Bind the node's outputs (``Y``, ``Y_h``, ``Y_c``) to the unrolled recurrence."""
    op, at = node.op_type, im.attrs(node)
    direction = at.get("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    layout = int(at.get("layout", 0))
    x_shape, w_shape = im.static_shape(ins[0]), im.static_shape(ins[1])
    if x_shape is None or w_shape is None:
        raise im.error(node, f"an unrolled {op} needs the static shapes of X and W")
    hidden = int(at.get("hidden_size", w_shape[1] // _GATES[op]))
    gates = _GATES[op] * hidden
    steps, batch = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
    if w_shape[:2] != (directions, gates):
        raise im.error(node, f"W {list(w_shape)} does not fit hidden_size {hidden} with "
                       f"{directions} direction(s)")
    x = im.tensor(ins[0], node)
    if layout:
        x = im.emit("transpose", [x], {"dim0": 0, "dim1": 1})            # (S, N, I)

    def per_direction(index: int, d: int) -> str | None:
        if index >= len(ins) or ins[index] is None:
            return None
        return im.emit("getitem", [im.tensor(ins[index], node)], {"index": d})

    def initial(index: int, d: int) -> str:
        if index < len(ins) and ins[index] is not None:
            state = im.tensor(ins[index], node)
            return im.emit("getitem", [state], {"index": [{"slice": [None, None, None]}, d]}
                           if layout else {"index": d})
        return im.tensor(_C(np.zeros((batch, hidden)), f"{op}_zero_state"), node)

    ys, finals_h, finals_c = [], [], []
    for d in range(directions):
        w_t = im.emit("transpose", [per_direction(1, d)], {"dim0": 0, "dim1": 1})
        r_t = im.emit("transpose", [per_direction(2, d)], {"dim0": 0, "dim1": 1})
        bias = per_direction(3, d)
        xw = im.emit("matmul", [x, w_t])                                   # (S, N, G*H)
        rb = None
        if bias is not None:
            xw = im.emit("add", [xw, _cut(im, bias, 0, gates)])
            rb = _cut(im, bias, gates, 2 * gates)
        peep = per_direction(7, d) if op == "LSTM" else None
        h, c = initial(5, d), initial(6, d) if op == "LSTM" else None
        backward = direction == "reverse" or d == 1
        outputs: dict[int, str] = {}
        for t in (range(steps - 1, -1, -1) if backward else range(steps)):
            xt = im.emit("getitem", [xw], {"index": t})                       # (N, G*H)
            hr = im.emit("matmul", [h, r_t])
            if rb is not None:
                hr = im.emit("add", [hr, rb])
            h, c = _cell(im, op, xt, hr, h, c, peep, hidden, nonlinearity,
                         bool(at.get("linear_before_reset", 0)), rb, r_t)
            outputs[t] = h
        ys.append(im.emit("stack", [[outputs[t] for t in range(steps)]], {"dim": 0}))
        finals_h.append(h)
        finals_c.append(c)
    if im.used(node, 0):
        name = im.out_name(node, 0)
        y = im.emit("stack", [ys], {"dim": 1}, name=None if layout else name)  # (S, D, N, H)
        if layout:
            y = im.emit("permute", [y], {"dims": [2, 0, 1, 3]}, name=name)
        im.bind(node, 0, y)
    for index, finals in ((1, finals_h), (2, finals_c)):
        if im.used(node, index):
            im.bind(node, index, im.emit("stack", [finals], {"dim": 1 if layout else 0},
                                         name=im.out_name(node, index)))


def _cell(im: _Importer, op: str, xt: str, hr: str, h: str, c: str | None, peep: str | None,
          hidden: int, nonlinearity: str, linear_before_reset: bool, rb: str | None,
          r_t: str) -> tuple[str, str | None]:
    """One step: the new hidden (and cell) state."""
    def gate(k: int, of: str) -> str:
        return _cut(im, of, k * hidden, (k + 1) * hidden)

    if op == "RNN":
        return im.emit(nonlinearity, [im.emit("add", [xt, hr])]), None
    if op == "GRU":
        z = im.emit("sigmoid", [im.emit("add", [gate(0, xt), gate(0, hr)])])
        r = im.emit("sigmoid", [im.emit("add", [gate(1, xt), gate(1, hr)])])
        if linear_before_reset:
            recurrent = im.emit("mul", [r, gate(2, hr)])
        else:   # the reset state goes through the recurrence product
            r_h = _cut(im, r_t, 2 * hidden, 3 * hidden)                  # (H, H)
            recurrent = im.emit("matmul", [im.emit("mul", [r, h]), r_h])
            if rb is not None:
                recurrent = im.emit("add", [recurrent, _cut(im, rb, 2 * hidden,
                                                            3 * hidden)])
        candidate = im.emit("tanh", [im.emit("add", [gate(2, xt), recurrent])])
        keep = im.emit("mul", [z, h])
        new = im.emit("mul", [im.emit("sub", [1.0, z]), candidate])
        return im.emit("add", [new, keep]), None
    pre = im.emit("add", [xt, hr])                                        # LSTM: i o f c
    i_pre, o_pre, f_pre = gate(0, pre), gate(1, pre), gate(2, pre)
    if peep is not None:
        i_pre = im.emit("add", [i_pre, im.emit("mul", [_cut(im, peep, 0, hidden), c])])
        f_pre = im.emit("add", [f_pre, im.emit("mul", [_cut(im, peep, 2 * hidden,
                                                                3 * hidden), c])])
    i, f = im.emit("sigmoid", [i_pre]), im.emit("sigmoid", [f_pre])
    cell = im.emit("add", [im.emit("mul", [f, c]),
                           im.emit("mul", [i, im.emit("tanh", [gate(3, pre)])])])
    if peep is not None:
        o_pre = im.emit("add", [o_pre, im.emit("mul", [_cut(im, peep, hidden, 2 * hidden),
                                                       cell])])
    o = im.emit("sigmoid", [o_pre])
    return im.emit("mul", [o, im.emit("tanh", [cell])]), cell

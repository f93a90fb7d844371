"""torch.nn.LSTM / GRU / RNN -> ONNX LSTM / GRU / RNN nodes (one per PyTorch layer).

The parameter arrays stay initializers in PyTorch layout under their IR names; the graph
reorders the gates (PyTorch LSTM ``i f g o`` -> ONNX ``i o f c``, GRU ``r z n`` ->
``z r h``), stacks the directions and concatenates the two biases, which the importer
folds back (:mod:`petab_sciml.formats.onnx_import.recurrent`).  Between layers, ONNX's
``Y`` (with its direction axis) is reshaped to PyTorch's ``(L, N, D * H)``.  Dropout
between layers acts only in training and is not exported; ``proj_size`` has no ONNX form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .exporter import _Exporter
from .registry import layer

_TORCH_TO_ONNX = {"LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2), "RNN": (0,)}
"""For each ONNX gate position, the PyTorch gate block it takes."""


def _gates(ex: _Exporter, name: str, op: str, hidden: int) -> str:
    """A PyTorch weight or bias ``name`` with its gate blocks in ONNX's order."""
    order = _TORCH_TO_ONNX[op]
    if len(order) == 1:
        return name
    pieces = ex.op("Split", [name, ex.ints([hidden] * len(order), "split")], len(order),
                   axis=0)
    return ex.op("Concat", [pieces[i] for i in order], axis=0)


@layer("LSTM", "GRU", "RNN")
def _recurrent(ex: _Exporter, lay: Any, ins: list[Any]) -> tuple[Any, ...]:
    """The ONNX nodes of a recurrent layer called with ``ins`` (``x`` and optionally
    ``h_0``, or ``(h_0, c_0)``); returns the layer's tuple of ONNX value names."""
    op, c, lid = lay.type, lay.config, lay.id
    hidden, n_dir, layers = int(c["hidden_size"]), 2 if c["bidirectional"] else 1, \
        int(c["num_layers"])
    x = ins[0]
    rank = ex.need_rank(x, op)
    unbatched = rank == 2
    if unbatched:
        x = ex.op("Unsqueeze", [x, ex.ints([1])])
    # onnxruntime runs only layout 0 (time first): batch_first inputs are transposed.
    batch_first = bool(c["batch_first"]) and not unbatched
    if batch_first:
        x = ex.op("Transpose", [x], perm=[1, 0, 2])
    states: list[Any] = []
    if len(ins) > 1:
        states = list(ins[1]) if op == "LSTM" else [ins[1]]
        if unbatched:
            states = [ex.op("Unsqueeze", [s, ex.ints([1])]) for s in states]
    attrs: dict[str, Any] = {"hidden_size": hidden,
                             "direction": "bidirectional" if n_dir == 2 else "forward"}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    if op == "RNN":
        attrs["activations"] = ["Relu" if c["nonlinearity"] == "relu" else "Tanh"] * n_dir
    finals: list[list[str]] = [[] for _ in range(2 if op == "LSTM" else 1)]
    y = x
    if c.get("proj_size", 0):  # ONNX's LSTM has no projection: the cell, step by step
        y = _unrolled_lstm(ex, lay, x, states, finals)
    for k in range(0 if c.get("proj_size", 0) else layers):
        w, r, b = [], [], []
        for sfx in ("", "_reverse")[:n_dir]:
            w.append(_gates(ex, ex.init(lid, f"weight_ih_l{k}{sfx}"), op, hidden))
            r.append(_gates(ex, ex.init(lid, f"weight_hh_l{k}{sfx}"), op, hidden))
            if c["bias"]:
                b.append(ex.op("Concat", [
                    _gates(ex, ex.init(lid, f"bias_ih_l{k}{sfx}"), op, hidden),
                    _gates(ex, ex.init(lid, f"bias_hh_l{k}{sfx}"), op, hidden)], axis=0))
        args = [y] + [_stack(ex, v) for v in (w, r)]
        args.append(_stack(ex, b) if b else "")
        args.append("")  # sequence_lens
        for s in states:
            part = ex.op("Slice", [s, ex.ints([k * n_dir], "starts"),
                                   ex.ints([(k + 1) * n_dir], "ends"), ex.ints([0])])
            args.append(part)
        while args[-1] == "":
            args.pop()
        outs = ex.op(op, args, 1 + len(finals), **attrs)
        for i, final in enumerate(outs[1:]):
            finals[i].append(final)
        y = ex.op("Transpose", [outs[0]], perm=[0, 2, 1, 3])  # (L, D, N, H) -> (L, N, D, H)
        y = ex.op("Reshape", [y, ex.ints([0, 0, -1], "shape")])
    hn = [f[0] if len(f) == 1 else ex.op("Concat", f, axis=0) for f in finals]
    if batch_first:
        y = ex.op("Transpose", [y], perm=[1, 0, 2])
    if unbatched:
        y = ex.op("Squeeze", [y, ex.ints([1])])
        hn = [ex.op("Squeeze", [h, ex.ints([1])]) for h in hn]
    return (y, (hn[0], hn[1])) if op == "LSTM" else (y, hn[0])


def _stack(ex: _Exporter, parts: list[str]) -> str:
    """Per-direction arrays stacked on a new leading axis."""
    ups = [ex.op("Unsqueeze", [p, ex.ints([0])]) for p in parts]
    return ups[0] if len(ups) == 1 else ex.op("Concat", ups, axis=0)


def _unrolled_lstm(ex: _Exporter, lay: Any, x: str, states: list[str],
                   finals: list[list[str]]) -> str:
    """An LSTM with ``proj_size`` as MatMul, Sigmoid and Tanh per time step (the
    sequence length must be static); returns ``(L, N, D * proj_size)`` and appends the
    final states of every layer and direction to ``finals``."""
    c, lid = lay.config, lay.id
    hidden, proj = int(c["hidden_size"]), int(c["proj_size"])
    n_dir = 2 if c["bidirectional"] else 1
    shape = ex.shape(x)
    steps = None if shape is None else shape[0]
    if steps is None:
        raise ex.error("an LSTM with proj_size is exported step by step (ONNX's LSTM has no "
                       "projection) and needs the static sequence length; pass input_shapes")

    def zeros(size: int) -> str:  # (N, size), N read off the input at run time
        batch = ex.op("Gather", [ex.op("Shape", [x]), ex.ints([1], "index")], axis=0)
        dims = ex.op("Concat", [batch, ex.ints([size], "size")], axis=0)
        return ex.op("ConstantOfShape", [dims], value=ex.numpy_helper.from_array(
            np.zeros(1, ex.np_dtype), "zero"))

    def transposed(name: str) -> str:
        return ex.op("Transpose", [ex.init(lid, name)], perm=[1, 0])

    def state(k: int, which: int, size: int) -> str:
        if not states:
            return zeros(size)
        part = ex.op("Gather", [states[which], ex.const(np.int64(k), dtype=np.int64,
                                                         name="index")], axis=0)
        return part

    y = x
    for k in range(int(c["num_layers"])):
        outs = []
        for d, sfx in enumerate(("", "_reverse")[:n_dir]):
            xw = ex.op("MatMul", [y, transposed(f"weight_ih_l{k}{sfx}")])
            if c["bias"]:
                xw = ex.op("Add", [xw, ex.op("Add", [ex.init(lid, f"bias_ih_l{k}{sfx}"),
                                                     ex.init(lid, f"bias_hh_l{k}{sfx}")])])
            w_hh, w_hr = transposed(f"weight_hh_l{k}{sfx}"), transposed(f"weight_hr_l{k}{sfx}")
            h, cell = state(k * n_dir + d, 0, proj), state(k * n_dir + d, 1, hidden)
            hs: list[str] = [""] * steps
            for t in (range(steps) if d == 0 else reversed(range(steps))):
                x_t = ex.op("Gather", [xw, ex.const(np.int64(t), dtype=np.int64,
                                                    name="index")], axis=0)
                gates = ex.op("Add", [x_t, ex.op("MatMul", [h, w_hh])])
                i, f, g, o = ex.op("Split", [gates, ex.ints([hidden] * 4, "split")], 4,
                                   axis=-1)
                cell = ex.op("Add", [ex.op("Mul", [ex.op("Sigmoid", [f]), cell]),
                                     ex.op("Mul", [ex.op("Sigmoid", [i]), ex.op("Tanh", [g])])])
                h = ex.op("MatMul", [ex.op("Mul", [ex.op("Sigmoid", [o]),
                                                   ex.op("Tanh", [cell])]), w_hr])
                hs[t] = ex.op("Unsqueeze", [h, ex.ints([0])])
            outs.append(ex.op("Concat", hs, axis=0) if steps > 1 else hs[0])
            finals[0].append(ex.op("Unsqueeze", [h, ex.ints([0])]))
            finals[1].append(ex.op("Unsqueeze", [cell, ex.ints([0])]))
        y = outs[0] if n_dir == 1 else ex.op("Concat", outs, axis=-1)
    return y

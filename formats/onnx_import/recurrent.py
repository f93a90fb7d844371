"""LSTM, GRU and RNN -> torch.nn.LSTM / GRU / RNN layers (one layer per ONNX node).

ONNX stacks the gates of each direction in another order than PyTorch (LSTM ``i o f c``
vs ``i f g o``; GRU ``z r h`` vs ``r z n``), keeps both directions in one array and the
input and recurrence biases in one vector; the converter reorders and splits them into
PyTorch's ``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0`` (and
``..._reverse``).  The outputs are PyTorch's reshaped to ONNX's layout: ``Y`` has a
direction axis (``(L, D, N, H)``; ``(N, L, D, H)`` with ``layout=1``).  A
``direction="reverse"`` node runs a forward layer on the time-flipped sequence.

What PyTorch's layers cannot compute, a weight the network computes, GRU with
``linear_before_reset=0`` (PyTorch's GRU applies the reset gate after the recurrence
matmul, which is ONNX's ``linear_before_reset=1``) and LSTM peepholes, runs unrolled
(:mod:`.recurrent_unrolled`); other activations, ``clip``, ``input_forget`` and varying
``sequence_lens`` are refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .importer import _Importer
from .recurrent_unrolled import needs_unrolling, unrolled
from .registry import handles, prepass
from .values import _C, _P

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


@prepass
def _claim_weight_subgraphs(im: _Importer) -> None:
    """The W, R, B, sequence_lens and P inputs of recurrent ops that exporters compute
    in the graph (reordering gates, slicing per direction) are folded ahead, and the
    nodes computing them left out: converting them would turn the initializers into
    free parameters (``rnn.weight_ih_l0``) that take the layer's id."""
    targets = {i: n for i, n in enumerate(im.graph.node) if n.op_type in _ORDER}
    producer = {o: i for i, n in enumerate(im.graph.node) for o in n.output}
    for node in targets.values():
        for k, name in enumerate(node.input):
            if k not in (1, 2, 3, 4, 7) or not name or name in im.inits \
                    or producer.get(name) is None:
                continue
            try:
                value, sources = im.fold_value(name)
            except ValueError:
                continue  # the converter reports it
            im.env[name] = _C(value, name)
            im.sources[name] = sources
    # Nodes whose results feed only those folded inputs are not converted (walking the
    # graph backwards, so that a node's consumers are decided before it).
    claimed: set[int] = set()
    nodes = im.graph.node
    for j in range(len(nodes) - 1, -1, -1):
        if j in targets:
            continue
        outs = [o for o in nodes[j].output if o]
        feeds = False
        for out in outs:
            if out in im.graph_outputs:
                break
            uses = im.consumers.get(out, [])
            folded_use = [c in targets and out in im.sources for c in uses]
            if not all(c in claimed or f for c, f in zip(uses, folded_use)):
                break
            feeds = feeds or bool(uses)
        else:
            if feeds:
                claimed.add(j)
    im.done.update(claimed)


@dataclass(frozen=True)
class _Setup:
    """What one ONNX recurrent node computes, checked against PyTorch's layers."""

    op: str
    direction: str
    n_dir: int
    nonlinearity: str
    layout: int
    hidden: int


def _common_checks(im: _Importer, node: Any, ins: list) -> tuple[str, int, str, int]:
    """``(direction, directions, nonlinearity, layout)`` of a recurrent node, refusing
    what neither the layers nor the unrolled path compute: other activations, ``clip``,
    ``input_forget``, varying ``sequence_lens``."""
    at = im.attrs(node)
    direction = at.get("direction", "forward")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("forward", "reverse", "bidirectional"):
        raise im.error(node, f"direction {direction!r} is not supported")
    n_dir = 2 if direction == "bidirectional" else 1
    nonlinearity = _nonlinearity(im, node, node.op_type, at, n_dir)
    if at.get("clip") is not None:
        raise im.error(node, "clip (cell clipping) is not supported: PyTorch's recurrent "
                       "layers do not clip")
    if at.get("input_forget", 0):
        raise im.error(node, "input_forget=1 (coupled input and forget gates) is not "
                       "supported")
    layout = int(at.get("layout", 0))
    if len(ins) > 4 and ins[4] is not None:
        lens = im.folded(node, 4, "sequence_lens")[0]
        x_shape = im.shape(ins[0])
        steps = None if x_shape is None else x_shape[1 if layout else 0]
        if steps is None or np.any(np.asarray(lens) != steps):
            raise im.error(node, "sequence_lens must equal the sequence length for every "
                           "sample (padded sequences are not supported)")
    return direction, n_dir, nonlinearity, layout


def _setup(im: _Importer, node: Any, ins: list) -> _Setup:
    op = node.op_type
    at = im.attrs(node)
    direction, n_dir, nonlinearity, layout = _common_checks(im, node, ins)
    r = im.folded(node, 2, "R")[0]
    hidden = int(at.get("hidden_size", r.shape[-1]))
    return _Setup(op, direction, n_dir, nonlinearity, layout, hidden)


def _arrays(im: _Importer, node: Any, ins: list, setup: _Setup, k: int
            ) -> tuple[dict[str, tuple[np.ndarray, Any, str]], int, bool]:
    """PyTorch's arrays of layer ``k`` from one ONNX node: ``(arrays, input_size, bias)``."""
    op, n_dir, hidden = setup.op, setup.n_dir, setup.hidden
    w, w_from = im.folded(node, 1, "W")
    r, r_from = im.folded(node, 2, "R")
    has_b = len(ins) > 3 and ins[3] is not None
    b, b_from = im.folded(node, 3, "B") if has_b else (None, [])
    gates = len(_ORDER[op][0]) * hidden
    if w.shape[:2] != (n_dir, gates) or r.shape != (n_dir, gates, hidden):
        raise im.error(node, f"W {tuple(w.shape)} and R {tuple(r.shape)} do not fit "
                       f"hidden_size {hidden} with {n_dir} direction(s)")
    arrays: dict[str, tuple[np.ndarray, Any, str]] = {}
    for d in range(n_dir):
        sfx = "_reverse" if d else ""
        pieces = [(f"weight_ih_l{k}{sfx}", w[d], 1, w_from),
                  (f"weight_hh_l{k}{sfx}", r[d], 2, r_from)]
        if b is not None:
            pieces += [(f"bias_ih_l{k}{sfx}", b[d, :gates], 3, b_from),
                       (f"bias_hh_l{k}{sfx}", b[d, gates:], 3, b_from)]
        for name, value, index, sources in pieces:
            v = ins[index]
            note = f"direction {d}, gates {_ORDER[op][0]} -> {_ORDER[op][1]}"
            if not isinstance(v, _P) and sources:  # computed from initializers
                v = _P(_source_for(name, sources), node.input[index])
                note = "read through the graph's gate reordering"
            arrays[name] = (_reorder(value, op), v, note)
    return arrays, int(w.shape[2]), b is not None


@handles("LSTM", "GRU", "RNN")
def _recurrent(im: _Importer, node: Any, ins: list) -> None:
    if needs_unrolling(im, node, ins):
        unrolled(im, node, ins, _common_checks(im, node, ins)[2])
        return
    setup = _setup(im, node, ins)
    op, layout, n_dir, hidden = setup.op, setup.layout, setup.n_dir, setup.hidden
    chain = _stack(im, node, setup)
    arrays: dict[str, tuple[np.ndarray, Any, str]] = {}
    bias = True
    input_size = 0
    for k, (_, member, member_ins) in enumerate(chain):
        more, size, has_bias = _arrays(im, member, member_ins, setup, k)
        arrays.update(more)
        input_size = input_size or size
        bias = bias and has_bias
    if not bias and any(name.startswith("bias") for name in arrays):
        raise im.error(node, "stacked layers with and without biases")
    args: dict[str, Any] = {"input_size": input_size, "hidden_size": hidden}
    if len(chain) > 1:
        args["num_layers"] = len(chain)
    if op == "RNN" and setup.nonlinearity != "tanh":
        args["nonlinearity"] = setup.nonlinearity
    if not bias:
        args["bias"] = False
    if layout:
        args["batch_first"] = True
    if n_dir == 2:
        args["bidirectional"] = True

    time_axis = 1 if layout else 0
    seq = im.tensor(ins[0], node)
    if setup.direction == "reverse":
        seq = im.emit("flip", [seq], {"dims": [time_axis]})
    layer_inputs: list[Any] = [seq]
    states = _chain_states(im, chain, setup)
    if states is not None:
        layer_inputs.append(states if op == "LSTM" else states[0])
    ref = im.add_layer(node, op, args, arrays, layer_inputs)

    last = chain[-1][1]
    if im.used(last, 0):
        out = im.emit("getitem", [ref], {"index": 0})
        if setup.direction == "reverse":
            out = im.emit("flip", [out], {"dims": [time_axis]})
        dir_axis = 2 if layout else 1
        if n_dir == 1:
            y = im.emit("unsqueeze", [out], {"dim": dir_axis}, name=im.out_name(last, 0))
        else:
            halves = [im.emit("getitem", [out], {"index": ["...", {"slice": s}]})
                      for s in ([None, hidden, None], [hidden, None, None])]
            y = im.emit("stack", [halves], {"dim": dir_axis}, name=im.out_name(last, 0))
        im.bind(last, 0, y)
    n_states = 2 if op == "LSTM" else 1
    finals: str | None = None
    for k, (_, member, _) in enumerate(chain):
        for j in range(1, n_states + 1):
            if not im.used(member, j):
                continue
            if finals is None:
                finals = im.emit("getitem", [ref], {"index": 1})
            state = finals if op != "LSTM" else im.emit("getitem", [finals],
                                                        {"index": j - 1})
            if len(chain) > 1:  # this node's layer: rows k*D .. (k+1)*D of h_n
                state = im.emit("getitem", [state],
                                {"index": {"slice": [k * n_dir, (k + 1) * n_dir, None]}})
            if layout:  # PyTorch's states are (D, N, H) whatever batch_first says
                state = im.emit("transpose", [state], {"dim0": 0, "dim1": 1})
            im.bind(member, j, im.emit("contiguous", [state], name=im.out_name(member, j)))
        if any(im.used(member, j) for j in range(n_states + 1, len(member.output))):
            raise im.error(member, f"{op} has no output {len(member.output) - 1}")


def _source_for(array: str, sources: list[str]) -> str:
    """The initializer an array was computed from: the one named like PyTorch's array
    (``rnn.weight_ih_l1``, as PyTorch's and our exporter write them), else the first."""
    return next((s for s in sources if s.rsplit(".", 1)[-1] == array), sources[0])


def _chain_states(im: _Importer, chain: list, setup: _Setup) -> list[str] | None:
    """The initial states of a stack of layers in PyTorch's (num_layers * D, N, H)
    layout, or None when every layer starts from zeros (PyTorch's default)."""
    indices = (5, 6) if setup.op == "LSTM" else (5,)
    per_layer = [[_state(im, member, member_ins, i, setup) for i in indices]
                 for _, member, member_ins in chain]
    if all(s is None for states in per_layer for s in states):
        return None
    out = []
    for j in range(len(indices)):
        parts = []
        for states in per_layer:
            s = states[j]
            if s is None:  # a zero state beside given ones: shaped like its partner
                s = im.emit("mul", [next(x for x in states if x is not None), 0.0])
            parts.append(s)
        out.append(parts[0] if len(parts) == 1 else im.emit("cat", [parts], {"dim": 0}))
    return out


# ---------------------------------------------------------------- stacked layers
_DATA_GLUE = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten"}
"""Ops that may move one layer's Y into the next layer's X (the sizes they use may be
computed from Shape of those values)."""


def _stack(im: _Importer, node: Any, setup: _Setup) -> list[tuple[int, Any, list]]:
    """The chain of ONNX nodes that form one multi-layer PyTorch layer, starting at
    ``node``: each next node has the same op and settings and reads, through reshapes
    only, the previous node's ``Y`` as PyTorch passes it between layers (checked by
    running those reshapes on a probe).  Nodes taken into the chain (and the reshapes
    between them) are marked done."""
    chain = [(im.index, node, im.inputs(node))]
    if setup.direction == "reverse":
        return chain
    current = node
    while True:
        found = _next_layer(im, current, setup)
        if found is None:
            return chain
        index, nxt, glue, ins = found
        chain.append((index, nxt, ins))
        im.done.update(glue)
        im.done.add(index)
        current = nxt


def _next_layer(im: _Importer, node: Any, setup: _Setup
                ) -> tuple[int, Any, set, list] | None:
    y = node.output[0]
    y_shape = im.shapes.get(y)
    if not y or y in im.graph_outputs or y_shape is None or any(d is None for d in y_shape):
        return None
    producer = {o: i for i, n in enumerate(im.graph.node) for o in n.output}
    position = producer[y]
    candidates = [i for i, n in enumerate(im.graph.node) if i > position
                  and n.op_type == setup.op and i not in im.done]
    if not candidates:
        return None
    index = candidates[0]
    nxt = im.graph.node[index]
    # Nodes computing nxt's X, and which of them depend on Y (as data, or through sizes).
    needed: dict[int, Any] = {}
    stack = list(nxt.input)
    while stack:
        name = stack.pop()
        if name == y or name in im.inits or not name or name in im.env:
            continue  # Y, an initializer, or converted before this layer
        i = producer.get(name)
        if i is None or i in im.done:
            return None  # a graph input, or part of another pattern
        if i in needed:
            continue
        needed[i] = im.graph.node[i]
        stack.extend(needed[i].input)
    data, sizes = {y}, set()
    on_y: set[int] = set()
    for i in sorted(needed):
        n = needed[i]
        if any(v in data for v in n.input):
            if n.op_type in ("Shape", "Size"):
                sizes.update(n.output)
            elif n.op_type in _DATA_GLUE and n.input[0] in data and not any(
                    v in data for v in list(n.input)[1:]):
                data.update(n.output)
            else:
                return None
            on_y.add(i)
        elif any(v in sizes for v in n.input):
            sizes.update(n.output)
            on_y.add(i)
    if nxt.input[0] not in data:
        return None
    for i in on_y:  # what depends on Y feeds nothing but the next layer
        for out in needed[i].output:
            if out in im.graph_outputs or any(c not in on_y and c != index
                                              for c in im.consumers.get(out, [])):
                return None
    if any(c not in on_y for c in im.consumers.get(y, [])):
        return None
    if any(v in data for v in list(nxt.input)[1:]):
        return None
    probe = (np.arange(int(np.prod(y_shape)), dtype=np.float32) - 0.5).reshape(y_shape)
    nodes = [needed[i] for i in sorted(needed)]
    ins: list[Any] = [None]
    for name in list(nxt.input)[1:]:  # an initial state sized from Y: fixed by Y's shape
        if name in sizes:
            value = _run(im, nodes, y, name, probe)
            if value is None:
                return None
            ins.append(_C(value, name))
        else:
            ins.append(im.env.get(name) if name else None)
    try:
        nxt_setup = _setup(im, nxt, ins)
    except Exception:  # noqa: BLE001 - not mergeable; converted (and reported) on its own
        return None
    if nxt_setup != setup or needs_unrolling(im, nxt, ins):
        return None   # another layer, or one no PyTorch layer computes
    # Run the reshapes on the probe: they must turn Y into PyTorch's (L, N, D * H).
    if setup.layout:  # (N, L, D, H)
        expected = probe.reshape(y_shape[0], y_shape[1], -1)
    else:  # (L, D, N, H)
        expected = probe.transpose(0, 2, 1, 3).reshape(y_shape[0], y_shape[2], -1)
    got = _run(im, nodes, y, nxt.input[0], probe)
    if got is None or got.shape != expected.shape or not np.array_equal(got, expected):
        return None
    return index, nxt, on_y, ins


def _run(im: _Importer, nodes: list, y: str, x: str, probe: np.ndarray) -> np.ndarray | None:
    """``x`` computed by ``nodes`` from ``y = probe`` (and initializers)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    feeds = {y: probe}
    outputs = {o for n in nodes for o in n.output}
    for n in nodes:
        for name in n.input:
            if name and name not in feeds and name not in outputs:
                value = im.array(im.env[name]) if name in im.env else im.inits.get(name)
                if value is None:
                    return None  # a value known only at run time
                feeds[name] = value
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype),
                                            v.shape) for name, v in feeds.items()]
    graph = helper.make_graph(nodes, "probe", inputs, [helper.make_tensor_value_info(x, 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", im.opset)])
    try:
        (out,) = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - not the reshapes PyTorch's layers need
        return None
    return np.asarray(out)


def _state(im: _Importer, node: Any, ins: list, index: int, setup: _Setup) -> str | None:
    """An initial state input in PyTorch's (D, N, H) layout, or None (absent or zero:
    PyTorch's default)."""
    if index >= len(ins) or ins[index] is None:
        return None
    v = ins[index]
    shape = im.shape(v)
    if shape is not None and (len(shape) != 3 or shape[-1] not in (None, setup.hidden)):
        what = "initial_c" if index == 6 else "initial_h"
        raise im.error(node, f"{what} has shape {tuple(shape)}, which does not fit "
                       f"hidden_size {setup.hidden} (expected (directions, batch, "
                       f"{setup.hidden}))")
    layout = setup.layout
    value = im.array(v)
    if value is not None and isinstance(v, _C) and not np.any(value):
        return None
    ref = im.tensor(v, node)
    if layout:
        ref = im.emit("transpose", [ref], {"dim0": 0, "dim1": 1})
    return ref

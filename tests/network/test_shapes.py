"""Shape inference (petab_sciml.shapes) against PyTorch: every reference case's inputs
give exactly the shapes of the outputs PyTorch computed (stored in the case), and
inconsistent inputs fail where PyTorch fails."""

from __future__ import annotations

import numpy as np
import pytest

from petab_sciml import testcases
from petab_sciml.formats.yaml import read
from petab_sciml.shapes import ShapeError, infer_shapes, output_shapes
from tests.support.suite import ml_import_cases

CASES = sorted(testcases.discover([testcases.bundled_cases()])) + ml_import_cases()


@pytest.mark.parametrize("folder", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_output_shapes_match_pytorch_references(folder):
    case = testcases.load_case(folder)
    network = read(case.net_file)
    inputs = testcases._inputs_of(case, 0)
    expected = [np.asarray(a).shape for a in testcases._read_single(case.outputs[0],
                                                                      "outputs")]
    got = output_shapes(network, [a.shape for a in inputs])
    if got is None:
        pytest.fail(f"no shape rule for a node of {case.net_file}")
    assert got == expected


def _net(layers, nodes, inputs=("x",)):
    from petab_sciml.network import Network

    return Network.build("n", list(inputs), layers, nodes)


def _chain(layer_type, args):
    return _net([{"layer_id": "l", "layer_type": layer_type, "args": args}],
                [{"name": "x", "op": "placeholder", "target": "x"},
                 {"name": "l", "op": "call_module", "target": "l", "args": ["x"]},
                 {"name": "output", "op": "output", "target": "output", "args": ["l"]}])


@pytest.mark.parametrize("layer_type, args, shape", [
    ("Linear", {"in_features": 2, "out_features": 3}, (5,)),
    ("Conv2d", {"in_channels": 3, "out_channels": 2, "kernel_size": 3}, (2, 8, 8)),
    ("Conv1d", {"in_channels": 1, "out_channels": 2, "kernel_size": 5}, (1, 3)),
    ("MaxPool2d", {"kernel_size": 4}, (1, 3, 3)),
    ("LayerNorm", {"normalized_shape": [4]}, (3, 5)),
    ("BatchNorm1d", {"num_features": 3}, (2, 4)),
    ("LSTM", {"input_size": 3, "hidden_size": 4}, (5, 2)),
    ("GRU", {"input_size": 3, "hidden_size": 4}, (2, 5, 1, 3)),
    ("RNN", {"input_size": 3, "hidden_size": 4}, (3,)),
    ("LocalResponseNorm", {"size": 2}, (3, 4)),
])
def test_inconsistent_input_fails_where_pytorch_fails(layer_type, args, shape):
    torch = pytest.importorskip("torch")
    module = getattr(torch.nn, layer_type)(**args)
    with pytest.raises((RuntimeError, ValueError)):
        module(torch.zeros(shape))
    net = (_recurrent_net(layer_type, args, False) if layer_type in ("LSTM", "GRU", "RNN")
           else _chain(layer_type, args))
    with pytest.raises(ShapeError, match="forward node 'l'"):
        infer_shapes(net, [shape])


def test_node_without_rule_makes_shapes_unknown(monkeypatch):
    from petab_sciml import shapes

    net = _net([], [{"name": "x", "op": "placeholder", "target": "x"},
                    {"name": "r", "op": "call_function", "target": "relu", "args": ["x"]},
                    {"name": "output", "op": "output", "target": "output", "args": ["r"]}])
    assert infer_shapes(net, [(3,)]) == {"x": (3,), "r": (3,)}
    monkeypatch.delitem(shapes._FUNCTIONS, "relu")
    assert infer_shapes(net, [(3,)]) is None


def _recurrent_net(layer_type, args, with_state):
    state = ["h", "c"] if layer_type == "LSTM" else "h"
    inputs = ["x", "h", "c"] if layer_type == "LSTM" else ["x", "h"]
    placeholders = [{"name": n, "op": "placeholder", "target": n}
                    for n in (inputs if with_state else ["x"])]
    call = ["x", state] if with_state else ["x"]
    nodes = placeholders + [
        {"name": "l", "op": "call_module", "target": "l", "args": call},
        {"name": "out", "op": "call_function", "target": "getitem", "args": ["l", 0]},
        {"name": "hn", "op": "call_function", "target": "getitem", "args": ["l", 1]}]
    outputs = ["out", "hn"]
    if layer_type == "LSTM":
        nodes[-1] = {"name": "st", "op": "call_function", "target": "getitem",
                     "args": ["l", 1]}
        nodes += [{"name": "hn", "op": "call_function", "target": "getitem",
                   "args": ["st", 0]},
                  {"name": "cn", "op": "call_function", "target": "getitem",
                   "args": ["st", 1]}]
        outputs = ["out", "hn", "cn"]
    nodes.append({"name": "output", "op": "output", "target": "output", "args": [outputs]})
    layers = [{"layer_id": "l", "layer_type": layer_type, "args": args}]
    return _net(layers, nodes, inputs if with_state else ["x"])


@pytest.mark.parametrize("layer_type, args, x_shape", [
    ("LSTM", {"input_size": 3, "hidden_size": 5, "num_layers": 2, "bidirectional": True,
              "batch_first": True}, (4, 7, 3)),
    ("LSTM", {"input_size": 3, "hidden_size": 5, "proj_size": 2}, (7, 3)),
    ("GRU", {"input_size": 2, "hidden_size": 4, "num_layers": 3}, (6, 2, 2)),
    ("RNN", {"input_size": 2, "hidden_size": 4, "bidirectional": True}, (6, 2)),
])
@pytest.mark.parametrize("with_state", [False, True])
def test_recurrent_shapes_and_state_checks_match_pytorch(layer_type, args, x_shape,
                                                         with_state):
    """Outputs and final states as PyTorch returns them; a given initial state of a wrong
    shape fails as in PyTorch."""
    torch = pytest.importorskip("torch")
    module = getattr(torch.nn, layer_type)(**args)
    net = _recurrent_net(layer_type, args, with_state)
    x = torch.zeros(x_shape)
    out, state = module(x)
    states = list(state) if layer_type == "LSTM" else [state]
    expected = [tuple(out.shape)] + [tuple(s.shape) for s in states]
    state_shapes = [tuple(s.shape) for s in states] if with_state else []
    assert output_shapes(net, [x_shape, *state_shapes]) == expected
    if with_state:
        bad = [s[:-1] + (s[-1] + 1,) for s in state_shapes]
        given = tuple(torch.zeros(s) for s in bad)
        with pytest.raises(RuntimeError):
            module(x, given if layer_type == "LSTM" else given[0])
        with pytest.raises(ShapeError, match="forward node 'l'"):
            infer_shapes(net, [x_shape, *bad])


@pytest.mark.parametrize("size, chunks", [(6, 3), (5, 3), (5, 4), (2, 4)])
def test_chunk_pieces_match_pytorch(size, chunks):
    """torch.chunk gives pieces of ceil(size / chunks), possibly fewer than asked for;
    reading a piece that does not exist fails."""
    torch = pytest.importorskip("torch")
    pieces = torch.zeros(3, size).chunk(chunks, dim=1)
    nodes = [{"name": "x", "op": "placeholder", "target": "x"},
             {"name": "c", "op": "call_function", "target": "chunk", "args": ["x", chunks, 1]}]
    nodes += [{"name": f"p{k}", "op": "call_function", "target": "getitem",
               "args": ["c", k]} for k in range(chunks)]
    nodes.append({"name": "output", "op": "output", "target": "output",
                  "args": [[f"p{k}" for k in range(len(pieces))]]})
    net = _net([], nodes)
    if len(pieces) == chunks:
        assert output_shapes(net, [(3, size)]) == [tuple(p.shape) for p in pieces]
    else:
        with pytest.raises(ShapeError, match=f"forward node 'p{len(pieces)}'"):
            infer_shapes(net, [(3, size)])

"""Shape inference (petab_sciml.shapes) against PyTorch: every reference case's inputs
give exactly the shapes of the outputs PyTorch computed (stored in the case), and
inconsistent inputs fail where PyTorch fails."""

from __future__ import annotations

import numpy as np
import pytest

from petab_sciml import testcases
from petab_sciml.formats.yaml import read
from petab_sciml.shapes import ShapeError, infer_shapes, output_shapes
from tests.conftest import ml_import_cases

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
])
def test_inconsistent_input_fails_where_pytorch_fails(layer_type, args, shape):
    torch = pytest.importorskip("torch")
    module = getattr(torch.nn, layer_type)(**args)
    with pytest.raises(RuntimeError):
        module(torch.zeros(shape))
    with pytest.raises(ShapeError, match="forward node 'l'"):
        infer_shapes(_chain(layer_type, args), [shape])


def test_node_without_rule_makes_shapes_unknown(monkeypatch):
    from petab_sciml import shapes

    net = _net([], [{"name": "x", "op": "placeholder", "target": "x"},
                    {"name": "r", "op": "call_function", "target": "relu", "args": ["x"]},
                    {"name": "output", "op": "output", "target": "output", "args": ["r"]}])
    assert infer_shapes(net, [(3,)]) == {"x": (3,), "r": (3,)}
    monkeypatch.delitem(shapes._FUNCTIONS, "relu")
    assert infer_shapes(net, [(3,)]) is None

"""GatherElements, ScatterElements and ScatterND with constant indices
(``formats/onnx_import/scatter.py``) against onnxruntime, on shapes and indices beyond
ONNX's own node cases (rank 3, negative axes, runs and duplicates), and their refusals."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from petab_sciml.errors import PetabSciMLError  # noqa: E402
from tests.support.classic_onnx import outputs_against_onnxruntime  # noqa: E402


def _model(op: str, data_shape, out_shape, indices: np.ndarray, *, updates_shape=None,
           indices_as_input: bool = False, **attrs):
    inputs = [helper.make_tensor_value_info("data", TensorProto.FLOAT, data_shape)]
    inits = []
    if indices_as_input:
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, indices.shape))
    else:
        inits.append(numpy_helper.from_array(indices.astype(np.int64), "idx"))
    names = ["data", "idx"]
    if updates_shape is not None:
        inputs.append(helper.make_tensor_value_info("upd", TensorProto.FLOAT, updates_shape))
        names.append("upd")
    # the data go through Tanh so that the op reads a network value, not a graph input
    nodes = [helper.make_node("Tanh", ["data"], ["t"]),
             helper.make_node(op, ["t", *names[1:]], ["y"], **attrs)]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _agree(model, feeds):
    reference, got, _ = outputs_against_onnxruntime(model, feeds)
    for name, outputs in got.items():
        np.testing.assert_allclose(outputs[0], reference[0], rtol=1e-6, atol=1e-7,
                                   err_msg=name)


RNG = np.random.default_rng(7)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_rank3(axis):
    shape = (3, 4, 5)
    idx_shape = list(shape)
    idx_shape[axis] = 6
    idx = RNG.integers(-shape[axis], shape[axis], size=idx_shape)
    model = _model("GatherElements", shape, idx_shape, idx, axis=axis)
    _agree(model, {"data": RNG.normal(size=shape).astype(np.float32)})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_rank3_with_duplicates(reduction):
    shape, idx_shape, axis = (3, 4, 5), (3, 2, 5), 1
    idx = RNG.integers(-4, 4, size=idx_shape)
    if reduction == "none":   # ONNX leaves duplicates undefined there
        idx = np.broadcast_to(np.array([0, 2]).reshape(1, 2, 1), idx_shape).copy()
    model = _model("ScatterElements", shape, shape, idx, updates_shape=idx_shape, axis=axis,
                   reduction=reduction)
    _agree(model, {"data": RNG.normal(size=shape).astype(np.float32),
                   "upd": RNG.normal(size=idx_shape).astype(np.float32)})


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_slices(reduction):
    shape = (4, 3, 2)
    idx = np.array([[[1, 2], [3, 0]], [[0, 1], [-1, 2]]])         # (2, 2, 2): k = 2
    if reduction != "none":
        idx[1, 1] = [1, 2]                                           # a duplicate target
    upd_shape = (2, 2, 2)
    model = _model("ScatterND", shape, shape, idx, updates_shape=upd_shape,
                   reduction=reduction)
    _agree(model, {"data": RNG.normal(size=shape).astype(np.float32),
                   "upd": RNG.normal(size=upd_shape).astype(np.float32)})


def test_out_of_range_index_is_refused_naming_the_node():
    from petab_sciml.formats.onnx import import_onnx

    model = _model("GatherElements", (2, 3), (2, 3), np.array([[0, 1, 3], [0, 0, 0]]), axis=1)
    with pytest.raises(PetabSciMLError, match="index 3 is out of range for axis 1 of size 3"):
        import_onnx(model)


def test_indices_computed_by_the_network_are_refused():
    from petab_sciml.formats.onnx import import_onnx

    model = _model("GatherElements", (2, 3), (2, 3), np.zeros((2, 3), np.int64), axis=1,
                   indices_as_input=True)
    with pytest.raises(PetabSciMLError, match="integer"):
        import_onnx(model)

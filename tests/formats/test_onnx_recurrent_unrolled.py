"""Recurrent ONNX ops that PyTorch's layers cannot compute, unrolled
(``formats/onnx_import/recurrent_unrolled.py``): GRU with ``linear_before_reset=0`` and
LSTM peepholes against onnxruntime; weights the network computes against onnxruntime
(values) and against the layer path, i.e. ``torch.nn.RNN/GRU/LSTM`` with the same weights
as initializers (input gradients), in both backends."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from petab_sciml.formats.onnx import import_onnx  # noqa: E402
from tests.support.network_backends import network_backends  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


_backends = network_backends


def _arrays(op: str, directions: int, layout: int, rng) -> dict[str, np.ndarray]:
    steps, batch, features, hidden = 4, 2, 3, 5
    g = GATES[op] * hidden
    out = {"X": rng.standard_normal((batch, steps, features) if layout
                                    else (steps, batch, features)),
           "W": 0.5 * rng.standard_normal((directions, g, features)),
           "R": 0.5 * rng.standard_normal((directions, g, hidden)),
           "B": 0.3 * rng.standard_normal((directions, 2 * g)),
           "initial_h": rng.standard_normal((batch, directions, hidden) if layout
                                            else (directions, batch, hidden))}
    if op == "LSTM":
        out["initial_c"] = rng.standard_normal(out["initial_h"].shape)
        out["P"] = 0.4 * rng.standard_normal((directions, 3 * hidden))
    return {k: v.astype(np.float32) for k, v in out.items()}


def _model(op: str, arrays: dict, as_inputs: set[str], **attrs):
    order = ["X", "W", "R", "B", "", "initial_h", "initial_c", "P"]
    order = order[:8 if op == "LSTM" else 6]
    node = helper.make_node(op, [n if n in arrays else "" for n in order],
                            ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else []),
                            hidden_size=5, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, arrays[n].shape)
         for n in order if n in as_inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output],
        [numpy_helper.from_array(arrays[n], n) for n in order
         if n in arrays and n not in as_inputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _run(model, feeds: dict, cotangents=None):
    imported = import_onnx(model)
    names = [i.name for i in model.graph.input]
    results = []
    for backend in _backends():
        net = backend.build(imported.network, dtype=imported.dtype)
        backend.set_parameters(net, imported.parameters)
        inputs = [feeds[n] for n in names]
        outs = [np.asarray(o) for o in backend.forward(net, inputs)]
        grads = backend.vjp(net, inputs, cotangents)[1] if cotangents is not None else None
        results.append((backend.name, outs, grads))
    return results


def _onnxruntime(model, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_gru_without_linear_before_reset_equals_onnxruntime(direction, layout):
    """onnxruntime has no batch-first (layout=1) recurrence: there its time-first result,
    transposed, is the reference."""
    directions = 2 if direction == "bidirectional" else 1
    arrays = _arrays("GRU", directions, 0, np.random.default_rng(0))
    expected = _onnxruntime(_model("GRU", arrays, {"X"}, direction=direction), arrays)
    if layout:
        arrays = {k: v.transpose(1, 0, 2) if k in ("X", "initial_h") else v
                  for k, v in arrays.items()}
        expected = [expected[0].transpose(2, 0, 1, 3), expected[1].transpose(1, 0, 2)]
    model = _model("GRU", arrays, {"X"}, direction=direction, layout=layout)
    for name, outs, _ in _run(model, arrays):
        for got, ref in zip(outs, expected, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_with_peepholes_equals_onnxruntime(direction):
    directions = 2 if direction == "bidirectional" else 1
    arrays = _arrays("LSTM", directions, 0, np.random.default_rng(1))
    model = _model("LSTM", arrays, {"X"}, direction=direction)
    expected = _onnxruntime(model, arrays)
    for name, outs, _ in _run(model, arrays):
        for got, ref in zip(outs, expected, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_computed_weights_equal_onnxruntime_and_the_layer_path(op):
    """W, R and B as graph inputs run unrolled; the same weights as initializers run as
    torch.nn layers.  Outputs equal onnxruntime's; the gradient to X of both paths agree."""
    rng = np.random.default_rng(2)
    arrays = _arrays(op, 2, 0, rng)
    arrays.pop("P", None)
    attrs = {"direction": "bidirectional"}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    unrolled = _model(op, arrays, {"X", "W", "R", "B"}, **attrs)
    layer = _model(op, arrays, {"X"}, **attrs)
    expected = _onnxruntime(unrolled, arrays)
    cotangents = [rng.standard_normal(e.shape).astype(np.float32) for e in expected]
    by_layer = {name: grads[0] for name, _, grads in _run(layer, arrays, cotangents)}
    for name, outs, grads in _run(unrolled, arrays, cotangents):
        for got, ref in zip(outs, expected, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(np.asarray(grads[0]), np.asarray(by_layer[name]),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def test_scan_with_directions_and_axes_equals_onnxruntime():
    """Scan unrolled (``formats/onnx_import/scan.py``): two states (a running sum and a
    running product with a weight from outside the body), one scan input read backwards
    along axis 1, scan outputs stacked along axis 1 and reversed."""
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Mul", ["p_in", "x_t"], ["p_mul"]),
         helper.make_node("Mul", ["p_mul", "w"], ["p_out"]),
         helper.make_node("Tanh", ["s_out"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("s_in", f32, None),
         helper.make_tensor_value_info("p_in", f32, None),
         helper.make_tensor_value_info("x_t", f32, None)],
        [helper.make_tensor_value_info("s_out", f32, None),
         helper.make_tensor_value_info("p_out", f32, None),
         helper.make_tensor_value_info("y_t", f32, None)])
    node = helper.make_node("Scan", ["s0", "p0", "x"], ["s", "p", "y"], body=body,
                            num_scan_inputs=1, scan_input_axes=[1],
                            scan_input_directions=[1], scan_output_axes=[1],
                            scan_output_directions=[1])
    rng = np.random.default_rng(3)
    feeds = {"s0": rng.standard_normal((2, 3)).astype(np.float32),
             "p0": rng.standard_normal((2, 3)).astype(np.float32),
             "x": rng.standard_normal((2, 4, 3)).astype(np.float32)}
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, f32, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, f32, None) for o in ("s", "p", "y")],
        [numpy_helper.from_array(np.float32(0.9) * np.ones(3, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    expected = _onnxruntime(model, feeds)
    for name, outs, _ in _run(model, feeds):
        for got, ref in zip(outs, expected, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("second_linear_before_reset", [0, 1])
def test_stacked_grus_merge_only_where_a_layer_computes_both(second_linear_before_reset):
    """Two GRUs fed one into the other (Squeeze between, as exporters write stacks): with
    linear_before_reset=1 in both they become one two-layer GRU; a second one without it
    must not join the layer (it runs unrolled).  Against onnxruntime."""
    rng = np.random.default_rng(4)
    f32 = TensorProto.FLOAT
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    inits = {"W1": 0.5 * rng.standard_normal((1, 15, 3)), "R1": 0.5 * rng.standard_normal(
        (1, 15, 5)), "W2": 0.5 * rng.standard_normal((1, 15, 5)),
        "R2": 0.5 * rng.standard_normal((1, 15, 5)), "axes": np.array([1])}
    nodes = [helper.make_node("GRU", ["X", "W1", "R1"], ["Y1"], hidden_size=5,
                              linear_before_reset=1),
             helper.make_node("Squeeze", ["Y1", "axes"], ["H1"]),
             helper.make_node("GRU", ["H1", "W2", "R2"], ["Y2"], hidden_size=5,
                              linear_before_reset=second_linear_before_reset)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", f32, x.shape)],
        [helper.make_tensor_value_info("Y2", f32, None)],
        [numpy_helper.from_array(v.astype(np.float32) if v.dtype.kind == "f" else v, k)
         for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    expected = _onnxruntime(model, {"X": x})
    layers = {layer.type for layer in import_onnx(model).network.layers.values()}
    assert layers == {"GRU"}                       # the first GRU (or both) as a layer
    for name, outs, _ in _run(model, {"X": x}):
        np.testing.assert_allclose(outs[0], expected[0], rtol=1e-5, atol=1e-5, err_msg=name)

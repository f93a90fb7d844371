"""ONNX LSTM, GRU and RNN nodes become torch.nn.LSTM / GRU / RNN layers that give
onnxruntime's outputs in both backends; what PyTorch's layers cannot compute is refused
with the reason.  (Files written by PyTorch's exporters: tests/formats/test_onnx_pytorch.py.)"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats.onnx import import_onnx  # noqa: E402
from petab_sciml.plugins import get_backend  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
L, N, IN, H = 5, 2, 3, 4


def _recurrent_model(op: str, *, direction: str = "forward", layout: int = 0,
                     bias: bool = True, states: bool = False, seq_lens: bool = False,
                     outputs: tuple[int, ...] = (0, 1), **attrs):
    rng = np.random.default_rng(hash((op, direction, layout, bias, states)) % 2**32)
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op] * H
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (d, g, IN)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, 0.5, (d, g, H)).astype(np.float32), "R")]
    names = ["x", "W", "R"]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.3, (d, 2 * g))
                                             .astype(np.float32), "B"))
    names.append("B" if bias else "")
    if seq_lens:
        inits.append(numpy_helper.from_array(np.full(N, L, np.int32), "lens"))
    names.append("lens" if seq_lens else "")
    graph_inputs = [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [N, L, IN] if layout else [L, N, IN])]
    state_shape = [N, d, H] if layout else [d, N, H]
    if states:
        names.append("h0")
        graph_inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT,
                                                          state_shape))
        if op == "LSTM":
            names.append("c0")
            graph_inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT,
                                                              state_shape))
    while names[-1] == "":
        names.pop()
    out_names = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    node = helper.make_node(op, names, [n if k in outputs else "" for k, n in
                                        enumerate(out_names)], hidden_size=H,
                            direction=direction, **({"layout": layout} if layout else {}),
                            **attrs)
    graph = helper.make_graph([node], "rnn", graph_inputs,
                              [helper.make_tensor_value_info(out_names[k], TensorProto.FLOAT,
                                                             None) for k in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.normal(size=shape).astype(np.float32)
    return out


def _check(model, layout: int = 0) -> None:
    feeds = _feeds(model)
    if layout:  # onnxruntime runs layout 0 only: the same data, time first
        ref_model = onnx.ModelProto()
        ref_model.CopyFrom(model)
        attrs = [a for a in ref_model.graph.node[0].attribute if a.name != "layout"]
        del ref_model.graph.node[0].attribute[:]
        ref_model.graph.node[0].attribute.extend(attrs)
        for vi in ref_model.graph.input:
            vi.type.tensor_type.ClearField("shape")
        ref_feeds = {k: np.swapaxes(v, 0, 1) for k, v in feeds.items()}
        reference = [np.swapaxes(r, 0, 1) if r.ndim == 3 else np.moveaxis(r, 2, 0)
                     for r in ort.InferenceSession(ref_model.SerializeToString()).run(
                         None, ref_feeds)]
    else:
        reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    result = import_onnx(model)
    assert {layer.type for layer in result.network.layers.values()} == {
        model.graph.node[0].op_type}
    for name in ("torch", "jax"):
        backend = get_backend(name)
        module = backend.set_parameters(backend.build(result.network), result.parameters)
        got = backend.forward(module, list(feeds.values()))
        assert len(got) == len(reference)
        for g, r in zip(got, reference):
            assert g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions(op: str, direction: str) -> None:
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    _check(_recurrent_model(op, direction=direction,
                            outputs=(0, 1, 2) if op == "LSTM" else (0, 1), **extra))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_initial_states_no_bias_and_sequence_lengths(op: str) -> None:
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    _check(_recurrent_model(op, bias=False, states=True, seq_lens=True,
                            direction="bidirectional", **extra))


def test_batch_first_layout_and_relu() -> None:
    model = _recurrent_model("RNN", layout=1, states=True, activations=["Relu"])
    result = import_onnx(model)
    (layer,) = result.network.layers.values()
    assert layer.config["batch_first"] and layer.config["nonlinearity"] == "relu"
    _check(model, layout=1)


def test_layer_arrays_are_pytorch_gates() -> None:
    """ONNX's LSTM gates i o f c become PyTorch's i f g o."""
    model = _recurrent_model("LSTM")
    w = numpy_helper.to_array(model.graph.initializer[0])[0]
    params = import_onnx(model).parameters
    (arrays,) = params.values()
    i, o, f, c = np.split(w, 4)
    np.testing.assert_array_equal(arrays["weight_ih_l0"], np.concatenate([i, f, c, o]))


# GRU with linear_before_reset=0 and LSTM peepholes are no longer refused: they run
# unrolled (tests/formats/test_onnx_recurrent_unrolled.py checks them against onnxruntime).
@pytest.mark.parametrize("op, attrs, match", [
    ("LSTM", {"clip": 1.0}, "clip"),
    ("LSTM", {"input_forget": 1}, "input_forget"),
    ("LSTM", {"activations": ["Sigmoid", "Relu", "Tanh"]}, "activations"),
    ("RNN", {"activations": ["Sigmoid"]}, "activations"),
])
def test_what_pytorch_cannot_compute_is_refused(op: str, attrs: dict, match: str) -> None:
    with pytest.raises(NetworkError, match=match):
        import_onnx(_recurrent_model(op, **attrs))


def test_varying_sequence_lengths_are_refused() -> None:
    model = _recurrent_model("GRU", seq_lens=True, linear_before_reset=1)
    lens = next(t for t in model.graph.initializer if t.name == "lens")
    lens.CopyFrom(numpy_helper.from_array(np.array([L, L - 1], np.int32), "lens"))
    with pytest.raises(NetworkError, match="sequence_lens"):
        import_onnx(model)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_round_trip_of_a_multi_layer_layer(op: str) -> None:
    """IR -> ONNX (one ONNX op per PyTorch layer, gates reordered in the graph) -> IR
    gives back one layer with PyTorch's array names and values."""
    from petab_sciml.formats.onnx import to_onnx
    from petab_sciml.network import Network

    args = {"input_size": 3, "hidden_size": 4, "num_layers": 2, "bidirectional": True}
    nodes = [{"name": "x", "op": "placeholder"},
             {"name": "r", "op": "call_module", "target": "rnn", "args": ["x"]},
             {"name": "y", "op": "call_function", "target": "getitem", "args": ["r", 0]},
             {"name": "output", "op": "output", "args": ["y"]}]
    network = Network.build("net", ["x"], [{"layer_id": "rnn", "layer_type": op,
                                            "args": args}], nodes)
    torch_backend = get_backend("torch")
    params = torch_backend.get_parameters(torch_backend.build(network, seed=3))
    model = to_onnx(network, params, input_shapes={"x": [5, 2, 3]})
    back = import_onnx(model.SerializeToString(), net_id="net")
    (layer,) = [x for x in back.network.layers.values() if x.type == op]
    assert (layer.id, layer.type, layer.config["num_layers"]) == ("rnn", op, 2)
    for name, value in params["rnn"].items():
        np.testing.assert_array_equal(back.parameters["rnn"][name], value, err_msg=name)

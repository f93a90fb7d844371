"""ONNX import features on hand-built graphs, checked against onnxruntime.

Lifting (Gemm with transA/transB/alpha/beta, MatMul + Add with (in, out) weights,
asymmetric convolution pads), constant folding of shape subgraphs, generic imports with
free parameters, names and the initializer map, the unsupported-op error, the warning
for weights fused at export, and ``petab-sciml convert``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from petab_sciml.backends.torch import BACKEND as TORCH  # noqa: E402
from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats.onnx import (  # noqa: E402
    SUPPORTED_OPS,
    import_onnx,
    read,
    read_with_parameters,
)

RNG = np.random.default_rng(0)


def make_model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32 if np.asarray(v).dtype.kind
                                            == "f" else np.int64), k)
         for k, v in dict(inits).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def compare_with_onnxruntime(model, *inputs, rtol=1e-5, atol=1e-5):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
    result = import_onnx(model.SerializeToString(), net_id="net")
    torch_model = TORCH.build(result.network)
    TORCH.set_parameters(torch_model, result.parameters)
    got = TORCH.forward(torch_model, list(inputs))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return result


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta", [
    (0, 1, 1.0, 1.0), (0, 0, 1.0, 1.0), (1, 1, 2.0, 0.5), (1, 0, 0.5, 3.0)])
def test_gemm_lifts_to_linear(trans_a, trans_b, alpha, beta):
    w = rand(3, 4) if trans_b else rand(4, 3)
    node = helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["y"], transA=trans_a,
                            transB=trans_b, alpha=alpha, beta=beta)
    x_shape = [4, 5] if trans_a else [5, 4]
    model = make_model([node], [("x", x_shape)], ["y"], {"fc.weight": w, "fc.bias": rand(3)})
    result = compare_with_onnxruntime(model, rand(*x_shape))
    (layer,) = result.network.layers.values()
    assert (layer.id, layer.type) == ("fc", "Linear")
    weight = result.parameters["fc"]["weight"]
    assert weight.shape == (3, 4)
    entry = next(e for e in result.names if e.onnx_name == "fc.weight")
    assert ("transposed" in entry.transform) == (not trans_b)
    assert ("alpha" in entry.transform) == (alpha != 1.0)


def test_matmul_add_lifts_with_in_out_weights():
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    model = make_model(nodes, [("x", [2, 6, 4])], ["y"], {"W": rand(4, 3), "b": rand(3)})
    result = compare_with_onnxruntime(model, rand(2, 6, 4))
    (layer,) = result.network.layers.values()
    assert layer.type == "Linear" and layer.config["bias"]
    np.testing.assert_array_equal(result.parameters[layer.id]["weight"],
                                  numpy_helper.to_array(model.graph.initializer[0]).T)


def test_transpose_matmul_keeps_the_pytorch_weight():
    nodes = [helper.make_node("Transpose", ["enc.0.weight"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    w = rand(3, 4)
    model = make_model(nodes, [("x", [5, 4])], ["y"], {"enc.0.weight": w})
    result = compare_with_onnxruntime(model, rand(5, 4))
    assert list(result.network.layers) == ["enc_0"]
    np.testing.assert_array_equal(result.parameters["enc_0"]["weight"], w)
    assert result.name_map() == {"enc.0.weight": ["enc_0.weight"]}


@pytest.mark.parametrize("pads,strides", [([0, 1, 2, 0], [1, 1]), ([1, 0, 0, 2], [2, 1]),
                                          ([2, 1, 2, 1], [1, 2])])
def test_conv_asymmetric_pads(pads, strides):
    node = helper.make_node("Conv", ["x", "c.weight", "c.bias"], ["y"], kernel_shape=[3, 3],
                            pads=pads, strides=strides)
    model = make_model([node], [("x", [2, 3, 7, 6])], ["y"],
                       {"c.weight": rand(4, 3, 3, 3), "c.bias": rand(4)})
    result = compare_with_onnxruntime(model, rand(2, 3, 7, 6))
    assert result.network.layers["c"].type == "Conv2d"


def test_conv_transpose_asymmetric_pads():
    node = helper.make_node("ConvTranspose", ["x", "d.weight"], ["y"], kernel_shape=[3],
                            pads=[0, 2], strides=[2])
    model = make_model([node], [("x", [1, 2, 5])], ["y"], {"d.weight": rand(2, 3, 3)})
    result = compare_with_onnxruntime(model, rand(1, 2, 5))
    assert result.network.layers["d"].type == "ConvTranspose1d"


def test_constant_shape_subgraph_is_folded():
    """Reshape(x, Concat(Gather(Shape(x), 0), [-1])) is a flatten: a Flatten layer."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(
            np.array(0, dtype=np.int64))),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Constant", [], ["m1"], value=numpy_helper.from_array(
            np.array([-1], dtype=np.int64))),
        helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    model = make_model(nodes, [("x", [2, 3, 4])], ["y"], {"axes": np.array([0])})
    result = compare_with_onnxruntime(model, rand(2, 3, 4))
    net = result.network
    assert [layer.type for layer in net.layers.values()] == ["Flatten"]
    assert not net.free_parameters and not result.parameters


def test_generic_ops_with_free_parameters():
    """No layer pattern: catalogue functions, initializers as named free parameters."""
    nodes = [helper.make_node("Mul", ["x", "scale"], ["a"]),
             helper.make_node("Max", ["a", "floor"], ["b"]),
             helper.make_node("Softmax", ["b"], ["y"], axis=1)]
    model = make_model(nodes, [("x", [2, 3])], ["y"], {"scale": rand(3), "floor": rand(2, 3)})
    result = compare_with_onnxruntime(model, rand(2, 3))
    assert not result.network.layers
    assert set(result.network.free_parameters) == {"params.scale", "params.floor"}
    assert all(p.trainable for p in result.network.free_parameters.values())
    grads = TORCH.gradients(_loaded(result), [rand(2, 3)])
    assert set(grads["params"]) == {"scale", "floor"}


def _loaded(result):
    model = TORCH.build(result.network)
    TORCH.set_parameters(model, result.parameters)
    return model


def test_unsupported_op_error_names_op_node_opset_and_list():
    node = helper.make_node("Det", ["x"], ["y"], name="my_det")
    model = make_model([node], [("x", [2])], ["y"], opset=18)
    with pytest.raises(NetworkError) as info:
        import_onnx(model.SerializeToString())
    message = str(info.value)
    assert "'Det'" in message and "my_det" in message and "opset 18" in message
    assert "supported ops: " + ", ".join(SUPPORTED_OPS) in message
    assert "Conv" in SUPPORTED_OPS and "Det" not in SUPPORTED_OPS


def test_custom_domain_is_reported():
    node = helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft", name="fc")
    model = make_model([node], [("x", [2])], ["y"])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(NetworkError, match="com.microsoft::FusedConv"):
        import_onnx(model.SerializeToString())


def test_read_errors(tmp_path: Path):
    with pytest.raises(NetworkError, match="file not found"):
        read(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all \x00\xff")
    with pytest.raises(NetworkError, match="bad.onnx"):
        read(bad)


# ----------------------------------------------------------------------------- PyTorch
torch = pytest.importorskip("torch")


def _export(module, x, path, **kwargs):
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x,), str(path), **kwargs)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_fused_batchnorm_is_reported(dynamo: bool, tmp_path: Path):
    nn = torch.nn
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv1d(2, 3, 3), nn.BatchNorm1d(3)).eval()
    with torch.no_grad():
        module[1].running_mean.uniform_(-1, 1)
        module[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 2, 8)
    path = tmp_path / "fused.onnx"
    _export(module, x, path, dynamo=dynamo)
    result = import_onnx(path)
    assert [layer.type for layer in result.network.layers.values()] == ["Conv1d"]
    (warning,) = [w for w in result.warnings if "fused" in w]
    assert "'layer_0'" in warning or "'layer_1'" in warning
    with pytest.warns(UserWarning, match="fused at export"):
        read_with_parameters(path)
    # unfused export: no warning, both layers, PyTorch names
    _export(module, x, path, dynamo=dynamo,
            **({"optimize": False} if dynamo else {"do_constant_folding": False}))
    result = import_onnx(path)
    assert not result.warnings
    assert [layer.type for layer in result.network.layers.values()] == ["Conv1d",
                                                                        "BatchNorm1d"]
    assert set(result.parameters["layer_1"]) >= {"running_mean", "running_var"}


def test_name_map_is_printable(tmp_path: Path):
    nn = torch.nn
    module = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).eval()
    path = tmp_path / "mlp.onnx"
    _export(module, torch.randn(3), path, dynamo=False)  # unbatched: pre-transposed weights
    result = import_onnx(path)
    table = result.format_names()
    assert table.splitlines()[0].split()[:3] == ["ONNX", "initializer", "IR"]
    assert "layer_0.weight" in table and "transposed" in table
    assert result.name_map()["0.bias"] == ["layer_0.bias"]


def test_convert_cli_round_trip(tmp_path: Path):
    from click.testing import CliRunner

    from petab_sciml.cli_convert import convert

    nn = torch.nn
    torch.manual_seed(3)
    module = nn.Sequential(nn.Conv1d(4, 4, 3), nn.ReLU(), nn.MaxPool1d(2), nn.Flatten(),
                           nn.Linear(16, 2)).eval()
    x = torch.randn(3, 4, 10)
    _export(module, x, tmp_path / "in.onnx", dynamo=False)
    runner = CliRunner()
    res = runner.invoke(convert, [str(tmp_path / "in.onnx"), str(tmp_path / "net.yaml"),
                                  "--params", str(tmp_path / "ps.hdf5"), "--net-id", "net0"])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and (tmp_path / "ps.hdf5").is_file()
    res = runner.invoke(convert, [str(tmp_path / "net.yaml"), str(tmp_path / "out.onnx"),
                                  "--params", str(tmp_path / "ps.hdf5"),
                                  "--input-shape", "input=N,4,10"])
    assert res.exit_code == 0, res.output
    sess = ort.InferenceSession(str(tmp_path / "out.onnx"),
                                providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    res = runner.invoke(convert, [str(tmp_path / "net.yaml"), str(tmp_path / "x.txt")])
    assert res.exit_code == 1 and "extension" in res.output


def _i64(*values):
    return np.array(values, dtype=np.int64)


# (name, nodes, inputs {name: shape}, initializers, opset)
_OPS = [
    ("split_num_outputs", [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1,
                                            num_outputs=3)], {"x": [2, 7]}, {}, 18),
    ("split_sizes", [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=-1)],
     {"x": [2, 3, 5]}, {"s": _i64(2, 3)}, 17),
    ("slice_steps", [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
     {"x": [4, 6, 5]}, {"st": _i64(1, -4), "en": _i64(2**62, -1), "ax": _i64(0, 2),
                        "sp": _i64(2, 1)}, 17),
    ("pad_reflect", [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
     {"x": [1, 2, 4, 5]}, {"p": _i64(0, 0, 1, 2, 0, 0, 2, 1)}, 17),
    ("pad_constant_axes", [helper.make_node("Pad", ["x", "p", "v", "ax"], ["y"])],
     {"x": [2, 3, 4]}, {"p": _i64(1, 2), "v": np.array(1.5, np.float32),
                        "ax": _i64(-1)}, 18),
    ("pad_edge", [helper.make_node("Pad", ["x", "p"], ["y"], mode="edge")],
     {"x": [2, 3]}, {"p": _i64(1, 0, 0, 2)}, 17),
    ("clip_inputs", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
     {"x": [3, 4]}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)},
     17),
    ("flatten_axis2", [helper.make_node("Flatten", ["x"], ["y"], axis=2)],
     {"x": [2, 3, 4, 5]}, {}, 17),
    ("flatten_axis0", [helper.make_node("Flatten", ["x"], ["y"], axis=0)],
     {"x": [2, 3, 4]}, {}, 17),
    ("reduce_l2", [helper.make_node("ReduceL2", ["x", "ax"], ["y"], keepdims=0)],
     {"x": [2, 3, 4]}, {"ax": _i64(1)}, 18),
    ("reduce_logsumexp_all", [helper.make_node("ReduceLogSumExp", ["x"], ["y"])],
     {"x": [2, 3]}, {}, 18),
    ("reduce_max", [helper.make_node("ReduceMax", ["x", "ax"], ["y"], keepdims=0)],
     {"x": [2, 3, 4, 5]}, {"ax": _i64(-1, -2)}, 18),
    ("reduce_min", [helper.make_node("ReduceMin", ["x"], ["y"], axes=[2])],
     {"x": [2, 3, 4]}, {}, 17),
    ("expand", [helper.make_node("Expand", ["x", "s"], ["y"])],
     {"x": [3, 1]}, {"s": _i64(2, 3, 4)}, 17),
    ("tile", [helper.make_node("Tile", ["x", "r"], ["y"])], {"x": [2, 3]},
     {"r": _i64(2, 3)}, 17),
    ("gather_indices", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
     {"x": [2, 5, 3]}, {"i": _i64(4, 0, 1, -1)}, 17),
    ("depth_to_space", [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2,
                                         mode="CRD")], {"x": [1, 8, 2, 3]}, {}, 17),
    ("layernorm_generic", [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"],
                                            axis=1)],
     {"x": [2, 3, 4]}, {"s": np.ones((3, 4), np.float32) * 1.5,
                        "b": np.full((4,), 0.2, np.float32)}, 17),
    ("global_lp", [helper.make_node("GlobalLpPool", ["x"], ["y"], p=3)],
     {"x": [2, 3, 4, 4]}, {}, 17),
    ("lppool_odd", [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3,
                                     pads=[1, 0, 0, 1])], {"x": [1, 2, 5, 5]}, {}, 17),
    ("avgpool_asym", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3],
                                       pads=[0, 2], count_include_pad=1)],
     {"x": [1, 2, 6]}, {}, 17),
    ("maxpool_asym", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2],
                                       pads=[1, 0, 0, 1], strides=[2, 2])],
     {"x": [1, 2, 5, 5]}, {}, 17),
    ("global_pools", [helper.make_node("GlobalAveragePool", ["x"], ["a"]),
                      helper.make_node("GlobalMaxPool", ["x"], ["b"])],
     {"x": [2, 3, 4, 5]}, {}, 17),
    ("hardsigmoid_onnx", [helper.make_node("HardSigmoid", ["x"], ["y"])],
     {"x": [3, 4]}, {}, 17),
    ("selu_custom", [helper.make_node("Selu", ["x"], ["y"], alpha=1.2, gamma=0.9)],
     {"x": [3, 4]}, {}, 17),
    ("mean_reciprocal", [helper.make_node("Mean", ["x", "w"], ["m"]),
                         helper.make_node("Reciprocal", ["m"], ["y"])],
     {"x": [2, 3]}, {"w": np.full((3,), 3.0, np.float32)}, 17),
    ("min_prelu", [helper.make_node("Min", ["x", "w"], ["m"]),
                   helper.make_node("PRelu", ["m", "slope"], ["y"])],
     {"x": [2, 3]}, {"w": np.full((2, 3), 0.3, np.float32),
                     "slope": np.array([0.1, 0.2, 0.3], np.float32)}, 17),
    ("einsum_bilinear", [helper.make_node("Einsum", ["x", "w", "z"], ["e"],
                                          equation="...i,oij,...j->...o"),
                         helper.make_node("Add", ["e", "bl.bias"], ["y"])],
     {"x": [4, 3], "z": [4, 2]}, {"w": RNG.standard_normal((5, 3, 2)).astype(np.float32),
                                  "bl.bias": np.arange(5, dtype=np.float32)}, 17),
    ("softmax_opset11_axis1", [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
     {"x": [2, 3, 4]}, {}, 11),
    # catalogue functions where, comparisons, erf, sign, sin, cos, maximum, minimum, pad,
    # amax, amin, prod, flip and the PReLU layer
    ("where_greater", [helper.make_node("Greater", ["x", "z"], ["g"]),
                       helper.make_node("Where", ["g", "x", "z"], ["y"])],
     {"x": [3, 4], "z": [3, 4]}, {}, 17),
    ("where_scalars", [helper.make_node("LessOrEqual", ["x", "t"], ["g"]),
                       helper.make_node("Where", ["g", "one", "x"], ["y"])],
     {"x": [3, 4]}, {"t": np.array(0.2, np.float32), "one": np.array(1.0, np.float32)}, 17),
    ("where_constant_mask", [helper.make_node("Where", ["m", "x", "z"], ["y"])],
     {"x": [2, 3], "z": [2, 3]}, {"m": np.array([True, False, True])}, 17),
    ("compare_cast", [helper.make_node("Less", ["x", "t"], ["l"]),
                      helper.make_node("Cast", ["l"], ["y"], to=TensorProto.FLOAT),
                      helper.make_node("GreaterOrEqual", ["x", "z"], ["ge"]),
                      helper.make_node("Cast", ["ge"], ["gf"], to=TensorProto.FLOAT),
                      helper.make_node("Mul", ["gf", "x"], ["y2"]),
                      helper.make_node("Equal", ["x", "x"], ["eq"]),
                      helper.make_node("Cast", ["eq"], ["ef"], to=TensorProto.FLOAT),
                      helper.make_node("Sub", ["ef", "z"], ["y3"])],
     {"x": [3, 4], "z": [3, 4]}, {"t": np.array(0.1, np.float32)}, 17),
    ("erf_sign_sin_cos", [helper.make_node("Erf", ["x"], ["a"]),
                          helper.make_node("Sign", ["x"], ["b"]),
                          helper.make_node("Sin", ["x"], ["c"]),
                          helper.make_node("Cos", ["x"], ["d"])], {"x": [3, 4]}, {}, 17),
    ("max_min", [helper.make_node("Max", ["x", "w", "z"], ["a"]),
                 helper.make_node("Min", ["t", "x"], ["b"])],
     {"x": [2, 3], "z": [2, 3]}, {"w": rand(3), "t": np.array(0.3, np.float32)}, 17),
    ("pad_wrap_leading_axis", [helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")],
     {"x": [3, 4]}, {"p": _i64(2, 1, 1, 0)}, 19),
    ("pad_constant_negative", [helper.make_node("Pad", ["x", "p", "v"], ["y"])],
     {"x": [2, 3, 5]}, {"p": _i64(0, 1, -1, 1, 0, 2), "v": np.array(-2.0, np.float32)}, 17),
    ("pad_reflect_5d", [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
     {"x": [1, 2, 3, 4, 3]}, {"p": _i64(0, 0, 1, 2, 1, 0, 0, 2, 1, 1)}, 17),
    ("reduce_max_leading", [helper.make_node("ReduceMax", ["x", "ax"], ["y"])],
     {"x": [2, 3, 4]}, {"ax": _i64(0)}, 18),
    ("reduce_min_all", [helper.make_node("ReduceMin", ["x"], ["y"], keepdims=0)],
     {"x": [2, 3, 4]}, {}, 17),
    ("reduce_prod", [helper.make_node("ReduceProd", ["x"], ["y"], axes=[0, 2], keepdims=0)],
     {"x": [2, 3, 4]}, {}, 17),
    ("reduce_prod_all", [helper.make_node("ReduceProd", ["x"], ["y"])],
     {"x": [2, 3]}, {}, 18),
    ("slice_negative_steps", [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
     {"x": [4, 6, 5]}, {"st": _i64(-1, 4, 1), "en": _i64(-2**63, 0, 5), "ax": _i64(0, 2, 1),
                        "sp": _i64(-1, -2, 2)}, 17),
    ("slice_flip", [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
     {"x": [3, 4]}, {"st": _i64(-1), "en": _i64(-2**63), "ax": _i64(-1), "sp": _i64(-1)}, 17),
    ("prelu_channels", [helper.make_node("PRelu", ["x", "slope"], ["y"])],
     {"x": [2, 3, 4, 5]}, {"slope": rand(3, 1, 1)}, 17),
    ("prelu_last_axis", [helper.make_node("PRelu", ["x", "slope"], ["y"])],
     {"x": [2, 3, 4]}, {"slope": rand(4)}, 17),
    ("prelu_computed_slope", [helper.make_node("Abs", ["z"], ["s"]),
                              helper.make_node("PRelu", ["x", "s"], ["y"])],
     {"x": [2, 3], "z": [2, 3]}, {}, 17),
]


def _bool_initializers(model):
    """make_model stores initializers as float or int64; masks must be bool."""
    for t in model.graph.initializer:
        if t.name == "m":
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(bool), "m"))
    return model


@pytest.mark.parametrize("name,nodes,inputs,inits,opset", _OPS, ids=[o[0] for o in _OPS])
def test_ops_match_onnxruntime(name, nodes, inputs, inits, opset):
    outputs = [o for n in nodes for o in n.output
               if not any(o in m.input for m in nodes)]
    model = _bool_initializers(make_model(nodes, list(inputs.items()), outputs, inits,
                                          opset=opset))
    xs = [rand(*shape) for shape in inputs.values()]
    compare_with_onnxruntime(model, *xs)


def _functions(result):
    return sorted({n.function for n in result.network.nodes if n.function})


def test_generic_workarounds_are_catalogue_functions():
    """Max/Min, ReduceMax over leading axes, Pad, negative Slice steps and Where import as
    maximum, amax, pad, flip and where (no relu/MaxPool/getitem+cat workarounds)."""
    nodes = [helper.make_node("Max", ["x", "z"], ["a"]),
             helper.make_node("ReduceMax", ["a"], ["b"], axes=[0], keepdims=1),
             helper.make_node("Pad", ["b", "p"], ["c"], mode="reflect"),
             helper.make_node("Slice", ["c", "st", "en", "ax", "sp"], ["d"]),
             helper.make_node("Greater", ["d", "t"], ["g"]),
             helper.make_node("Where", ["g", "d", "t"], ["y"])]
    model = make_model(nodes, [("x", [2, 3, 4]), ("z", [2, 3, 4])], ["y"],
                       {"p": _i64(0, 0, 1, 0, 0, 2), "st": _i64(-1), "en": _i64(-2**63),
                        "ax": _i64(-1), "sp": _i64(-1), "t": np.array(0.1, np.float32)})
    result = compare_with_onnxruntime(model, rand(2, 3, 4), rand(2, 3, 4))
    assert not result.network.layers
    assert _functions(result) == ["amax", "flip", "gt", "maximum", "pad", "where"]
    pad = next(n for n in result.network.nodes if n.function == "pad")
    assert pad.kwargs == {"pad": [1, 2], "mode": "reflect"}


def test_prelu_with_reshaped_parameter_is_a_layer():
    """PyTorch's exporters reshape the (C,) weight to (C, 1, ...): a PReLU layer whose
    weight keeps the parameter's name and layout."""
    slope = np.array([0.1, -0.2, 0.3], np.float32)
    nodes = [helper.make_node("Reshape", ["act.weight", "shape"], ["s"]),
             helper.make_node("PRelu", ["x", "s"], ["y"])]
    model = make_model(nodes, [("x", [2, 3, 4, 4])], ["y"],
                       {"act.weight": slope, "shape": _i64(3, 1, 1)})
    result = compare_with_onnxruntime(model, rand(2, 3, 4, 4))
    (layer,) = result.network.layers.values()
    assert (layer.id, layer.type, layer.config["num_parameters"]) == ("act", "PReLU", 3)
    np.testing.assert_array_equal(result.parameters["act"]["weight"], slope)
    assert result.name_map() == {"act.weight": ["act.weight"]}
    assert not result.network.free_parameters


def test_dynamic_shapes_pad_and_flip():
    """Constant padding and full flips need no static sizes."""
    nodes = [helper.make_node("Pad", ["x", "p", "v"], ["a"]),
             helper.make_node("Slice", ["a", "st", "en", "ax", "sp"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(_i64(1, 0, 2, 3), "p"),
         numpy_helper.from_array(np.array(0.5, np.float32), "v"),
         numpy_helper.from_array(_i64(-1, -2), "st"),
         numpy_helper.from_array(_i64(-2**63, -2**63), "en"),
         numpy_helper.from_array(_i64(0, 1), "ax"),
         numpy_helper.from_array(_i64(-1, -1), "sp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = compare_with_onnxruntime(model, rand(3, 5))
    assert _functions(result) == ["flip", "getitem", "pad"]
    compare_with_onnxruntime(model, rand(2, 7))


@pytest.mark.parametrize("opset,training", [(17, None), (17, False), (17, True), (11, None)])
def test_foreign_inference_dropout_is_the_identity(opset, training):
    """Another tool's inference-mode Dropout (no training_mode, a false one, or an opset
    without it) computes the identity, in training too; a constant true training mode
    imports as a Dropout layer.  Our own export's Dropout layers come back as layers
    (``test_onnx_export.py``, ROUND_TRIP)."""
    inputs = ["h"] if opset < 12 else ["h", "ratio"] + (["mode"] if training is not None
                                                        else [])
    inits = {"fc.weight": rand(3, 4), "fc.bias": rand(3)}
    if opset >= 12:
        inits["ratio"] = np.array(0.5, np.float32)
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h"], transB=1),
             helper.make_node("Dropout", inputs, ["y"])]
    if training is not None:
        nodes.insert(0, helper.make_node("Constant", [], ["mode"], value=helper.make_tensor(
            "mode", TensorProto.BOOL, [], [training])))
    model = make_model(nodes, [("x", [5, 4])], ["y"], inits, opset=opset)
    x = rand(5, 4)
    result = import_onnx(model.SerializeToString(), net_id="net")
    types = [layer.type for layer in result.network.layers.values()]
    torch_model = TORCH.build(result.network)
    TORCH.set_parameters(torch_model, result.parameters)
    (trained,) = TORCH.forward(torch_model, [x], train=True, seed=0)
    if training:
        assert types == ["Linear", "Dropout"]
        assert np.count_nonzero(trained == 0) > 0          # drops in training
        return
    assert types == ["Linear"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(trained, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bounds,function", [((0.0, 6.0), "relu6"), ((0.0, None), "relu"),
                                             ((-1.0, 2.0), "clamp"), ((None, 6.0), "clamp")])
def test_clip_of_an_activation_imports_as_that_function(bounds, function):
    """``Clip(0, 6)`` (PyTorch's export of relu6, mobilenet_v2) and ``Clip(0)`` import as
    ``relu6`` / ``relu``, which the specification lists, so the network stays portable;
    other bounds stay a clamp (not portable).  Outputs equal onnxruntime's either way."""
    from petab_sciml.portable import portability_problems

    names = ["h"] + ["lo" if bounds[0] is not None else ""] + (
        ["hi"] if bounds[1] is not None else [])
    inits = {"fc.weight": rand(3, 4), "fc.bias": rand(3)}
    inits.update({k: np.array(v, np.float32) for k, v in zip(("lo", "hi"), bounds)
                  if v is not None})
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h"], transB=1),
             helper.make_node("Clip", names, ["y"])]
    model = make_model(nodes, [("x", [5, 4])], ["y"], inits, opset=13)
    x = rand(5, 4) * 8.0
    result = compare_with_onnxruntime(model, x, rtol=1e-6, atol=1e-6)
    assert _functions(result) == [function]
    assert (portability_problems(result.network) == []) == (function != "clamp")

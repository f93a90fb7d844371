"""ONNX ops that ONNX defines as functions of other ops (``formats/onnx_import/functions.py``)
import as their function bodies and match onnxruntime in both backends."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("jax")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.support.classic_onnx import outputs_against_onnxruntime  # noqa: E402


def _model(node, inputs, outputs, inits, opset):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _both_match_onnxruntime(model, feeds):
    reference, outputs, imported = outputs_against_onnxruntime(model, feeds)
    for name, got in outputs.items():
        assert len(got) == len(reference)
        for g, r in zip(got, reference, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6, err_msg=name)
    return imported


def test_rms_normalization_imports_as_its_function_with_a_trainable_scale():
    rng = np.random.default_rng(0)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=-1,
                            epsilon=1e-5, name="rms")
    model = _model(node, [("x", [2, 3, 4])], ["y"],
                   {"scale": rng.normal(size=4).astype(np.float32)}, opset=23)
    imported = _both_match_onnxruntime(model, {"x": rng.normal(size=(2, 3, 4))
                                               .astype(np.float32)})
    # the scale stays a parameter: only initializers become PEtab parameters
    sizes = [a.size for arrays in imported.parameters.values() for a in arrays.values()]
    assert sizes == [4]


def test_layer_normalization_with_mean_and_inverse_std_outputs():
    rng = np.random.default_rng(1)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"],
                            axis=1, epsilon=1e-5)
    model = _model(node, [("x", [2, 3, 4])], ["y", "mean", "inv"],
                   {"s": rng.normal(size=(3, 4)).astype(np.float32),
                    "b": rng.normal(size=(3, 4)).astype(np.float32)}, opset=17)
    _both_match_onnxruntime(model, {"x": rng.normal(size=(2, 3, 4)).astype(np.float32)})


def test_causal_attention_of_opset_23():
    rng = np.random.default_rng(2)
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)
    shape = [1, 2, 5, 4]   # batch, heads, sequence, head size
    model = _model(node, [("q", shape), ("k", shape), ("v", shape)], ["y"], {}, opset=23)
    feeds = {n: rng.normal(size=shape).astype(np.float32) for n in ("q", "k", "v")}
    _both_match_onnxruntime(model, feeds)

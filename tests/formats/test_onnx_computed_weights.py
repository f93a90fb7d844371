"""ONNX Conv and ConvTranspose whose weight and bias are graph inputs (computed by the
network, as in a hypernetwork): ``formats/onnx_import/computed_conv.py`` against
PyTorch's ``F.conv*d`` / ``F.conv_transpose*d`` (values, and gradients to the input,
the weight and the bias), in both backends."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

from petab_sciml.formats.onnx import import_onnx  # noqa: E402
from tests.support.network_backends import network_backends  # noqa: E402

_backends = network_backends


def _model(op: str, arrays: list[np.ndarray], **attrs):
    names = ["x", "w", "b"][:len(arrays)]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, a.shape)
         for n, a in zip(names, arrays, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    return model


CONV = {  # name: (input shape, weight shape, ONNX attributes)
    "1d_stride_dilation": ((2, 4, 11), (6, 4, 3), {"strides": [2], "dilations": [2],
                                                    "pads": [1, 2]}),
    "2d_groups_asymmetric": ((2, 4, 7, 6), (6, 2, 3, 2), {"group": 2, "strides": [2, 1],
                                                          "pads": [1, 0, 2, 1]}),
    "2d_depthwise_same": ((1, 3, 5, 5), (3, 1, 3, 3), {"group": 3, "auto_pad": "SAME_UPPER"}),
    "3d": ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2), {"dilations": [1, 2, 1], "pads": [1, 0, 0, 1, 1, 0]}),
}

CONV_TRANSPOSE = {
    "1d_stride_output_padding": ((2, 3, 5), (3, 4, 3), {"strides": [3], "output_padding": [2],
                                                        "pads": [1, 0]}),
    "2d_groups_dilation": ((2, 4, 3, 4), (4, 3, 2, 3), {"group": 2, "strides": [2, 1],
                                                        "dilations": [2, 1], "pads": [1, 0, 0, 1]}),
    "3d": ((1, 2, 3, 2, 3), (2, 2, 2, 3, 2), {"strides": [1, 2, 2]}),
}


def _check(model, arrays, expected, torch_leaves, cotangent):
    grads = torch.autograd.grad(expected, torch_leaves, torch.tensor(cotangent))
    imported = import_onnx(model)
    for backend in _backends():
        net = backend.build(imported.network, dtype=imported.dtype)
        backend.set_parameters(net, imported.parameters)
        (y,) = backend.forward(net, arrays)
        np.testing.assert_allclose(np.asarray(y), expected.detach().numpy(), rtol=1e-12,
                                   atol=1e-12, err_msg=backend.name)
        _, got = backend.vjp(net, arrays, [cotangent])
        for g, ref in zip(got, grads, strict=True):
            np.testing.assert_allclose(np.asarray(g), ref.numpy(), rtol=1e-12, atol=1e-12,
                                       err_msg=backend.name)


@pytest.mark.parametrize("name", sorted(CONV))
def test_conv_with_computed_weight_and_bias_equals_pytorch(name):
    x_shape, w_shape, attrs = CONV[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(x_shape), rng.standard_normal(w_shape),
              rng.standard_normal(w_shape[0])]
    n = len(w_shape) - 2
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    x = leaves[0]
    if "pads" in attrs:   # PyTorch pads symmetrically: the ONNX pads first, explicitly
        pads = attrs["pads"]
        flat = [p for i in reversed(range(n)) for p in (pads[i], pads[n + i])]
        x = torch.nn.functional.pad(x, flat)
    conv = getattr(torch.nn.functional, f"conv{n}d")
    y = conv(x, leaves[1], leaves[2], stride=attrs.get("strides", 1),
             dilation=attrs.get("dilations", 1), groups=attrs.get("group", 1),
             padding="same" if "auto_pad" in attrs else 0)
    cotangent = rng.standard_normal(tuple(y.shape))
    _check(_model("Conv", arrays, **attrs), arrays, y, leaves, cotangent)


@pytest.mark.parametrize("name", sorted(CONV_TRANSPOSE))
def test_conv_transpose_with_computed_weight_and_bias_equals_pytorch(name):
    x_shape, w_shape, attrs = CONV_TRANSPOSE[name]
    rng = np.random.default_rng(1)
    group = attrs.get("group", 1)
    arrays = [rng.standard_normal(x_shape), rng.standard_normal(w_shape),
              rng.standard_normal(w_shape[1] * group)]
    n = len(w_shape) - 2
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    conv = getattr(torch.nn.functional, f"conv_transpose{n}d")
    y = conv(leaves[0], leaves[1], leaves[2], stride=attrs.get("strides", 1),
             dilation=attrs.get("dilations", 1), groups=group,
             output_padding=attrs.get("output_padding", 0))
    pads = attrs.get("pads", [0] * 2 * n)   # ONNX pads crop the full output, per side
    index = [slice(None), slice(None)] + [slice(pads[i], y.shape[2 + i] - pads[n + i])
                                          for i in range(n)]
    y = y[tuple(index)]
    cotangent = rng.standard_normal(tuple(y.shape))
    _check(_model("ConvTranspose", arrays, **attrs), arrays, y, leaves, cotangent)


def test_instance_norm_with_computed_scale_and_bias_equals_pytorch():
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((2, 3, 4, 5)), rng.standard_normal(3),
              rng.standard_normal(3)]
    node = helper.make_node("InstanceNormalization", ["x", "w", "b"], ["y"], epsilon=0.01)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, a.shape)
                      for n, a in zip("xwb", arrays, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = torch.nn.functional.instance_norm(leaves[0], weight=leaves[1], bias=leaves[2],
                                          eps=0.01)  # attributes read as their shortest decimal
    _check(model, arrays, y, leaves, rng.standard_normal((2, 3, 4, 5)))


def test_pad_with_a_computed_value_equals_pytorch():
    """Negative pads crop; the value's gradient is the sum of the cotangent on the border."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((2, 3, 4)), np.array(0.7)]
    node = helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3, 4]),
                      helper.make_tensor_value_info("v", TensorProto.DOUBLE, [])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [helper.make_tensor("pads", TensorProto.INT64, [6], [0, 1, -1, 0, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    zero = torch.nn.functional.pad(leaves[0], [-1, 2, 1, 2])
    border = torch.nn.functional.pad(torch.zeros(2, 3, 4, dtype=torch.float64), [-1, 2, 1, 2],
                                     value=1.0)
    y = zero + leaves[1] * border
    _check(model, arrays, y, leaves, rng.standard_normal(tuple(y.shape)))


def test_inference_dropout_with_a_computed_ratio_is_the_identity_and_training_is_refused():
    from petab_sciml.errors import NetworkError

    x = np.random.default_rng(4).standard_normal((3, 4))

    def model(training: bool | None):
        inputs = ["x", "r"] + (["t"] if training is not None else [])
        node = helper.make_node("Dropout", inputs, ["y"])
        inits = [] if training is None else [helper.make_tensor("t", TensorProto.BOOL, [],
                                                                [training])]
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3, 4]),
                          helper.make_tensor_value_info("r", TensorProto.DOUBLE, [])],
            [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])

    for training in (None, False):
        imported = import_onnx(model(training))
        for backend in _backends():
            net = backend.build(imported.network, dtype=imported.dtype)
            (y,) = backend.forward(net, [x, np.array(0.3)], train=True)
            np.testing.assert_array_equal(np.asarray(y), x)
    with pytest.raises(NetworkError, match="ratio .* for a Dropout that drops in training"):
        import_onnx(model(True))


def test_deform_conv_equals_the_reference_and_its_gradient_finite_differences():
    """Groups, offset groups, strides, dilations, pads, mask and bias: values against
    ONNX's reference; the vector-Jacobian product (to X, W, offsets, bias and mask)
    against central differences along a random direction, in float64."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    n, c, h, w, oc, kh, kw = 2, 4, 5, 6, 4, 2, 3
    attrs = {"group": 2, "offset_group": 2, "strides": [1, 2], "dilations": [2, 1],
             "pads": [1, 0, 0, 1]}
    oh = (h + 1 + 0 - (kh - 1) * 2 - 1) // 1 + 1
    ow = (w + 0 + 1 - (kw - 1) * 1 - 1) // 2 + 1
    arrays = [rng.standard_normal((n, c, h, w)), rng.standard_normal((oc, c // 2, kh, kw)),
              0.8 * rng.standard_normal((n, 2 * 2 * kh * kw, oh, ow)), rng.standard_normal(oc),
              rng.uniform(0.2, 1.0, (n, 2 * kh * kw, oh, ow))]
    names = ["x", "w", "offset", "b", "mask"]
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=[kh, kw], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, TensorProto.DOUBLE, a.shape)
                      for k, a in zip(names, arrays, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    (expected,) = ReferenceEvaluator(model).run(None, dict(zip(names, arrays, strict=True)))
    imported = import_onnx(model)
    cotangent = rng.standard_normal(expected.shape)
    direction = [rng.standard_normal(a.shape) for a in arrays]
    for backend in _backends():
        net = backend.build(imported.network, dtype=imported.dtype)
        backend.set_parameters(net, imported.parameters)
        (y,) = backend.forward(net, arrays)
        # the reference's GridSample denormalises the coordinates in float32
        np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-5)
        _, grads = backend.vjp(net, arrays, [cotangent])
        along = sum(float(np.sum(np.asarray(g) * d)) for g, d in zip(grads, direction,
                                                                     strict=True))

        def pairing(step: float, backend=backend, net=net) -> float:
            moved = [a + step * d for a, d in zip(arrays, direction, strict=True)]
            return float(np.sum(np.asarray(backend.forward(net, moved)[0]) * cotangent))

        step = 1e-6
        central = (pairing(step) - pairing(-step)) / (2 * step)
        assert abs(central - along) <= 1e-5 * max(abs(along), 1.0), (backend.name, central,
                                                                     along)

"""ONNX Einsum (any equation), CumProd, OneHot, Compress, ReverseSequence and Shrink
against independent references: numpy's ``einsum`` and onnxruntime for the outputs,
PyTorch's autograd (``torch.einsum``, ``torch.cumprod``) for the gradients, in both
backends.  ONNX's own node test cases of these ops run in
``tests/formats/test_onnx_conformance.py``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats.onnx import import_onnx  # noqa: E402
from tests.support.network_backends import network_backends  # noqa: E402

_backends = network_backends


def _model(op: str, inputs: list[np.ndarray], constants: dict[str, np.ndarray] | None = None,
           opset: int = 21, elem: int = TensorProto.DOUBLE, **attrs):
    """A one-node model: ``inputs`` as float graph inputs ``x0, x1, ...``, ``constants``
    as initializers, the node reading them in that order."""
    constants = constants or {}
    names = [f"x{i}" for i in range(len(inputs))] + list(constants)
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(f"x{i}", elem, x.shape)
         for i, x in enumerate(inputs)],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _run(model, inputs: list[np.ndarray], cotangent: np.ndarray | None = None):
    """Per backend: (output, input gradients for ``cotangent``)."""
    imported = import_onnx(model)
    out = []
    for backend in _backends():
        net = backend.build(imported.network, dtype=imported.dtype)
        backend.set_parameters(net, imported.parameters)
        (y,) = backend.forward(net, inputs)
        grads = None
        if cotangent is not None:
            _, grads = backend.vjp(net, inputs, [cotangent])
        out.append((backend.name, np.asarray(y), grads))
    return out


def _onnxruntime(model, inputs: list[np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {f"x{i}": x for i, x in enumerate(inputs)})
    return y


EQUATIONS = {
    "bhqd,bhkd->bhqk": [(2, 3, 4, 5), (2, 3, 6, 5)],   # attention scores
    "ij,jk,kl->il": [(3, 4), (4, 5), (5, 2)],            # three operands
    "...ij,...jk->...ik": [(2, 3, 4), (2, 4, 5)],
    "ij,jk": [(3, 4), (4, 2)],                           # implicit output
    "ii->i": [(4, 4)],                                   # diagonal
    "ii": [(4, 4)],                                      # trace
    "...i,i->...": [(2, 3, 4), (4,)],
    "bij->jb": [(2, 3, 4)],                              # sum over i, transpose
    "i,j->ij": [(3,), (4,)],                             # outer product
    "bi,bi->b": [(5, 3), (5, 3)],
    "iij,jk->ik": [(3, 3, 4), (4, 2)],                   # diagonal inside a product
    "...ii->...i": [(2, 3, 3)],
    "ab...,b->a...": [(2, 3, 4, 5), (3,)],
}


@pytest.mark.parametrize("equation", sorted(EQUATIONS))
def test_einsum_equals_numpy_and_torch_gradients(equation):
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s) for s in EQUATIONS[equation]]
    expected = np.einsum(equation, *inputs)
    cotangent = rng.standard_normal(np.shape(expected))
    leaves = [torch.tensor(x, requires_grad=True) for x in inputs]
    torch_grads = torch.autograd.grad(torch.einsum(equation, *leaves), leaves,
                                      torch.tensor(cotangent))
    model = _model("Einsum", inputs, equation=equation)
    np.testing.assert_allclose(_onnxruntime(model, inputs), expected, rtol=1e-12, atol=1e-12)
    for name, y, grads in _run(model, inputs, cotangent):
        np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12, err_msg=name)
        for g, ref in zip(grads, torch_grads, strict=True):
            np.testing.assert_allclose(np.asarray(g), ref.numpy(), rtol=1e-12, atol=1e-12,
                                       err_msg=name)


def test_einsum_refusals_name_the_problem():
    x = np.zeros((3, 4))
    with pytest.raises(NetworkError, match="names 2 operands; the node has 1"):
        import_onnx(_model("Einsum", [x], equation="ij,jk->ik"))
    with pytest.raises(NetworkError, match="subscript 'j' has sizes 4 and 5"):
        import_onnx(_model("Einsum", [x, np.zeros((5, 2))], equation="ij,jk->ik"))


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("exclusive", [0, 1])
def test_cumprod_values_and_gradient_with_a_zero_factor(reverse, exclusive):
    """Against onnxruntime-free references: numpy for the values, torch.cumprod's
    autograd for the gradient (a zero factor, where exp(cumsum(log)) would fail)."""
    x = np.array([[1.5, -2.0, 0.0, 3.0, 0.5], [0.3, 1.1, -0.7, 2.0, -1.2]])
    model = _model("CumProd", [x], {"axis": np.array(1)}, opset=26, reverse=reverse,
                   exclusive=exclusive)
    t = torch.tensor(x, requires_grad=True)
    z = torch.flip(t, [1]) if reverse else t
    if exclusive:
        z = torch.cat([torch.ones_like(z[:, :1]), z[:, :-1]], dim=1)
    y = torch.cumprod(z, dim=1)
    y = torch.flip(y, [1]) if reverse else y
    cotangent = np.random.default_rng(1).standard_normal(x.shape)
    (grad,) = torch.autograd.grad(y, t, torch.tensor(cotangent))
    for name, got, (g,) in _run(model, [x], cotangent):
        np.testing.assert_allclose(got, y.detach().numpy(), rtol=1e-14, atol=0, err_msg=name)
        np.testing.assert_allclose(np.asarray(g), grad.numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=name)


@pytest.mark.parametrize("computed", [False, True])
def test_one_hot_with_constant_and_computed_indices(computed):
    """Negative indices wrap, out-of-range ones give ``off``; indices computed by the
    network are rounded down as ONNX casts them.  Against numpy (onnxruntime has no
    double-precision OneHot)."""
    indices = np.array([[0.0, -1.0, 2.7], [5.0, 1.0, -3.0]])
    values = np.array([-0.5, 2.25])
    depth = np.array(4.0)
    if computed:
        model = _model("OneHot", [indices], {"depth": depth}, axis=1)
        node = model.graph.node[0]
        node.input.append("values")
        model.graph.initializer.append(numpy_helper.from_array(values, "values"))
        inputs = [indices]
    else:
        model = _model("OneHot", [], {"indices": indices.astype(np.int64), "depth": depth},
                       axis=1)
        model.graph.node[0].input.append("x0")
        model.graph.input.append(helper.make_tensor_value_info("x0", TensorProto.DOUBLE,
                                                               values.shape))
        inputs = [values]
    index = np.floor(indices)
    index = np.where(index < 0, index + 4, index)
    expected = np.where(np.arange(4)[None, :, None] == index[:, None, :], values[1], values[0])
    for name, got, _ in _run(model, inputs):
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_compress_reverse_sequence_and_shrink_against_onnxruntime():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5))
    cases = [
        _model("Compress", [x], {"condition": np.array([True, False, True, True])}, axis=0),
        _model("Compress", [x], {"condition": np.array([False, True, False, False, True])},
               axis=-1),
        _model("Compress", [x], {"condition": np.array([True, False, True])}),  # flattened
        _model("ReverseSequence", [x], {"lens": np.array([5, 0, 3, 1])}, time_axis=1,
               batch_axis=0),
        _model("ReverseSequence", [x.T.copy()], {"lens": np.array([5, 2, 1, 3])},
               time_axis=0, batch_axis=1),
    ]
    for model in cases:
        inputs = [x.T.copy()] if model.graph.input[0].type.tensor_type.shape.dim[0].dim_value \
            == 5 else [x]
        expected = _onnxruntime(model, inputs)
        for name, got, _ in _run(model, inputs):
            np.testing.assert_array_equal(got, expected, err_msg=f"{name} {model.graph.node}")
    # onnxruntime's double Shrink rounds through float32: numpy is the reference here
    shrink = _model("Shrink", [x], lambd=0.4, bias=0.25)
    expected = np.where(x > 0.4, x - 0.25, np.where(x < -0.4, x + 0.25, 0.0))
    for name, got, _ in _run(shrink, [x]):
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_selection_refusals_name_the_node():
    x = np.zeros((4, 5))
    with pytest.raises(NetworkError, match="selects nothing"):
        import_onnx(_model("Compress", [x], {"c": np.array([False, False])}, axis=0))
    with pytest.raises(NetworkError, match=r"sequence_lens \[6, 0, 0, 0\] must hold one length"):
        import_onnx(_model("ReverseSequence", [x], {"lens": np.array([6, 0, 0, 0])},
                           time_axis=1, batch_axis=0))
    model = _model("OneHot", [], {"i": np.array([1]), "depth": np.array(2.5)})
    model.graph.node[0].input.append("x0")
    model.graph.input.append(helper.make_tensor_value_info("x0", TensorProto.DOUBLE, [2]))
    with pytest.raises(NetworkError, match="depth must be one positive whole number"):
        import_onnx(model)


# ---------------------------------------------------------------- GridSample, AffineGrid
def _grid_model(x_shape, grid_shape, opset=22, **attrs):
    node = helper.make_node("GridSample", ["x0", "x1"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x0", TensorProto.DOUBLE, x_shape),
         helper.make_tensor_value_info("x1", TensorProto.DOUBLE, grid_shape)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_equals_pytorch_with_gradients(mode, padding):
    """Against ``F.grid_sample`` (values, and gradients to the input and the grid) on
    grids reaching far outside [-1, 1] (reflected several times), both corner
    conventions, 2-D (one axis of one pixel too) and 3-D (but cubic, which ONNX and
    PyTorch define for 4-D only)."""
    rng = np.random.default_rng(4)
    torch_mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
    for dims in ((5, 4), (1, 4), (3, 4, 2)) if mode != "cubic" else ((5, 4), (1, 4)):
        x = rng.standard_normal((2, 3, *dims))
        grid = rng.uniform(-3.2, 3.2, (2, 4, 3, *([2] if len(dims) == 3 else []), len(dims)))
        for align in (0, 1):
            model = _grid_model(x.shape, grid.shape, mode=mode, padding_mode=padding,
                                align_corners=align)
            tx = torch.tensor(x, requires_grad=True)
            tg = torch.tensor(grid, requires_grad=True)
            ty = torch.nn.functional.grid_sample(tx, tg, mode=torch_mode, padding_mode=padding,
                                                 align_corners=bool(align))
            cotangent = rng.standard_normal(ty.shape)
            gx, gg = torch.autograd.grad(ty, (tx, tg), torch.tensor(cotangent))
            expected, tol = ty.detach().numpy(), 1e-10
            if (mode, padding) == ("cubic", "border"):
                # PyTorch clamps only the four taps, ONNX also the coordinate first: the
                # values differ where a coordinate lies outside; ONNX's own is the reference
                from onnx.reference import ReferenceEvaluator

                (expected,) = ReferenceEvaluator(model).run(None, {"x0": x, "x1": grid})
                tol = 1e-5   # the reference denormalises the coordinates in float32
            for name, got, (dx, dgrid) in _run(model, [x, grid], cotangent):
                what = f"{name} {dims} align={align}"
                np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=what)
                if (mode, padding) == ("cubic", "border"):
                    continue  # PyTorch's gradients are those of its own values
                np.testing.assert_allclose(np.asarray(dx), gx.numpy(), rtol=1e-10, atol=1e-12,
                                           err_msg=what)
                np.testing.assert_allclose(np.asarray(dgrid), gg.numpy(), rtol=1e-8,
                                           atol=1e-10, err_msg=what)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_equals_pytorch(align):
    rng = np.random.default_rng(5)
    for size in ([2, 3, 4, 5], [2, 1, 3, 4, 2]):
        k = len(size) - 2
        theta = rng.standard_normal((2, k, k + 1))
        node = helper.make_node("AffineGrid", ["x0", "size"], ["y"], align_corners=align)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x0", TensorProto.DOUBLE, theta.shape)],
            [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
            [numpy_helper.from_array(np.array(size, np.int64), "size")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        expected = torch.nn.functional.affine_grid(torch.tensor(theta), size,
                                                   align_corners=bool(align)).numpy()
        for name, got, _ in _run(model, [theta]):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=name)


# ---------------------------------------------------------------- LinearAttention
def _torch_linear_attention(q, k, v, past, decay, beta, q_heads, kv_heads, scale):
    """The operator's recurrence, step by step in PyTorch (for autograd)."""
    b, t, _ = q.shape
    d_v = v.shape[-1] // kv_heads

    def heads(x, h):
        return x.reshape(b, t, h, x.shape[-1] // h).permute(0, 2, 1, 3)

    q4, k4, v4 = heads(q, q_heads), heads(k, kv_heads), heads(v, kv_heads)
    g4 = heads(decay, kv_heads)
    beta4 = heads(beta, beta.shape[-1])
    state, outs = past, []
    for i in range(t):
        state = state * torch.exp(g4[:, :, i, :])[..., None]
        retrieved = torch.einsum("bhdm,bhd->bhm", state, k4[:, :, i, :])
        v_t = beta4[:, :, i, :] * (v4[:, :, i, :] - retrieved)
        state = state + k4[:, :, i, :, None] * v_t[..., None, :]
        read = torch.repeat_interleave(state, q_heads // kv_heads, dim=1)
        outs.append(scale * torch.einsum("bhd,bhdm->bhm", q4[:, :, i, :], read))
    out = torch.stack(outs, dim=2).permute(0, 2, 1, 3).reshape(b, t, q_heads * d_v)
    return out, state


def test_linear_attention_gated_delta_gqa_with_past_state():
    """Output and present state against ONNX's reference (it computes in float32) and
    the recurrence in PyTorch; gradients to every input against PyTorch's autograd."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(6)
    b, t, qh, kvh, dk, dv = 2, 3, 4, 2, 3, 2
    arrays = [rng.standard_normal((b, t, qh * dk)), rng.standard_normal((b, t, kvh * dk)),
              rng.standard_normal((b, t, kvh * dv)), rng.standard_normal((b, kvh, dk, dv)),
              -rng.uniform(0.0, 0.5, (b, t, kvh)), rng.uniform(0.2, 0.9, (b, t, kvh))]
    names = ["x0", "x1", "x2", "x3", "x4", "x5"]
    node = helper.make_node("LinearAttention", names, ["y", "state"], q_num_heads=qh,
                            kv_num_heads=kvh)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, a.shape)
                      for n, a in zip(names, arrays, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None),
         helper.make_tensor_value_info("state", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    reference = ReferenceEvaluator(model).run(None, dict(zip(names, arrays, strict=True)))
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, state = _torch_linear_attention(*leaves, qh, kvh, 1 / np.sqrt(dk))
    np.testing.assert_allclose(out.detach().numpy(), reference[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.detach().numpy(), reference[1], rtol=1e-5, atol=1e-5)
    cotangents = [rng.standard_normal(out.shape), rng.standard_normal(state.shape)]
    expected = torch.autograd.grad((out, state), leaves,
                                   [torch.tensor(c) for c in cotangents])
    imported = import_onnx(model)
    for backend in _backends():
        net = backend.build(imported.network, dtype=imported.dtype)
        y, s = backend.forward(net, arrays)
        np.testing.assert_allclose(np.asarray(y), out.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(s), state.detach().numpy(), rtol=1e-12,
                                   atol=1e-12)
        _, grads = backend.vjp(net, arrays, cotangents)
        for g, ref in zip(grads, expected, strict=True):
            np.testing.assert_allclose(np.asarray(g), ref.numpy(), rtol=1e-10, atol=1e-12,
                                       err_msg=backend.name)


def test_gather_elements_with_scattered_indices_uses_a_mask_and_equals_torch_gather():
    """A loss's pick of one class per sample (300 samples: more runs than slices are
    allowed) and a second axis of indices narrower than the data."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 10, 3))
    idx = rng.integers(-10, 10, (300, 2, 2))
    model = _model("GatherElements", [x], {"i": idx}, axis=1)
    positive = np.where(idx < 0, idx + 10, idx)
    t = torch.tensor(x, requires_grad=True)
    expected = torch.gather(t[:, :, :2], 1, torch.tensor(positive))
    cotangent = rng.standard_normal(idx.shape)
    (grad,) = torch.autograd.grad(expected, t, torch.tensor(cotangent))
    np.testing.assert_array_equal(_onnxruntime(model, [x]), expected.detach().numpy())
    for name, got, (g,) in _run(model, [x], cotangent):
        np.testing.assert_array_equal(got, expected.detach().numpy(), err_msg=name)
        np.testing.assert_allclose(np.asarray(g), grad.numpy(), rtol=1e-14, atol=0,
                                   err_msg=name)


# ---------------------------------------------------------------- Col2Im, RotaryEmbedding
@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1], "pads": [1, 0, 0, 2],
                                        "dilations": [1, 2]}])
def test_col2im_equals_torch_fold_with_gradient(attrs):
    rng = np.random.default_rng(8)
    image, block = [5, 6], [2, 3]
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    blocks = [(image[i] + pads[i] + pads[2 + i] - dilations[i] * (block[i] - 1) - 1)
              // strides[i] + 1 for i in range(2)]
    x = rng.standard_normal((2, 3 * 6, blocks[0] * blocks[1]))
    model = _model("Col2Im", [x], {"image": np.array(image), "block": np.array(block)},
                   opset=18, **attrs)
    t = torch.tensor(x, requires_grad=True)
    # torch's fold pads symmetrically: fold into the padded image, then crop
    padded = [image[i] + pads[i] + pads[2 + i] for i in range(2)]
    y = torch.nn.functional.fold(t, padded, block, dilation=dilations, stride=strides)
    y = y[:, :, pads[0]:pads[0] + image[0], pads[1]:pads[1] + image[1]]
    cotangent = rng.standard_normal(tuple(y.shape))
    (grad,) = torch.autograd.grad(y, t, torch.tensor(cotangent))
    for name, got, (g,) in _run(model, [x], cotangent):
        np.testing.assert_allclose(got, y.detach().numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=name)
        np.testing.assert_allclose(np.asarray(g), grad.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=name)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_equals_the_reference_with_computed_caches(interleaved):
    """Caches are graph inputs (computed by the network) read at constant position_ids;
    values against ONNX's reference, gradients of the rotation against PyTorch's
    autograd of the same formula."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 4, 8))                # (B, H, S, D)
    angles = rng.uniform(0, 3, (10, 3))                  # rotary dim 6 of 8
    cos, sin = np.cos(angles), np.sin(angles)
    positions = rng.integers(0, 10, (2, 4))
    model = _model("RotaryEmbedding", [x, cos, sin], {"pos": positions}, opset=23,
                   interleaved=interleaved, rotary_embedding_dim=6)
    (expected,) = ReferenceEvaluator(model).run(None, {"x0": x, "x1": cos, "x2": sin})
    leaves = [torch.tensor(a, requires_grad=True) for a in (x, cos, sin)]
    tx = leaves[0].permute(0, 2, 1, 3)
    c = leaves[1][torch.tensor(positions)][:, :, None, :]
    s = leaves[2][torch.tensor(positions)][:, :, None, :]
    rot = tx[..., :6]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :3], rot[..., 3:])
    real, imag = c * x1 - s * x2, s * x1 + c * x2
    turned = (torch.stack([real, imag], -1).reshape(rot.shape) if interleaved
              else torch.cat([real, imag], -1))
    y = torch.cat([turned, tx[..., 6:]], -1).permute(0, 2, 1, 3)
    np.testing.assert_allclose(y.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    cotangent = rng.standard_normal(x.shape)
    grads = torch.autograd.grad(y, leaves, torch.tensor(cotangent))
    for name, got, got_grads in _run(model, [x, cos, sin], cotangent):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=name)
        for g, ref in zip(got_grads, grads, strict=True):
            np.testing.assert_allclose(np.asarray(g), ref.numpy(), rtol=1e-12, atol=1e-12,
                                       err_msg=name)


@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize("include", [0, 1])
def test_dilated_average_pool_equals_onnxruntime(ceil_mode, include):
    """Dilations with strides, asymmetric pads, ceil_mode and count_include_pad (float32:
    onnxruntime has no double AveragePool)."""
    x = np.random.default_rng(10).standard_normal((2, 3, 9, 8)).astype(np.float32)
    model = _model("AveragePool", [x], opset=22, elem=TensorProto.FLOAT, kernel_shape=[3, 2],
                   dilations=[2, 3],
                   strides=[2, 1], pads=[1, 0, 2, 1], ceil_mode=ceil_mode,
                   count_include_pad=include)
    expected = _onnxruntime(model, [x])
    for name, got, _ in _run(model, [x]):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_equals_the_reference_with_gradients(mode):
    """A cache of 5 rows; two rows written per batch element, wrapping in circular mode.
    Values against ONNX's reference; gradients: the written rows' cotangent reaches the
    update, the others the cache."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(11)
    cache, update = rng.standard_normal((3, 2, 5, 4)), rng.standard_normal((3, 2, 2, 4))
    starts = np.array([0, 3, 4 if mode == "circular" else 2])
    model = _model("TensorScatter", [cache, update], {"w": starts}, opset=24, mode=mode)
    (expected,) = ReferenceEvaluator(model).run(None, {"x0": cache, "x1": update})
    cotangent = rng.standard_normal(cache.shape)
    written = np.zeros(cache.shape, bool)
    update_grad = np.zeros(update.shape)
    for b, s in enumerate(starts):
        for k in range(2):
            row = (s + k) % 5
            written[b, :, row] = True
            update_grad[b, :, k] = cotangent[b, :, row]
    for name, got, (g_cache, g_update) in _run(model, [cache, update], cotangent):
        np.testing.assert_array_equal(got, expected, err_msg=name)
        np.testing.assert_array_equal(np.asarray(g_cache), np.where(written, 0.0, cotangent))
        np.testing.assert_array_equal(np.asarray(g_update), update_grad)

"""ONNX Resize and Upsample (``formats/onnx_import/resize.py``) against independent
references: PyTorch's own ``F.interpolate`` / ``nn.Upsample`` (outputs and input
gradients) on its ONNX exports, onnxruntime on the same files, and ONNX's reference
implementation on every attribute combination of one axis.  ONNX's node test cases of
Resize run in ``tests/formats/test_onnx_conformance.py``."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats.onnx import import_onnx  # noqa: E402
from petab_sciml.formats.onnx_import.resize import interpolation_matrix  # noqa: E402
from tests.support.network_backends import network_backends  # noqa: E402

_backends = network_backends


class Interpolate(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs
        self.conv = torch.nn.Conv2d(2, 2, 1) if kwargs.pop("conv", False) else None

    def forward(self, x):
        y = torch.nn.functional.interpolate(x, **self.kwargs)
        return self.conv(y) if self.conv is not None else y


class TwoResizes(torch.nn.Module):
    """Two resizes of different sizes in one graph (two sets of constant matrices)."""

    def forward(self, x):
        a = torch.nn.functional.interpolate(x, size=(5, 3), mode="bilinear")
        b = torch.nn.functional.interpolate(x, size=(2, 7), mode="bicubic",
                                            align_corners=True)
        return a.sum(dim=(2, 3)) + b.mean(dim=(2, 3))


CASES = {
    "nearest_scale2": (Interpolate(scale_factor=2.0, mode="nearest"), (1, 2, 3, 4)),
    "nearest_size": (Interpolate(size=(5, 7), mode="nearest"), (2, 2, 3, 4)),
    "nearest_exact_down": (Interpolate(size=(2, 3), mode="nearest-exact"), (1, 2, 5, 7)),
    "bilinear": (Interpolate(scale_factor=(1.5, 2.5), mode="bilinear"), (1, 2, 4, 3)),
    "bilinear_align": (Interpolate(size=(6, 5), mode="bilinear", align_corners=True),
                       (1, 2, 3, 4)),
    "bilinear_down": (Interpolate(size=(2, 3), mode="bilinear"), (1, 2, 5, 7)),
    "bilinear_antialias": (Interpolate(size=(3, 2), mode="bilinear", antialias=True),
                           (1, 2, 7, 6)),
    "bicubic": (Interpolate(scale_factor=2.0, mode="bicubic", conv=True), (1, 2, 3, 4)),
    "bicubic_align": (Interpolate(size=(4, 6), mode="bicubic", align_corners=True),
                      (1, 2, 3, 5)),
    "linear_1d": (Interpolate(scale_factor=3.0, mode="linear"), (2, 3, 4)),
    "trilinear": (Interpolate(size=(3, 4, 2), mode="trilinear"), (1, 1, 2, 3, 4)),
    "two_resizes": (TwoResizes(), (1, 2, 4, 5)),
}


DYNAMO = {"bilinear_antialias", "nearest_exact_down"}
"""Cases only the dynamo exporter writes (the TorchScript one has neither antialias nor
nearest-exact)."""


def _export(module, shape, path: Path, opset: int, dynamo: bool = False) -> np.ndarray:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            if dynamo:
                torch.onnx.export(module, (x,), dynamo=True).save(str(path))
            else:
                torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=opset)
    finally:
        logging.disable(logging.NOTSET)
    return x.numpy()


def _torch_vjp(module, x: np.ndarray, cotangent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.tensor(x, requires_grad=True)
    out = module(xt)
    (grad,) = torch.autograd.grad(out, xt, torch.tensor(cotangent))
    return out.detach().numpy(), grad.numpy()


@pytest.mark.parametrize("name", sorted(CASES))
def test_pytorch_interpolate_exports_match_pytorch_and_onnxruntime(name, tmp_path):
    """Outputs equal PyTorch's and onnxruntime's; the input gradient (the vector-Jacobian
    product with a random cotangent) equals PyTorch's autograd, in both backends."""
    module, shape = CASES[name]
    path = tmp_path / "m.onnx"
    x = _export(module.eval(), shape, path, opset=17, dynamo=name in DYNAMO)
    imported = import_onnx(path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (runtime,) = sess.run(None, {sess.get_inputs()[0].name: x})
    cotangent = np.random.default_rng(1).standard_normal(runtime.shape).astype(np.float32)
    expected, expected_grad = _torch_vjp(module, x, cotangent)
    np.testing.assert_allclose(runtime, expected, rtol=1e-5, atol=1e-5)
    for backend in _backends():
        model = backend.build(imported.network, dtype=imported.dtype)
        backend.set_parameters(model, imported.parameters)
        (got,) = backend.forward(model, [x])
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5,
                                   err_msg=backend.name)
        _, (grad,) = backend.vjp(model, [x], [cotangent])
        np.testing.assert_allclose(np.asarray(grad), expected_grad, rtol=1e-4, atol=1e-5,
                                   err_msg=backend.name)


@pytest.mark.parametrize("opset", [9, 10])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_legacy_upsample_and_resize10_match_onnxruntime(opset, mode, tmp_path):
    """Upsample (opset 9) and Resize-10 (asymmetric coordinates; nearest rounds down
    when upsampling, up when downsampling), up and down, against onnxruntime."""
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 6)).astype(np.float32)
    for scales in ([1.0, 1.0, 2.0, 1.5], [1.0, 1.0, 0.5, 0.7]):
        if opset == 9 and min(scales) < 1:
            continue  # Upsample only upsamples
        op = "Upsample" if opset == 9 else "Resize"
        node = helper.make_node(op, ["x", "scales"], ["y"], mode=mode)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 7
        path = tmp_path / f"m{opset}.onnx"
        onnx.save(model, str(path))
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (expected,) = sess.run(None, {"x": x})
        imported = import_onnx(path)
        for backend in _backends():
            model_b = backend.build(imported.network, dtype=imported.dtype)
            backend.set_parameters(model_b, imported.parameters)
            (got,) = backend.forward(model_b, [x])
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6, atol=1e-6,
                                       err_msg=f"{backend.name} {scales}")


_MODES = [("nearest", n) for n in ("round_prefer_floor", "round_prefer_ceil", "floor",
                                   "ceil")] + [("linear", None), ("cubic", None)]
_COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_crop_and_resize")


def test_one_axis_matrices_match_the_onnx_reference_implementation():
    """Every mode, coordinate transformation, antialias and exclude_outside, up and down
    and to one element: ``M @ x`` equals ONNX's reference Resize on a random vector."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(3)
    checked = 0
    for mode, nearest in _MODES:
        for coordinates in _COORDINATES:
            for antialias in ((False, True) if mode != "nearest" else (False,)):
                for exclude in (False, True):
                    for n_in, n_out in ((5, 9), (7, 3), (6, 1), (4, 4)):
                        attrs = {"mode": mode, "coordinate_transformation_mode": coordinates,
                                 "antialias": int(antialias), "exclude_outside": int(exclude),
                                 "cubic_coeff_a": -0.6, "extrapolation_value": 0.0}
                        if nearest:
                            attrs["nearest_mode"] = nearest
                        roi = [0.2, 0.9] if coordinates == "tf_crop_and_resize" else []
                        node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"],
                                                **attrs)
                        graph = helper.make_graph(
                            [node], "g",
                            [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [n_in])],
                            [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                            [helper.make_tensor("roi", TensorProto.DOUBLE, [len(roi)], roi),
                             helper.make_tensor("sizes", TensorProto.INT64, [1], [n_out])])
                        model = helper.make_model(graph, opset_imports=[
                            helper.make_opsetid("", 19)])
                        x = rng.standard_normal(n_in)
                        (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
                        matrix, outside = interpolation_matrix(
                            n_in, n_out, n_out / n_in, mode=mode, coordinate_mode=coordinates,
                            nearest_mode=nearest or "round_prefer_floor",
                            cubic_a=float(np.float32(-0.6)),
                            exclude_outside=exclude, antialias=antialias,
                            roi=tuple(roi) if roi else None)
                        got = matrix @ x
                        # the reference computes cubic weights in float32 (A is a float32
                        # attribute, and NumPy keeps float32 against Python floats)
                        tol = 1e-5 if mode == "cubic" else 1e-12
                        np.testing.assert_allclose(
                            got, expected, rtol=tol, atol=tol,
                            err_msg=f"{mode} {nearest} {coordinates} aa={antialias} "
                                    f"ex={exclude} {n_in}->{n_out}")
                        assert not outside.any() or coordinates == "tf_crop_and_resize"
                        checked += 1
    assert checked == 6 * 6 * 4 * 2 + 2 * 6 * 4 * 2  # every combination ran


def test_refusals_name_the_node_and_the_reason(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])

    def model(node, inits):
        graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])

    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 1, 8, 8])
    both = helper.make_node("Resize", ["x", "", "scales", "sizes"], ["y"], name="both")
    with pytest.raises(NetworkError, match=r"both.*exactly one of scales and sizes"):
        import_onnx(model(both, [scales, sizes]))
    bad = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="r", mode="area")
    with pytest.raises(NetworkError, match=r"r.*mode='area' is not one of"):
        import_onnx(model(bad, [scales]))
    aa = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="r", antialias=1)
    with pytest.raises(NetworkError, match="antialias is defined for linear and cubic"):
        import_onnx(model(aa, [scales]))
    roi = helper.make_tensor("roi", TensorProto.FLOAT, [8], [0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9])
    crop = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], name="r",
                            coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(NetworkError, match="a roi with scales"):
        import_onnx(model(crop, [roi, scales]))


def test_an_interpolation_matrix_over_the_folding_budget_is_refused_by_name():
    from petab_sciml.limits import LimitError, use_limits

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="up")
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, None)], [helper.make_tensor("sizes", TensorProto.INT64, [4],
                                                             [1, 1, 4, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with use_limits(max_folded_elements=100), pytest.raises(
            LimitError, match=r"'up': the 64 x 4 interpolation matrix of axis 3 .*"
                              r"max_folded_elements"):
        import_onnx(model)
    assert import_onnx(model).network is not None   # within the default budget

"""ONNX import against the ONNX backend test data shipped in the ``onnx`` wheel.

Every case of ``onnx/backend/test/data/pytorch-converted`` and ``pytorch-operator`` is
imported and run in the torch and JAX backends; the outputs must match the reference
outputs stored with the case (the ONNX backend runner's tolerances, rtol 1e-3 and atol
1e-7), except for the documented skips below (each names the unsupported feature).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from petab_sciml.backends.torch import BACKEND as TORCH  # noqa: E402
from petab_sciml.formats.onnx import import_onnx  # noqa: E402

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
GROUPS = ("pytorch-converted", "pytorch-operator")
CASES = sorted(p for g in GROUPS for p in (DATA / g).iterdir() if p.is_dir()) \
    if DATA.is_dir() else []
RTOL, ATOL = 1e-3, 1e-7

SKIPS = {
    "test_Embedding": "Gather on a runtime integer index tensor (an embedding lookup): "
                      "PEtab SciML network inputs are real-valued",
    "test_Embedding_sparse": "Gather on a runtime integer index tensor (an embedding "
                             "lookup): PEtab SciML network inputs are real-valued",
}
"""Unsupported features, by case (at most 15 % of the cases)."""


def _jax():
    try:
        from petab_sciml.backends.jax import BACKEND
    except Exception:  # pragma: no cover - JAX backend missing
        return None
    return BACKEND


JAX = _jax()


def _tensor(path: Path) -> np.ndarray:
    from onnx import numpy_helper

    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def _datasets(case: Path) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    out = []
    for ds in sorted(case.glob("test_data_set_*")):
        ins = [_tensor(f) for f in sorted(ds.glob("input_*.pb"))]
        outs = [_tensor(f) for f in sorted(ds.glob("output_*.pb"))]
        out.append((ins, outs))
    return out


def test_skip_list_is_small_and_real():
    names = {c.name for c in CASES}
    assert len(CASES) > 100
    assert set(SKIPS) <= names
    assert len(SKIPS) <= math.floor(0.15 * len(CASES))


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.slow
def test_backend_data_case(case: Path):
    if case.name in SKIPS:
        with pytest.raises(Exception, match="Gather"):
            import_onnx(case / "model.onnx")
        pytest.skip(SKIPS[case.name])
    result = import_onnx(case / "model.onnx")
    model = TORCH.build(result.network, dtype=result.dtype)
    TORCH.set_parameters(model, result.parameters)
    jax_model = None
    if JAX is not None:
        jax_model = JAX.set_parameters(JAX.build(result.network, dtype=result.dtype),
                                       result.parameters)
    for inputs, expected in _datasets(case):
        got = TORCH.forward(model, inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, err_msg="torch")
        if jax_model is not None:
            for g, e in zip(JAX.forward(jax_model, inputs), expected):
                np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, err_msg="jax")


def test_pytorch_layers_are_lifted():
    """Cases that are one PyTorch layer import as that layer, with its arrays."""
    expected = {
        "test_Conv2d": "Conv2d", "test_ConvTranspose2d": "ConvTranspose2d",
        "test_BatchNorm3d_eval": "BatchNorm3d", "test_Linear": "Linear",
        "test_Linear_no_bias": "Linear", "test_MaxPool1d_stride_padding_dilation": "MaxPool1d",
        "test_AvgPool3d": "AvgPool3d", "test_operator_flatten": "Flatten",
        "test_operator_symbolic_override": "InstanceNorm2d",
    }
    for name, layer_type in expected.items():
        group = "pytorch-operator" if name.startswith("test_operator") else "pytorch-converted"
        net = import_onnx(DATA / group / name / "model.onnx").network
        assert [layer.type for layer in net.layers.values()] == [layer_type], name
        assert not [n for n in net.nodes if n.op == "call_function"], name


def test_batchnorm_momentum_and_buffers():
    result = import_onnx(DATA / "pytorch-converted" / "test_BatchNorm2d_momentum_eval"
                         / "model.onnx")
    (layer,) = result.network.layers.values()
    assert layer.config["momentum"] == pytest.approx(0.8)  # ONNX momentum 0.2
    assert layer.config["eps"] == 1e-3
    arrays = layer.arrays()
    assert arrays["weight"].trainable and not arrays["running_mean"].trainable
    kinds = {e.array: e.kind for e in result.names}
    assert kinds["running_mean"] == "buffer" and kinds["weight"] == "layer"

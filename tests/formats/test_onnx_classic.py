"""Classic ONNX files (IR version 3, opsets 7-9, initializers listed as graph inputs, LRN,
Softmax before opset 13) import and match onnxruntime in both backends.

Two sources: classic model-zoo networks from the onnx wheel's ``light`` test data with
random weights (:mod:`tests.support.classic_onnx`; all nine with
``python tests/support/classic_onnx.py``), and small graphs written here for the features
one at a time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats.onnx import import_onnx  # noqa: E402
from petab_sciml.plugins import get_backend  # noqa: E402
from tests.support.classic_onnx import (  # noqa: E402
    classic_model,
    compare,
    data_input,
    light_dir,
    onnxruntime_outputs,
    outputs_against_onnxruntime,
    relative_error,
)

TOL = 1e-4
"""Relative to the largest output: float32 sums in another order than onnxruntime's."""


@pytest.mark.skipif(not light_dir().is_dir(), reason="the onnx wheel has no light models")
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1"])
@pytest.mark.slow
def test_classic_zoo_model_matches_onnxruntime(name: str) -> None:
    model = classic_model(name)
    assert model.ir_version == 3 and model.opset_import[0].version == 9
    inits = {t.name for t in model.graph.initializer}
    assert inits <= {i.name for i in model.graph.input}  # initializers are graph inputs
    errors = compare(name)
    assert errors["torch"] <= TOL and errors["jax"] <= TOL, errors


# ----------------------------------------------------------------------------- small graphs
def _model(nodes, inputs, outputs, inits=(), *, opset=8, ir=3, init_inputs=True,
           init_shapes=True):
    """An old-style model: initializers also listed as graph inputs (IR < 4)."""
    graph_inputs = list(inputs)
    if init_inputs:
        graph_inputs += [helper.make_tensor_value_info(
            t.name, t.data_type, list(t.dims) if init_shapes else None) for t in inits]
    graph = helper.make_graph(nodes, "classic", graph_inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _run_both(model, feeds: dict[str, np.ndarray]) -> dict[str, float]:
    """Relative errors of both backends against onnxruntime."""
    reference, outputs, _ = outputs_against_onnxruntime(model, feeds)
    return {name: max(relative_error(g, r) for g, r in zip(got, reference))
            for name, got in outputs.items()}


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _conv_lrn_reshape_gemm(size: int, init_shapes: bool = True):
    rng = np.random.default_rng(size)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, 6).astype(np.float32), "b")
    fc = numpy_helper.from_array(rng.normal(0, 0.1, (4, 6 * 3 * 3)).astype(np.float32), "fc")
    fcb = numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "fcb")
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("LRN", ["r"], ["n"], size=size, alpha=0.3, beta=0.6, bias=1.5),
        helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["g"], transB=1),
        helper.make_node("Softmax", ["g"], ["y"]),
    ]
    return _model(nodes, [_value("x", [2, 3, 6, 6])], [_value("y", [2, 4]), _value("g", None)],
                  [w, b, fc, fcb, shape], init_shapes=init_shapes)


@pytest.mark.parametrize("size", [3, 5])
def test_ir3_conv_lrn_reshape_gemm_softmax(size: int) -> None:
    """LRN, and a Reshape whose shape is an initializer that is also a graph input."""
    model = _conv_lrn_reshape_gemm(size)
    x = np.random.default_rng(0).normal(size=(2, 3, 6, 6)).astype(np.float32)
    errors = _run_both(model, {"x": x})
    assert max(errors.values()) <= TOL, errors
    layers = import_onnx(model).network.layers.values()
    assert "LocalResponseNorm" in {layer.type for layer in layers}


def _lrn_by_the_spec(x: np.ndarray, size: int, alpha: float, beta: float, bias: float
                     ) -> np.ndarray:
    """The ONNX operator text: square_sum[n, c] = sum of x[n, i]**2 over i in
    [max(0, c - floor((size-1)/2)), min(C-1, c + ceil((size-1)/2))]."""
    channels = x.shape[1]
    square_sum = np.zeros_like(x, dtype=np.float64)
    for c in range(channels):
        lo = max(0, c - (size - 1) // 2)
        hi = min(channels - 1, c + -(-(size - 1) // 2))
        square_sum[:, c] = np.sum(x[:, lo:hi + 1].astype(np.float64) ** 2, axis=1)
    return x / (bias + alpha / size * square_sum) ** beta


@pytest.mark.parametrize("size", [1, 2, 3, 4, 6])
def test_lrn_matches_the_operator_definition(size: int) -> None:
    """Even sizes too, where ONNX's window reaches one channel further up than
    PyTorch's (onnxruntime runs odd sizes only; onnx's reference evaluator sums over the
    wrong axis), so the reference is the operator's formula."""
    nodes = [helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.4, beta=0.7,
                              bias=1.2)]
    model = _model(nodes, [_value("x", [2, 7, 3, 2])], [_value("y", None)])
    x = np.random.default_rng(size).normal(size=(2, 7, 3, 2)).astype(np.float32)
    expected = _lrn_by_the_spec(x, size, 0.4, 0.7, 1.2)
    result = import_onnx(model)
    for name in ("torch", "jax"):
        backend = get_backend(name)
        module = backend.set_parameters(backend.build(result.network), result.parameters)
        (got,) = backend.forward(module, [x])
        assert relative_error(got, expected) <= 1e-6, name


def test_initializer_inputs_without_shapes_still_give_shapes() -> None:
    """Old exporters list initializers as inputs without a shape; shape inference runs on
    a copy without them, so the Softmax (opset 8, needs the rank) converts."""
    model = _conv_lrn_reshape_gemm(5, init_shapes=False)
    x = np.random.default_rng(1).normal(size=(2, 3, 6, 6)).astype(np.float32)
    assert max(_run_both(model, {"x": x}).values()) <= TOL


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(8, 1), (8, 2), (11, 1), (13, -1), (13, 1)])
def test_softmax_family_by_opset(op: str, opset: int, axis: int) -> None:
    """Before opset 13 the op works on the input flattened to 2-D at ``axis``; from 13 on
    along ``axis``.  Hardmax marks the first maximum (ties included)."""
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    if op == "Hardmax":
        x[0, 1] = x[0, 1].max()  # ties
    nodes = [helper.make_node(op, ["x"], ["y"], axis=axis)]
    model = _model(nodes, [_value("x", [2, 3, 4])], [_value("y", [2, 3, 4])], opset=opset,
                   ir=3 if opset < 9 else 7)
    errors = _run_both(model, {"x": x})
    assert max(errors.values()) <= 1e-6, errors


def test_softmax_before_opset_13_without_static_sizes() -> None:
    """Sizes known only at run time: the flatten-to-2-D softmax as reductions."""
    x = np.random.default_rng(3).normal(size=(2, 3, 4)).astype(np.float32)
    nodes = [helper.make_node("LogSoftmax", ["x"], ["y"], axis=1)]
    model = _model(nodes, [_value("x", ["N", "C", "L"])], [_value("y", None)], opset=8)
    assert max(_run_both(model, {"x": x}).values()) <= 1e-6


def test_initializer_missing_from_inputs_in_ir3() -> None:
    """IR 3 wants every initializer among the inputs; files that leave some out still
    import (inference runs in a newer IR)."""
    model = _conv_lrn_reshape_gemm(3)
    kept = [i for i in model.graph.input if i.name != "shape"]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    result = import_onnx(model)
    assert result.network.layers


def _softmax_of_unknown_rank():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=1)]
    return _model(nodes, [_value("x", None)], [_value("y", None)], opset=8)


def test_missing_shapes_are_named_in_the_error() -> None:
    with pytest.raises(NetworkError) as info:
        import_onnx(_softmax_of_unknown_rank())
    message = str(info.value)
    assert "Softmax" in message and "needs the input rank" in message
    assert "ONNX shape inference found no shape for 'r'" in message


def test_failed_shape_inference_is_named_in_the_error(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise onnx.shape_inference.InferenceError("[ShapeInferenceError] broken graph")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refuse)
    with pytest.raises(NetworkError) as info:
        import_onnx(_softmax_of_unknown_rank())
    message = str(info.value)
    assert "ONNX shape inference failed on this model" in message
    assert "broken graph" in message


def _write_zoo_case(name: str, folder: Path) -> Path:
    """The zoo model ``name`` as an ML-import case: net.yaml and its parameters from our
    import, a random input, and onnxruntime's output as the reference."""
    from petab_sciml.arrays import write_array_file
    from petab_sciml.formats import yaml as yaml_format
    from petab_sciml.formats.onnx import import_onnx

    model = classic_model(name)
    input_name, shape = data_input(model)
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    references = onnxruntime_outputs(model, {input_name: x})
    result = import_onnx(model)
    folder.mkdir()
    yaml_format.write(result.network, folder / "net.yaml")
    net = result.network.id
    write_array_file(folder / "net_ps.hdf5", parameters={net: result.parameters})
    write_array_file(folder / "net_input.hdf5", inputs={result.network.inputs[0]: {"data": x}})
    write_array_file(folder / "net_output.hdf5",
                     outputs={f"output{k}": {"data": r} for k, r in enumerate(references)})
    (folder / "solutions.yaml").write_text(
        "net_file: net.yaml\nnet_input: [net_input.hdf5]\nnet_ps: [net_ps.hdf5]\n"
        f"net_output: [net_output.hdf5]\n"
        f"tol: {TOL * max(float(np.max(np.abs(r))) for r in references)}\n")
    return folder


@pytest.mark.skipif(not light_dir().is_dir(), reason="the onnx wheel has no light models")
@pytest.mark.slow
def test_zoo_case_passes_test_cases_run_with_a_gradient_to_compare(tmp_path):
    """A softmax-headed zoo network (SqueezeNet) as a case of ``test-cases run --backend
    all --mode eval``: the outputs match onnxruntime's and the cross-backend
    vector-Jacobian products are compared, with a norm far above rounding (the
    sum-of-outputs gradient this check replaced was zero there)."""
    from petab_sciml import testcases

    case = _write_zoo_case("squeezenet", tmp_path / "squeezenet")
    results = testcases.run_all([case], ["torch", "jax"], mode="eval")
    for r in results:
        assert r.passed, (r.error, r.max_abs_error, r.cross)
        assert r.cross["gradient_compared"] and r.gradient_norm > 1e-3


@pytest.mark.skipif(not light_dir().is_dir(), reason="the onnx wheel has no light models")
@pytest.mark.slow
def test_inception_products_agree_in_float64(tmp_path):
    """Inception v1 (the zoo model whose sum-of-outputs gradient check failed on noise):
    in float64 the backends' vector-Jacobian products agree to 1e-7 of the largest entry,
    with a norm far above rounding.  In float32 they differ by up to 2e-4 of it from run
    to run (rounding decides a few ReLU and max-pool kinks differently), which the
    float32 tolerance of 1e-4 does not always admit."""
    from petab_sciml import testcases

    case = testcases.load_case(_write_zoo_case("inception_v1", tmp_path / "inception_v1"))
    cross = testcases.cross_backend(case, ["torch", "jax"], dtype="float64", mode="eval")
    out_tol, grad_tol = testcases.CROSS_TOLERANCES["float64"]
    assert cross["gradient_compared"] and cross["gradient_max_rel_diff"] <= grad_tol
    assert min(cross["gradient_norm"].values()) > 1e-3
    assert cross["output_max_abs_diff"] <= out_tol

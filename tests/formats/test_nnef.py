"""NNEF <-> IR.

* Every network of ``test_cases/`` is exported to ONNX by PyTorch and converted to NNEF by
  ``nnef_tools.convert`` (with ``--tensor-mapping``); each one it converts imports with
  outputs equal to the nnef_tools PyTorch interpreter's to 1e-5.
* Every network of ``test_cases/`` goes IR -> NNEF -> IR identically; the nnef_tools
  interpreter agrees with the torch backend on the written files, and lifting the graph
  alone (without our ``petab_sciml.json``) gives the same outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nnef = pytest.importorskip("nnef")
pytest.importorskip("nnef_tools")

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats import nnef as nnef_format  # noqa: E402
from petab_sciml.formats import yaml as yaml_format  # noqa: E402
from petab_sciml.plugins import get_backend, get_format  # noqa: E402
from tests.formats.test_torchscript import CASES, GENERATE, case_folder, max_error  # noqa: E402

TOL = 1e-5
ONNX_OPSET = 13
"""nnef_tools 1.0 converts opset 13 models (newer opsets move ``axes`` to inputs)."""

def _args(onnx_path: Path, out: Path, mapping: Path) -> argparse.Namespace:
    """``nnef_tools.convert`` command-line arguments (defaults plus a tensor mapping)."""
    return argparse.Namespace(
        input_model=str(onnx_path), output_model=str(out), input_format="onnx",
        output_format="nnef", input_shapes=None, io_transpose=None, fold_constants=False,
        optimize=False, dequantize=False, custom_converters=None, custom_shapes=None,
        custom_fragments=None, custom_optimizers=None, mirror_unsupported=False,
        generate_custom_fragments=False, keep_io_names=False, decompose=None,
        input_names=None, output_names=None, static_only=False,
        tensor_mapping=str(mapping), annotate_shapes=False, compress=None)


def _interpret(folder: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of the nnef_tools PyTorch interpreter (an NNEF implementation of its own)."""
    from nnef_tools.interpreter.pytorch import Interpreter

    with contextlib.redirect_stdout(io.StringIO()):
        # prelu as NNEF defines it (select(x < 0, alpha * x, x), NNEF broadcasting): the
        # interpreter's own prelu is F.prelu, which refuses an alpha of shape [1, C, 1].
        interpreter = Interpreter(str(folder), device="cpu",
                                  decomposed=["erf", "mean_variance_normalization", "prelu"])
        outputs = interpreter([np.asarray(x) for x in inputs])
    return [np.asarray(outputs[t.name]) for t in interpreter.output_details()]


def _valid_nnef(folder: Path) -> str | None:
    """None if the NNEF graph passes shape inference, else the reason."""
    from nnef import shapes

    graph = nnef.load_graph(str(folder), load_variables=False)
    custom = {"erf": shapes.unary_shape,
              "mean_variance_normalization": lambda input, *a, **k: input}
    try:
        nnef.infer_shapes(graph, custom_shapes=custom)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """ONNX (PyTorch) -> NNEF (nnef_tools) of every case, with interpreter references."""
    from nnef_tools import convert as nnef_convert

    folder = tmp_path_factory.mktemp("nnef_tools")
    out: dict[str, Any] = {}
    for _, case in CASES:
        module, inputs = GENERATE.build(case, 1)
        module = copy.deepcopy(module).eval()
        onnx_path = folder / f"{case.name}.onnx"
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                torch.onnx.export(module, tuple(inputs), str(onnx_path), dynamo=False,
                                  opset_version=ONNX_OPSET, do_constant_folding=False,
                                  input_names=case.input_ids)
        except Exception as exc:  # noqa: BLE001
            out[case.name] = {"skip": f"PyTorch cannot export it to ONNX: "
                                      f"{str(exc).splitlines()[0][:150]}"}
            continue
        nnef_dir, mapping = folder / f"{case.name}.nnef", folder / f"{case.name}.json"
        log = io.StringIO()
        with contextlib.redirect_stdout(log), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = nnef_convert.main(_args(onnx_path, nnef_dir, mapping))
        if code != 0:
            out[case.name] = {"skip": "nnef_tools.convert cannot convert it: "
                                      + " ".join(log.getvalue().split())[-200:]}
            continue
        invalid = _valid_nnef(nnef_dir)
        if invalid:
            out[case.name] = {"skip": f"nnef_tools wrote an invalid NNEF graph ({invalid})"}
            continue
        x = [t.numpy() for t in inputs]
        try:
            expected = _interpret(nnef_dir, x)
        except Exception as exc:  # noqa: BLE001
            out[case.name] = {"skip": f"the nnef_tools interpreter fails on it: "
                                      f"{type(exc).__name__}: {str(exc)[:150]}"}
            continue
        out[case.name] = {"folder": nnef_dir, "mapping": mapping, "inputs": x,
                          "expected": expected}
    return out


def _forward(network: Any, params: Any, inputs: list[np.ndarray], backend: str = "torch"
             ) -> Any:
    b = get_backend(backend)
    model = b.set_parameters(b.build(network), params)
    return b.forward(model, inputs, train=False)


@pytest.mark.skipif(GENERATE is None, reason="test_cases/generate.py not found")
@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[c.name for _, c in CASES])
def test_nnef_tools_conversions_import(case: Any, converted: dict[str, Any]) -> None:
    item = converted[case.name]
    if "skip" in item:
        pytest.skip(item["skip"])
    network, params = nnef_format.read_with_parameters(item["folder"],
                                                       tensor_mapping=item["mapping"])
    got = _forward(network, params, item["inputs"])
    error = max_error(got, item["expected"])
    assert error <= TOL, f"differs from the nnef_tools interpreter by {error}"


def test_enough_conversions_are_checked(converted: dict[str, Any]) -> None:
    checked = [name for name, item in converted.items() if "skip" not in item]
    assert len(checked) >= 60, f"only {len(checked)} networks converted"


def test_nnef_tools_import_in_jax_and_names(converted: dict[str, Any]) -> None:
    """Layer ids come from the tensor mapping (module paths); JAX agrees."""
    item = converted.get("cnn")
    if item is None or "skip" in item:
        pytest.skip("the cnn case did not convert")
    network, params = nnef_format.read_with_parameters(item["folder"],
                                                       tensor_mapping=item["mapping"])
    assert set(network.layers) == {"conv1", "pool1", "conv2", "pool2", "fc1", "fc2"}
    assert params["conv1"]["bias"].shape == (4,)
    got = _forward(network, params, item["inputs"], "jax")
    assert max_error(got, item["expected"]) <= TOL
    # without the mapping the NNEF tensor names are used
    unnamed, _ = nnef_format.read_with_parameters(item["folder"])
    assert {"conv1", "max_pool1"} <= set(unnamed.layers)


# ----------------------------------------------------------------------------- IR -> NNEF -> IR
def _case_network(index: int, case: Any) -> tuple[Any, dict, list[np.ndarray]]:
    from petab_sciml.arrays import load_parameters
    from petab_sciml.testcases import _inputs_of, load_case

    folder = case_folder(index, case)
    loaded = load_case(folder)
    network = yaml_format.read(loaded.net_file)
    backend = get_backend("torch")
    model = backend.build(network)
    if loaded.params[0] is not None:
        backend.set_parameters(model, load_parameters(loaded.params[0], network))
    return network, backend.get_parameters(model), _inputs_of(loaded, 0)


@pytest.mark.skipif(GENERATE is None, reason="test_cases/generate.py not found")
@pytest.mark.parametrize("index,case", CASES, ids=[c.name for _, c in CASES])
def test_ir_nnef_ir_is_identical(index: int, case: Any, tmp_path: Path) -> None:
    if not (case_folder(index, case) / "net.yaml").is_file():
        pytest.skip("case folder not generated")
    network, params, inputs = _case_network(index, case)
    target = tmp_path / "model"
    nnef_format.write(network, target, params=params,
                      input_shapes=[list(x.shape) for x in inputs])
    nnef.load_graph(str(target))  # the reference parser reads it
    back, back_params = nnef_format.read_with_parameters(target)
    assert yaml_format.dumps(back) == yaml_format.dumps(network)
    for group, arrays in network.parameter_arrays().items():
        for array, info in arrays.items():
            if info.trainable or array != "num_batches_tracked":
                np.testing.assert_array_equal(back_params[group][array],
                                              np.asarray(params[group][array]))
    expected = _forward(network, params, inputs)
    interpreted = _interpret(target, inputs)
    assert max_error(interpreted, expected) <= TOL, "the interpreter disagrees"
    lifted, lifted_params = nnef_format.read_with_parameters(target, metadata=False)
    assert max_error(_forward(lifted, lifted_params, inputs), expected) <= TOL


# ----------------------------------------------------------------------------- unit tests
def _mlp() -> tuple[Any, dict]:
    network = yaml_format.network_from_dict({
        "nn_model_id": "net1", "inputs": [{"input_id": "input0"}],
        "layers": [
            {"layer_id": "layer1", "layer_type": "Linear",
             "args": {"in_features": 3, "out_features": 4}},
            {"layer_id": "drop", "layer_type": "Dropout", "args": {"p": 0.2}},
            {"layer_id": "layer2", "layer_type": "Linear",
             "args": {"in_features": 4, "out_features": 2}},
        ],
        "forward": [
            {"name": "x", "op": "placeholder", "target": "x"},
            {"name": "layer1", "op": "call_module", "target": "layer1", "args": ["x"]},
            {"name": "tanh", "op": "call_method", "target": "tanh", "args": ["layer1"]},
            {"name": "drop", "op": "call_module", "target": "drop", "args": ["tanh"]},
            {"name": "layer2", "op": "call_module", "target": "layer2", "args": ["drop"]},
            {"name": "output", "op": "output", "target": "output", "args": ["layer2"]},
        ]})
    rng = np.random.default_rng(0)
    params = {lid: {a: rng.standard_normal(i.shape).astype(np.float32)
                    for a, i in arrays.items()}
              for lid, arrays in network.parameter_arrays().items()}
    return network, params


def test_archive_round_trip(tmp_path: Path) -> None:
    network, params = _mlp()
    archive = tmp_path / "net.tgz"
    nnef_format.write(network, archive, params=params)  # default input shape [1, 3]
    back, back_params = get_format("nnef").read(archive), None
    assert yaml_format.dumps(back) == yaml_format.dumps(network)
    _, back_params = nnef_format.read_with_parameters(archive)
    np.testing.assert_array_equal(back_params["layer2"]["bias"], params["layer2"]["bias"])


def test_graph_alone_drops_dropout_and_keeps_labels(tmp_path: Path) -> None:
    network, params = _mlp()
    nnef_format.write(network, tmp_path / "m", params=params, input_shapes=[[5, 3]])
    text = (tmp_path / "m" / "graph.nnef").read_text()
    assert "label = 'layer1.weight'" in text and "drop" not in text
    lifted, lifted_params = nnef_format.read_with_parameters(tmp_path / "m", metadata=False)
    assert [layer.type for layer in lifted.layers.values()] == ["Linear", "Linear"]
    assert set(lifted.layers) == {"layer1", "layer2"} and lifted.id == "net1"
    x = [np.ones((5, 3), np.float32)]
    np.testing.assert_allclose(_forward(lifted, lifted_params, x)[0],
                               _forward(network, params, x)[0], atol=1e-6)


def test_edited_graph_is_lifted_not_taken_from_metadata(tmp_path: Path) -> None:
    network, params = _mlp()
    nnef_format.write(network, tmp_path / "m", params=params, input_shapes=[[2, 3]])
    graph = tmp_path / "m" / "graph.nnef"
    graph.write_text(graph.read_text().replace("tanh(", "sigmoid("))
    edited = nnef_format.read(tmp_path / "m")
    functions = {n.function for n in edited.nodes if n.function}
    assert "sigmoid" in functions and "tanh" not in functions


def _write_graph(folder: Path, text: str, variables: dict[str, np.ndarray]) -> Path:
    folder.mkdir()
    (folder / "graph.nnef").write_text(text)
    for label, data in variables.items():
        (folder / f"{label}.dat").parent.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{label}.dat", "wb") as handle:
            nnef.write_tensor(handle, np.asarray(data, np.float32))
    return folder


def test_hand_written_graph_reshape_pool_and_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((4, 2, 3)), rng.standard_normal((1, 4))
    fc = rng.standard_normal((3, 8))
    text = """version 1.0;
graph net( input ) -> ( out )
{
    input = external<scalar>(shape = [2, 2, 9]);
    w = variable<scalar>(shape = [4, 2, 3], label = 'encoder/conv/weight');
    b = variable<scalar>(shape = [1, 4], label = 'encoder/conv/bias');
    fc = variable<scalar>(shape = [3, 8], label = 'head.weight');
    c = conv(input, w, b, padding = [(1, 1)], stride = [1]);
    r = relu(c);
    p = max_pool(r, size = [1, 1, 3], stride = [1, 1, 2], padding = [(0, 0), (0, 0), (1, 2)],
                 border = 'ignore');
    f = reshape(p, shape = [0, -1]);
    s = slice(f, axes = [1], begin = [0], end = [8]);
    out = linear(s, fc, 0.0);
}
"""
    folder = _write_graph(tmp_path / "m", text, {
        "encoder/conv/weight": w, "encoder/conv/bias": b, "head.weight": fc})
    network, params = nnef_format.read_with_parameters(folder)
    assert {lid: layer.type for lid, layer in network.layers.items()} == {
        "encoder_conv": "Conv1d", "p": "MaxPool1d", "head": "Linear"}
    pool = network.layers["p"].config
    assert pool["ceil_mode"] is True and pool["padding"] == 1 and pool["kernel_size"] == 3
    assert network.layers["head"].config["bias"] is False
    assert any(n.function == "flatten" for n in network.nodes)
    x = rng.standard_normal((2, 2, 9)).astype(np.float32)
    expected = _interpret(folder, [x])
    assert max_error(_forward(network, params, [x]), expected) <= TOL


def test_unsupported_operation_names_the_file(tmp_path: Path) -> None:
    text = """version 1.0;
graph net( input ) -> ( out )
{
    input = external<scalar>(shape = [2, 3]);
    out = tile(input, repeats = [1, 2]);
}
"""
    folder = _write_graph(tmp_path / "m", text, {})
    with pytest.raises(NetworkError) as info:
        nnef_format.read(folder)
    assert str(folder) in str(info.value) and "'tile'" in str(info.value)


def test_registered_and_runs_no_code(tmp_path: Path) -> None:
    fmt = get_format("nnef")
    assert not fmt.runs_code and fmt.write is not None
    network, params = _mlp()
    nnef_format.write(network, tmp_path / "m", params=params)
    assert fmt.read(tmp_path / "m", trust_code=False).id == "net1"
    shutil.rmtree(tmp_path / "m")

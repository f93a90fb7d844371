"""IR -> ONNX export: checker-clean models that onnxruntime runs like our torch backend.

Every network of ``test_cases/`` and of the official suite's ML-import cases is exported
(with its input shapes and the case's parameters), checked with
``onnx.checker.check_model(full_check=True)``, run in onnxruntime and compared with the
torch backend (eval mode) to 1e-5; the export is imported back and must give the same
outputs, with the layer ids and types of the original where ONNX has the layer.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from petab_sciml.arrays import load_parameters, read_array_file  # noqa: E402
from petab_sciml.backends.torch import BACKEND as TORCH  # noqa: E402
from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats import onnx as onnx_format  # noqa: E402
from petab_sciml.formats.onnx import import_onnx, to_onnx  # noqa: E402
from petab_sciml.formats.yaml import read as read_yaml  # noqa: E402
from petab_sciml.network import Network  # noqa: E402
from petab_sciml.plugins import format_for_path, get_format  # noqa: E402
from tests.support.suite import ml_import_cases  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OURS = sorted(p for p in (REPO / "test_cases").iterdir() if (p / "net.yaml").is_file())
CASES = OURS + ml_import_cases()
TOL = 1e-5

# Layer types an ONNX op maps back to one-to-one (others export as several ops).
ROUND_TRIP = {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
              "ConvTranspose2d", "ConvTranspose3d", "MaxPool1d", "MaxPool2d", "MaxPool3d",
              "LayerNorm", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
              "AlphaDropout", "PReLU"}


def _case_id(path: Path) -> str:
    return f"{path.parent.name[:5]}/{path.name}"


def _first_inputs(case: Path, solutions: dict, network: Network) -> list[np.ndarray]:
    if "net_input" in solutions:
        files = solutions["net_input"]
        files = [files[0] if isinstance(files, list) else files]
    else:
        keys = sorted(k for k in solutions if k.startswith("net_input_arg"))
        files = [solutions[k][0] if isinstance(solutions[k], list) else solutions[k]
                 for k in keys]
    out = []
    for f in files:
        arrays = read_array_file(case / f).inputs
        (by_key,) = arrays.values()
        out.append(np.asarray(next(iter(by_key.values())).read(), dtype=np.float32))
    assert len(out) == len(network.inputs)
    return out


def _reference(case: Path):
    solutions = yaml.safe_load((case / "solutions.yaml").read_text())
    network = read_yaml(case / solutions.get("net_file", "net.yaml"))
    inputs = _first_inputs(case, solutions, network)
    model = TORCH.build(network)
    ps = solutions.get("net_ps")
    if ps:
        first = ps[0] if isinstance(ps, list) else ps
        TORCH.set_parameters(model, load_parameters(case / first, network, strict=False),
                             strict=False)
    params = TORCH.get_parameters(model)
    return network, inputs, params, TORCH.forward(model, inputs)


def _close(got, ref) -> bool:
    return len(got) == len(ref) and all(
        g.shape == r.shape and np.allclose(g, r, rtol=TOL, atol=TOL) for g, r in zip(got, ref))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_export_runs_in_onnxruntime(case: Path):
    network, inputs, params, ref = _reference(case)
    shapes = {i: list(x.shape) for i, x in zip(network.inputs, inputs)}
    model = to_onnx(network, params, input_shapes=shapes)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 17
    arrays = network.parameter_arrays()
    for init in model.graph.initializer:
        group, _, array = init.name.partition(".")
        assert array in arrays.get(group, {}), init.name
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(init),
                                      np.asarray(params[group][array], dtype=np.float32))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
    assert _close(got, ref), "onnxruntime differs from the torch backend"

    back = import_onnx(model.SerializeToString(), net_id=network.id)
    model2 = TORCH.build(back.network)
    TORCH.set_parameters(model2, back.parameters)
    assert _close(TORCH.forward(model2, inputs), ref), "re-import differs"
    called = {n.target for n in network.nodes if n.op == "call_module"}
    for layer in network.layers.values():
        if layer.type in ROUND_TRIP and layer.id in called:
            assert back.network.layers[layer.id].type == layer.type


def test_format_registration(tmp_path: Path):
    assert get_format("onnx") is onnx_format.FORMAT
    assert format_for_path(tmp_path / "model.onnx") is onnx_format.FORMAT


def test_write_without_parameters_uses_default_init(tmp_path: Path):
    network = read_yaml(REPO / "test_cases" / "001_linear" / "net.yaml")
    with pytest.warns(UserWarning, match="default initialisation"):
        onnx_format.write(network, tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    onnx.checker.check_model(model, full_check=True)
    # the graph input gets a dynamic batch size from the first layer (Linear)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N" and dims[1].dim_value == 4
    expected = TORCH.get_parameters(TORCH.build(network, seed=0))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(inits["layer1.weight"], expected["layer1"]["weight"])


def test_export_needs_input_rank_for_function_first_networks():
    network = read_yaml(REPO / "test_cases" / "085_transpose" / "net.yaml")
    with pytest.raises(NetworkError, match="input_shapes"):
        to_onnx(network, {})


def test_exported_metadata_names_layers():
    network, inputs, params, _ = _reference(REPO / "test_cases" / "091_cnn")
    model = to_onnx(network, params, input_shapes={"input0": list(inputs[0].shape)})
    layers = {p.value for n in model.graph.node for p in n.metadata_props
              if p.key == "pkg.petab_sciml.layer"}
    assert layers == set(network.layers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = import_onnx(model.SerializeToString())
    assert list(back.network.layers) == list(network.layers)
    assert [layer.type for layer in back.network.layers.values()] == \
        [layer.type for layer in network.layers.values()]


def test_every_catalogue_layer_and_function_has_one_exporter():
    """Each layer type and function has its exporter registered (activation layers
    export as their function)."""
    from petab_sciml.catalogue import FUNCTIONS, LAYERS
    from petab_sciml.formats.onnx_export import registry

    layers = {t for t, spec in LAYERS.items() if spec.function is None}
    assert layers <= set(registry.LAYERS.handlers)
    assert set(FUNCTIONS) <= set(registry.FUNCTIONS.handlers)


def test_convert_round_trip_keeps_the_network_id_and_float64(tmp_path: Path):
    """``petab-sciml convert`` of the bundled network to ONNX and back: the id comes back
    (not the file name); float64 parameters that float32 cannot hold are either narrowed
    with a warning giving the largest change (the default: the model runs in
    onnxruntime) or, with ``--dtype float64``, kept bit for bit."""
    import torch
    from click.testing import CliRunner

    from petab_sciml.arrays import save_parameters
    from petab_sciml.cli import main

    example = REPO / "examples" / "lotka_volterra_ude"
    network = read_yaml(example / "net1.yaml")
    rng = np.random.default_rng(0)
    trained = {layer: {name: value + rng.normal(size=value.shape) * 1e-3
                       for name, value in arrays.items()}
               for layer, arrays in load_parameters(example / "net1_ps.hdf5", network,
                                                    strict=False).items()}
    params_file = tmp_path / "trained_ps.hdf5"
    save_parameters(params_file, network, trained)
    change = max(float(np.max(np.abs(v.astype(np.float32) - v)))
                 for arrays in trained.values() for v in arrays.values())
    x = rng.normal(size=(5, 2))
    module = TORCH.build(network, dtype="float64")
    TORCH.set_parameters(module, trained)
    with torch.no_grad():
        (ref,) = TORCH.forward(module, [x])

    def convert(*args):
        run = CliRunner().invoke(main, ["convert", *map(str, args)])
        assert run.exit_code == 0, run.output
        return run.output

    for dtype in ("float32", "float64"):
        onnx_file = tmp_path / f"trained_{dtype}.onnx"
        extra = [] if dtype == "float32" else ["--dtype", "float64"]
        output = convert(example / "net1.yaml", onnx_file, "--params-in", params_file, *extra)
        narrowed = "float64 parameters written as float32 (largest change"
        assert (narrowed in output) == (dtype == "float32")
        if dtype == "float32":
            assert f"largest change {change:.3g}," in output
        back_yaml, back_params = tmp_path / f"back_{dtype}.yaml", tmp_path / f"back_{dtype}.h5"
        convert(onnx_file, back_yaml, "--params", back_params)
        back = read_yaml(back_yaml)
        assert back.id == network.id == "net1"
        returned = load_parameters(back_params, back, strict=False)
        for layer, arrays in trained.items():
            for name, value in arrays.items():
                want = value if dtype == "float64" else value.astype(np.float32)
                np.testing.assert_array_equal(returned[layer][name], want)
        model = onnx.load(onnx_file)
        elem = onnx.TensorProto.DOUBLE if dtype == "float64" else onnx.TensorProto.FLOAT
        assert {init.data_type for init in model.graph.initializer} == {elem}
        if dtype == "float32":
            sess = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
            (got,) = sess.run(None, {sess.get_inputs()[0].name: x.astype(np.float32)})
            np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-5, atol=1e-5)


def test_convert_reads_params_in_and_writes_params_out(tmp_path: Path):
    """``--params-in`` and ``--params-out`` together: ONNX -> YAML with the weights
    read from a file instead of the ONNX ones, written to another; ``--params`` (the
    shortcut for one of them) with either is a usage error."""
    from click.testing import CliRunner

    from petab_sciml.arrays import save_parameters
    from petab_sciml.cli import main

    example = REPO / "examples" / "lotka_volterra_ude"
    network = read_yaml(example / "net1.yaml")
    onnx_file = tmp_path / "net1.onnx"
    run = CliRunner().invoke(main, ["convert", str(example / "net1.yaml"), str(onnx_file),
                                    "--params-in", str(example / "net1_ps.hdf5")])
    assert run.exit_code == 0, run.output
    replaced = {layer: {name: value * 2.0 for name, value in arrays.items()}
                for layer, arrays in load_parameters(example / "net1_ps.hdf5", network,
                                                     strict=False).items()}
    save_parameters(tmp_path / "replaced.h5", network, replaced)
    out = tmp_path / "written.h5"
    run = CliRunner().invoke(main, ["convert", str(onnx_file), str(tmp_path / "net.yaml"),
                                    "--params-in", str(tmp_path / "replaced.h5"),
                                    "--params-out", str(out)])
    assert run.exit_code == 0, run.output
    written = load_parameters(out, read_yaml(tmp_path / "net.yaml"), strict=False)
    for layer, arrays in replaced.items():
        for name, value in arrays.items():
            np.testing.assert_array_equal(written[layer][name], value)
    run = CliRunner().invoke(main, ["convert", str(onnx_file), str(tmp_path / "b.yaml"),
                                    "--params", str(tmp_path / "b.h5"),
                                    "--params-in", str(tmp_path / "replaced.h5")])
    assert run.exit_code == 2 and "--params is the shortcut" in run.output

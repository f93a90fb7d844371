"""IR -> NNEF for layer settings no network of ``test_cases/`` uses, each written with
standard NNEF operations: the file reads back to the identical IR, the nnef_tools PyTorch
interpreter (an independent NNEF implementation) agrees with PyTorch on it, and the graph
lifted without our metadata computes the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("nnef")
pytest.importorskip("nnef_tools")

from petab_sciml.formats import nnef as nnef_format  # noqa: E402
from petab_sciml.formats import yaml as yaml_format  # noqa: E402
from tests.formats.test_nnef import TOL, _forward, _interpret  # noqa: E402
from tests.formats.test_torchscript import max_error  # noqa: E402

LAYERS = {
    "conv2d_circular": ({"layer_type": "Conv2d", "args": {
        "in_channels": 2, "out_channels": 3, "kernel_size": 3, "padding": [1, 2],
        "padding_mode": "circular"}}, [2, 2, 5, 6]),
    "conv1d_circular_same": ({"layer_type": "Conv1d", "args": {
        "in_channels": 2, "out_channels": 3, "kernel_size": 4, "padding": "same",
        "padding_mode": "circular"}}, [2, 2, 7]),
    "batchnorm2d_batch_statistics": ({"layer_type": "BatchNorm2d", "args": {
        "num_features": 3, "track_running_stats": False}}, [4, 3, 2, 5]),
    "batchnorm1d_batch_statistics_noaffine": ({"layer_type": "BatchNorm1d", "args": {
        "num_features": 3, "affine": False, "track_running_stats": False}}, [4, 3]),
    "convtranspose2d_output_padding": ({"layer_type": "ConvTranspose2d", "args": {
        "in_channels": 2, "out_channels": 3, "kernel_size": 3, "stride": 3,
        "padding": [0, 1], "output_padding": [2, 2]}}, [2, 2, 4, 3]),
    "convtranspose1d_output_padding_nobias_unbatched": ({"layer_type": "ConvTranspose1d",
                                                         "args": {
        "in_channels": 2, "out_channels": 3, "kernel_size": 2, "stride": 2,
        "output_padding": 1, "bias": False}}, [2, 4]),
    "avgpool2d_ceil_count_include_pad": ({"layer_type": "AvgPool2d", "args": {
        "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}}, [2, 3, 6, 8]),
    "avgpool3d_ceil_count_include_pad": ({"layer_type": "AvgPool3d", "args": {
        "kernel_size": [3, 2, 3], "stride": 2, "padding": [1, 1, 0], "ceil_mode": True}},
        [1, 2, 6, 5, 6]),
    "avgpool2d_ceil_divisor_override": ({"layer_type": "AvgPool2d", "args": {
        "kernel_size": 3, "stride": 2, "padding": [1, 0], "ceil_mode": True,
        "divisor_override": 2}}, [2, 3, 6, 6]),
}


def _network(layer: dict[str, Any]) -> tuple[Any, dict]:
    network = yaml_format.network_from_dict({
        "nn_model_id": "net", "inputs": [{"input_id": "x"}],
        "layers": [dict(layer, layer_id="layer1")],
        "forward": [{"name": "x", "op": "placeholder", "target": "x"},
                    {"name": "layer1", "op": "call_module", "target": "layer1", "args": ["x"]},
                    {"name": "output", "op": "output", "target": "output",
                     "args": ["layer1"]}]})
    rng = np.random.default_rng(1)
    params = {g: {a: rng.standard_normal(i.shape).astype(np.float32)
                  for a, i in arrays.items() if i.dtype is None}
              for g, arrays in network.parameter_arrays().items()}
    return network, params


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_written_with_standard_operations(name: str, tmp_path: Path) -> None:
    layer, shape = LAYERS[name]
    network, params = _network(layer)
    x = [np.random.default_rng(2).standard_normal(shape).astype(np.float32)]
    target = tmp_path / "model"
    nnef_format.write(network, target, params=params, input_shapes=[shape])
    back, _ = nnef_format.read_with_parameters(target)
    assert yaml_format.dumps(back) == yaml_format.dumps(network)
    expected = _forward(network, params, x)
    assert max_error(_interpret(target, x), expected) <= TOL, "the interpreter disagrees"
    lifted, lifted_params = nnef_format.read_with_parameters(target, metadata=False)
    assert max_error(_forward(lifted, lifted_params, x), expected) <= TOL


def test_avgpool_overhang_is_really_rescaled(tmp_path: Path) -> None:
    """The ceil-mode window that overhangs the padded input has a smaller divisor in
    PyTorch: the written graph carries those per-position factors (not all 1)."""
    network, params = _network(LAYERS["avgpool2d_ceil_count_include_pad"][0])
    nnef_format.write(network, tmp_path / "m", params=params, input_shapes=[[2, 3, 6, 8]])
    text = (tmp_path / "m" / "graph.nnef").read_text()
    assert "constant<scalar>(shape = [1, 1, 4, 5]" in text and "1.5" in text


def test_comparisons_through_shape_functions(tmp_path: Path) -> None:
    """A comparison reshaped, concatenated and flipped stays a select condition; used as
    a number it is cast; bool + bool is "or" and bool * bool "and", as in PyTorch."""
    def call(name: str, target: str, *args: Any) -> dict[str, Any]:
        return {"name": name, "op": "call_function", "target": target, "args": list(args)}

    network = yaml_format.network_from_dict({
        "nn_model_id": "net", "inputs": [{"input_id": "x"}], "layers": [],
        "forward": [
            {"name": "x", "op": "placeholder", "target": "x"},
            call("gt", "gt", "x", 0.2), call("lt", "lt", "x", -0.5),
            call("cat", "cat", ["gt", "lt"], 1),
            call("flip", "flip", "cat", [1]),
            call("view", "reshape", "flip", [3, 2, 4]),
            call("doubled", "cat", ["x", "x"], 1),
            call("doubled_view", "reshape", "doubled", [3, 2, 4]),
            call("where", "where", "view", "doubled_view", -1.0),
            call("gt2", "gt", "x", 0.5),
            call("either", "add", "gt", "gt2"),
            call("both", "mul", "gt", "gt2"),
            call("either_x", "mul", "either", "x"),
            call("times", "add", "either_x", "both"),
            {"name": "output", "op": "output", "target": "output",
             "args": [["where", "times"]]}]})
    x = [np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)]
    nnef_format.write(network, tmp_path / "m", params={}, input_shapes=[[3, 4]])
    text = (tmp_path / "m" / "graph.nnef").read_text()
    assert "select(" in text and "cast<scalar>" in text
    expected = _forward(network, {}, x)
    assert max_error(_interpret(tmp_path / "m", x), expected) <= TOL
    lifted, params = nnef_format.read_with_parameters(tmp_path / "m", metadata=False)
    assert max_error(_forward(lifted, params, x), expected) <= TOL
    assert max_error(_forward(lifted, params, x, "jax"), expected) <= TOL


def test_every_catalogue_layer_and_function_has_one_writer() -> None:
    """Each layer type and function has its NNEF writer registered (activation layers
    are written as their function)."""
    from petab_sciml.catalogue import FUNCTIONS
    from petab_sciml.catalogue import LAYERS as CATALOGUE_LAYERS
    from petab_sciml.formats.nnef_export import registry

    layers = {t for t, spec in CATALOGUE_LAYERS.items() if spec.function is None}
    assert layers <= set(registry.LAYERS.handlers)
    assert set(FUNCTIONS) <= set(registry.FUNCTIONS.handlers)

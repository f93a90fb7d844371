"""PyTorch backend: official suite cases, module structure, dtypes, modes, parameter I/O."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from petab_sciml import testcases
from petab_sciml.arrays import load_parameters, save_parameters
from petab_sciml.backends.torch import BACKEND
from petab_sciml.errors import ArrayFileError
from petab_sciml.formats import yaml as yaml_format
from tests.support.suite import ml_import_cases, requires_suite

CASES = ml_import_cases()

MLP = {
    "nn_model_id": "net",
    "inputs": [{"input_id": "x"}],
    "layers": [
        {"layer_id": "layer1", "layer_type": "Linear",
         "args": {"in_features": 2, "out_features": 5}},
        {"layer_id": "norm", "layer_type": "BatchNorm1d", "args": {"num_features": 5}},
        {"layer_id": "layer2", "layer_type": "Linear",
         "args": {"in_features": 5, "out_features": 1}},
    ],
    "forward": [
        {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {}},
        {"name": "layer1", "op": "call_module", "target": "layer1", "args": ["x"]},
        {"name": "norm", "op": "call_module", "target": "norm", "args": ["layer1"]},
        {"name": "tanh", "op": "call_function", "target": "torch.tanh", "args": ["norm"]},
        {"name": "layer2", "op": "call_module", "target": "layer2", "args": ["tanh"]},
        {"name": "output", "op": "output", "target": "output", "args": ["layer2"]},
    ],
}


class HandWritten(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer1 = torch.nn.Linear(2, 5)
        self.norm = torch.nn.BatchNorm1d(5)
        self.layer2 = torch.nn.Linear(5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(torch.tanh(self.norm(self.layer1(x))))


@requires_suite
def test_suite_has_46_ml_import_cases() -> None:
    assert len(CASES) == 46


@requires_suite
@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_official_ml_import_case(case: Path) -> None:
    result = testcases.run_case(testcases.load_case(case), "torch")
    assert result.error is None, result.error
    assert result.passed, f"max abs error {result.max_abs_error} > {result.tolerance}"


def _network():
    return yaml_format.network_from_dict(MLP)


def test_module_is_real_torch_layers_named_by_layer_id() -> None:
    module = BACKEND.build(_network())
    assert isinstance(module, torch.fx.GraphModule)
    assert isinstance(module.layer1, torch.nn.Linear)
    assert isinstance(module.norm, torch.nn.BatchNorm1d)
    assert list(module.state_dict()) == [
        "layer1.weight", "layer1.bias", "norm.weight", "norm.bias", "norm.running_mean",
        "norm.running_var", "norm.num_batches_tracked", "layer2.weight", "layer2.bias"]
    # the forward is generated Python code, not an interpreter over the IR
    assert "self.layer1(x)" in module.code


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-6), ("float64", 1e-13)])
@pytest.mark.parametrize("train", [True, False])
def test_matches_hand_written_module(dtype: str, tol: float, train: bool) -> None:
    torch_dtype = getattr(torch, dtype)
    reference = HandWritten().to(torch_dtype)
    with torch.no_grad():
        reference.norm.running_mean.uniform_(-1, 1)
        reference.norm.running_var.uniform_(0.5, 2)
    params = {}
    for key, value in reference.state_dict().items():
        group, _, array = key.partition(".")
        params.setdefault(group, {})[array] = value.numpy()
    model = BACKEND.set_parameters(BACKEND.build(_network(), dtype=dtype), params)
    x = np.random.default_rng(0).normal(size=(7, 2))
    reference.train(train)
    expected = reference(torch.as_tensor(x, dtype=torch_dtype)).detach().numpy()
    (got,) = BACKEND.forward(model, [x], train=train)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, expected, rtol=0, atol=tol)
    # training mode updates running statistics exactly as torch does
    after = BACKEND.get_parameters(model)["norm"]
    np.testing.assert_allclose(after["running_mean"], reference.norm.running_mean.numpy(),
                               atol=tol)


def test_gradients_match_torch_autograd() -> None:
    reference = HandWritten().double()
    params = {}
    for key, value in reference.state_dict().items():
        group, _, array = key.partition(".")
        params.setdefault(group, {})[array] = value.numpy()
    model = BACKEND.set_parameters(BACKEND.build(_network(), dtype="float64"), params)
    x = np.random.default_rng(1).normal(size=(4, 2))
    reference.train(True)
    reference(torch.as_tensor(x)).sum().backward()
    grads = BACKEND.gradients(model, [x], train=True)
    for key, param in reference.named_parameters():
        group, _, array = key.partition(".")
        np.testing.assert_allclose(grads[group][array], param.grad.numpy(), atol=1e-12)


def test_parameters_round_trip_through_array_file(tmp_path: Path) -> None:
    network = _network()
    model = BACKEND.build(network, seed=3)
    params = BACKEND.get_parameters(model)
    path = tmp_path / "ps.hdf5"
    save_parameters(path, network, params)
    loaded = load_parameters(path, network)
    other = BACKEND.set_parameters(BACKEND.build(network, seed=4), loaded)
    for group, arrays in BACKEND.get_parameters(other).items():
        for array, value in arrays.items():
            np.testing.assert_array_equal(value, params[group][array])


def test_build_seed_gives_pytorch_default_init_reproducibly() -> None:
    a = BACKEND.get_parameters(BACKEND.build(_network(), seed=0))
    b = BACKEND.get_parameters(BACKEND.build(_network(), seed=0))
    c = BACKEND.get_parameters(BACKEND.build(_network(), seed=1))
    np.testing.assert_array_equal(a["layer1"]["weight"], b["layer1"]["weight"])
    assert not np.array_equal(a["layer1"]["weight"], c["layer1"]["weight"])
    bound = 1 / np.sqrt(2)  # kaiming-uniform bound of Linear(2, 5)
    assert np.all(np.abs(a["layer1"]["weight"]) <= bound)


def test_set_parameters_rejects_wrong_shape() -> None:
    model = BACKEND.build(_network())
    params = BACKEND.get_parameters(model)
    params["layer1"]["weight"] = np.zeros((2, 5), dtype=np.float32)
    with pytest.raises(ArrayFileError, match=r"layer1.*weight|weight.*layer1"):
        BACKEND.set_parameters(model, params)


def test_multi_output_and_cat() -> None:
    net = yaml_format.network_from_dict({
        "nn_model_id": "two",
        "inputs": [{"input_id": "a"}, {"input_id": "b"}],
        "layers": [{"layer_id": "fc", "layer_type": "Linear",
                    "args": {"in_features": 5, "out_features": 2}}],
        "forward": [
            {"name": "a", "op": "placeholder", "target": "a"},
            {"name": "b", "op": "placeholder", "target": "b"},
            {"name": "cat", "op": "call_function", "target": "torch.cat",
             "args": [["a", "b"]], "kwargs": {"dim": 1}},
            {"name": "fc", "op": "call_module", "target": "fc", "args": ["cat"]},
            {"name": "first", "op": "call_function", "target": "operator.getitem",
             "args": ["fc", [{"slice": [None, None, None]}, 0]]},
            {"name": "scaled", "op": "call_function", "target": "operator.mul",
             "args": [2.0, "fc"]},
            {"name": "output", "op": "output", "target": "output",
             "args": [["first", "scaled"]]},
        ],
    })
    model = BACKEND.build(net, dtype="float64")
    params = BACKEND.get_parameters(model)
    a, b = np.ones((3, 2)), np.arange(9.0).reshape(3, 3)
    first, scaled = BACKEND.forward(model, [a, b])
    expected = np.concatenate([a, b], 1) @ params["fc"]["weight"].T + params["fc"]["bias"]
    np.testing.assert_allclose(scaled, 2 * expected, atol=1e-12)
    np.testing.assert_allclose(first, expected[:, 0], atol=1e-12)

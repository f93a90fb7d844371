"""torch.fx export (``petab_sciml.formats.torch_fx``) and the reference cases in test_cases/."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from petab_sciml.errors import NetworkError
from petab_sciml.formats import yaml as yaml_format
from petab_sciml.formats.torch_fx import (
    module_path_id,
    network_from_module,
    parameters_from_module,
)

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASE_DIR = ROOT / "test_cases"


def _load_generator():
    spec = importlib.util.spec_from_file_location("petab_sciml_case_generator",
                                                  CASE_DIR / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while decorating
    spec.loader.exec_module(module)
    return module


GEN = _load_generator()
CASES = GEN.CASES
FOLDERS = {case.name: GEN.case_folder(i, case) for i, case in enumerate(CASES, start=1)}

# Cases that show a known bug outside this file; strict, so a fix is noticed.
KNOWN_BACKEND_BUGS: dict[str, str] = {}


def _cases(known_bugs: dict[str, str] | None = None) -> list:
    out = []
    for case in CASES:
        marks = []
        if known_bugs and case.name in known_bugs:
            marks.append(pytest.mark.xfail(reason=known_bugs[case.name], strict=True))
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


def _export(case):
    module, inputs = GEN.build(case, 1)
    return module, inputs, network_from_module(module, GEN.NET_ID, input_ids=case.input_ids)


def _roundtrip(network):
    return yaml_format.network_from_dict(yaml.safe_load(yaml_format.dumps(network)))


def _outputs(result):
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


# ----------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("case", _cases())
def test_export_yaml_roundtrip(case):
    _, _, network = _export(case)
    assert _roundtrip(network) == network


@pytest.mark.parametrize("case", _cases())
def test_bundled_net_yaml_is_current(case):
    """test_cases/ holds what generate.py writes today (regenerate if this fails)."""
    _, _, network = _export(case)
    bundled = yaml_format.read(CASE_DIR / FOLDERS[case.name] / "net.yaml")
    assert yaml_format.network_to_dict(bundled) == yaml_format.network_to_dict(network)


def test_generator_covers_the_catalogue():
    from petab_sciml.catalogue import FUNCTIONS, LAYERS

    layers, functions = set(), set()
    for case in CASES:
        _, _, network = _export(case)
        layers |= {layer.type for layer in network.layers.values()}
        functions |= {n.function for n in network.nodes if n.function}
    assert set(LAYERS) - layers == set()
    assert set(FUNCTIONS) - functions == set()


# ----------------------------------------------------------------------------- backend
@pytest.mark.parametrize("case", _cases(KNOWN_BACKEND_BUGS))
def test_torch_backend_matches_original_module(case):
    from petab_sciml.backends.torch import BACKEND

    module, inputs, network = _export(case)
    network = _roundtrip(network)
    model = BACKEND.build(network, dtype="float32")
    model = BACKEND.set_parameters(model, parameters_from_module(module, network))
    arrays = [x.numpy() for x in inputs]
    modes = [False] if network.stochastic else [False, True]
    for train in modes:
        reference = copy.deepcopy(module).train(train)
        with torch.no_grad():
            expected = _outputs(reference(*inputs))
        got = BACKEND.forward(model, arrays, train=train)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e.numpy(), rtol=1e-6, atol=1e-6,
                                       err_msg=f"train={train}")


@pytest.mark.parametrize("case", _cases(KNOWN_BACKEND_BUGS))
def test_bundled_case_passes_on_torch_backend(case):
    from petab_sciml.testcases import load_case, run_case

    result = run_case(load_case(CASE_DIR / FOLDERS[case.name]), "torch")
    assert result.error is None, result.error
    assert result.passed, (result.max_abs_error, result.tolerance)


def test_bundled_case_layout():
    import h5py

    folders = sorted(p for p in CASE_DIR.iterdir() if p.is_dir() and p.name[:3].isdigit())
    assert [p.name for p in folders] == sorted(FOLDERS.values())
    for folder in folders:
        solutions = yaml.safe_load((folder / "solutions.yaml").read_text())
        assert solutions["net_file"] == "net.yaml"
        assert isinstance(solutions["tol"], float) and solutions["tol"] > 0
        files = [f for key, value in solutions.items() if key.startswith("net_")
                 and isinstance(value, list) for f in value]
        for name in files:
            with h5py.File(folder / name, "r") as h5:
                assert h5["metadata/pytorch_format"][()] == 1
    assert (CASE_DIR / "README.md").is_file()


# ----------------------------------------------------------------------------- export details
class _Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4))
        self.scale = nn.Parameter(torch.ones(4))
        self.register_buffer("shift", torch.zeros(4))

    def forward(self, x, flag=True):
        y = self.block(x) * self.scale + self.shift
        if flag:
            y = y + 1
        return y, y[:, 1:3]


def test_nested_paths_free_parameters_and_concrete_args():
    module = _Nested()
    network = network_from_module(module, "net", concrete_args={"flag": True})
    assert network.inputs == ("x",)
    assert list(network.layers) == ["block_0", "block_1", "block_2"]
    assert network.layers["block_1"].type == "ReLU"  # activation modules are layers
    assert network.layers["block_2"].args["bias"] is True  # BatchNorm bias = affine
    assert set(network.free_parameters) == {"params.scale", "params.shift"}
    assert network.free_parameters["params.shift"].trainable is False
    assert network.n_outputs == 2
    relu = network.node_map["block_1"]
    assert (relu.op, relu.target) == ("call_module", "block_1")
    params = parameters_from_module(module, network)
    assert set(params) == {"block_0", "block_2", "params"}
    assert set(params["block_2"]) == {"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}
    np.testing.assert_array_equal(params["block_0"]["weight"],
                                  module.block[0].weight.detach().numpy())


def test_layer_args_are_complete():
    module = nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, groups=2, bias=False),
                           nn.LayerNorm([4, 1, 1], bias=False))
    network = network_from_module(module, "net", input_ids=["input0"])
    conv = network.layers["layer_0"].args
    assert conv == {"in_channels": 2, "out_channels": 4, "kernel_size": [3, 3],
                    "stride": [2, 2], "padding": [0, 0], "dilation": [1, 1], "groups": 2,
                    "bias": False, "padding_mode": "zeros"}
    norm = network.layers["layer_1"].args
    assert norm == {"normalized_shape": [4, 1, 1], "eps": 1e-5, "elementwise_affine": True,
                    "bias": False}
    assert network.inputs == ("input0",)


def test_function_spellings_are_canonical():
    class M(nn.Module):
        def forward(self, x):
            y = F.logsigmoid(torch.swapaxes(x, 0, 1)).clamp(-1, 1) - abs(x)
            return torch.nn.functional.gelu(y).view(-1)

    network = network_from_module(M(), "net")
    calls = [(n.op, n.target, n.function) for n in network.nodes if n.function]
    assert calls == [
        ("call_function", "transpose", "transpose"),  # torch.swapaxes
        ("call_function", "logsigmoid", "logsigmoid"),  # builtin torch._C._nn.log_sigmoid
        ("call_method", "clamp", "clamp"),
        ("call_function", "abs", "abs"),  # builtins.abs -> operator.abs
        ("call_function", "sub", "sub"),  # operator.sub
        ("call_function", "gelu", "gelu"),
        ("call_method", "view", "reshape"),
    ]


def test_attribute_access_is_rejected():
    class M(nn.Module):
        def forward(self, x):
            return x.T

    with pytest.raises(NetworkError, match="getattr"):
        network_from_module(M(), "net")


def test_module_path_id():
    assert module_path_id("block.0") == "block_0"
    assert module_path_id("0") == "layer_0"
    assert module_path_id("a.b-c") == "a_b_c"


def test_import_does_not_import_torch():
    code = ("import sys, petab_sciml.formats.torch_fx; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ----------------------------------------------------------------------------- errors
def test_unsupported_layer_class():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Sequential(nn.Linear(3, 3), nn.RMSNorm(3))

        def forward(self, x):
            return self.emb(x)

    with pytest.raises(NetworkError,
                       match=r"submodule 'emb\.1'.*RMSNorm .*not a supported layer"):
        network_from_module(M(), "net")


def test_unsupported_function():
    class M(nn.Module):
        def forward(self, x):
            return torch.sgn(x) + 1

    with pytest.raises(NetworkError, match=r"node 'sgn'.*torch\.sgn.*not in the function "
                                           "catalogue"):
        network_from_module(M(), "net")


def test_unsupported_method():
    class M(nn.Module):
        def forward(self, x):
            return x.view(x.size(0), -1)

    with pytest.raises(NetworkError, match=r"node 'size'.*method 'size'"):
        network_from_module(M(), "net")


def test_untraceable_parameter_free_module_names_the_submodule():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Upsample(scale_factor=2)

        def forward(self, x):
            return self.up(x)

    with pytest.raises(NetworkError, match="'up'") as info:
        network_from_module(M(), "net")
    assert "Upsample" in str(info.value)


def test_data_dependent_control_flow():
    class M(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(NetworkError, match="cannot trace"):
        network_from_module(M(), "net")


def test_id_collision():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a_b = nn.Linear(2, 2)
            self.a = nn.Module()
            self.a.b = nn.Linear(2, 2)

        def forward(self, x):
            return self.a.b(self.a_b(x))

    with pytest.raises(NetworkError, match="both map to the id 'a_b'"):
        network_from_module(M(), "net")


def test_tensor_constant_is_rejected():
    class M(nn.Module):
        def forward(self, x):
            return x + torch.ones(3)

    with pytest.raises(NetworkError, match="tensor constant"):
        network_from_module(M(), "net")


def test_wrong_input_ids():
    with pytest.raises(NetworkError, match="input_ids"):
        network_from_module(nn.Sequential(nn.Linear(2, 2)), "net", input_ids=["a", "b"])


def test_single_layer_root():
    module = nn.Bilinear(2, 3, 4)
    network = network_from_module(module, "net")
    assert network.inputs == ("net_input1", "net_input2")
    assert list(network.layers) == ["layer1"]
    params = parameters_from_module(module, network)
    assert params["layer1"]["weight"].shape == (4, 2, 3)


def test_unsupported_layer_arguments_are_reported():
    with pytest.raises(NetworkError, match="return_indices"):
        network_from_module(nn.MaxPool1d(2, return_indices=True), "net")


def test_keyword_call_of_a_layer():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(input=x)

    with pytest.raises(NetworkError, match="keyword arguments"):
        network_from_module(M(), "net")


def test_parameters_from_module_unknown_layer():
    network = network_from_module(nn.Sequential(nn.Linear(2, 2)), "net")
    with pytest.raises(NetworkError, match="no submodule"):
        parameters_from_module(nn.Sequential(nn.Identity(), nn.Linear(2, 2)).get_submodule("0"),
                               network)

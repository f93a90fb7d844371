"""``format: pytorch`` (a Python file with a ``torch.nn.Module`` named as the network id),
and the three networks of the PEtab SciML discussion through every format.

The discussion networks (tanh MLP; Conv1d-relu-MaxPool1d-flatten-Linear; MLP with
Dropout(0.2)) are read from a Python file, then written to and read back from YAML, ONNX,
NNEF and TorchScript (scripted and traced), and every result runs in the torch and JAX
backends with PyTorch's outputs of the original module (eval mode) as the reference.
What each format keeps is checked against the table of ``docs/formats.md``.
"""

from __future__ import annotations

import copy
import json
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats import pytorch_file  # noqa: E402
from petab_sciml.formats.pytorch_file import UntrustedCodeError  # noqa: E402
from petab_sciml.plugins import get_backend, get_format  # noqa: E402

DISCUSSION = textwrap.dedent('''
    import torch
    from torch import nn


    class TanhMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer1 = nn.Linear(2, 5)
            self.layer2 = nn.Linear(5, 5)
            self.layer3 = nn.Linear(5, 1)

        def forward(self, net_input):
            x = torch.tanh(self.layer1(net_input))
            x = torch.tanh(self.layer2(x))
            return self.layer3(x)


    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 4, 3)
            self.pool = nn.MaxPool1d(2)
            self.flatten = nn.Flatten()
            self.linear = nn.Linear(16, 3)

        def forward(self, net_input):
            x = torch.relu(self.conv(net_input))
            return self.linear(self.flatten(self.pool(x)))


    class DropoutMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer1 = nn.Linear(3, 8)
            self.dropout = nn.Dropout(0.2)
            self.layer2 = nn.Linear(8, 2)

        def forward(self, net_input):
            return self.layer2(self.dropout(torch.relu(self.layer1(net_input))))
''')

INPUT_SHAPES = {"TanhMLP": (6, 2), "ConvNet": (5, 1, 10), "DropoutMLP": (4, 3)}

FORMAT_KEEPS = {
    # format: (keeps dropout, keeps the IR exactly)
    "yaml": (True, True),
    "onnx": (True, False),
    "nnef": (True, True),          # graph.nnef + petab_sciml.json written by us
    "nnef-graph": (False, False),  # the NNEF graph alone (other tools' files)
    "torchscript-script": (True, False),
    "torchscript-trace": (True, False),
    "pytorch": (True, True),
}
"""What each format keeps of the discussion networks (docs/formats.md, "What each format
keeps"); exact IR means identical YAML after the round trip."""


@pytest.fixture(scope="module")
def discussion_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pytorch_file") / "discussion.py"
    path.write_text(DISCUSSION)
    return path


def _original(path: Path, net_id: str) -> Any:
    module, _ = pytorch_file.load_module(path, net_id, trust_code=True)
    return module


def _run(network: Any, params: Any, inputs: list[np.ndarray], backend: str) -> Any:
    b = get_backend(backend)
    model = b.set_parameters(b.build(network), params)
    return b.forward(model, inputs, train=False)


def _via(fmt: str, network: Any, params: Any, module: Any, x: np.ndarray, folder: Path
         ) -> tuple[Any, Any]:
    """Write ``network`` (or the module) in ``fmt`` and read it back."""
    from petab_sciml.formats import nnef, onnx, torchscript
    from petab_sciml.formats import yaml as yaml_format

    if fmt == "yaml":
        yaml_format.write(network, folder / "net.yaml")
        return yaml_format.read(folder / "net.yaml"), params
    if fmt == "onnx":
        onnx.write(network, folder / "net.onnx", params=params,
                   input_shapes={network.inputs[0]: list(x.shape)})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read, read_params = onnx.read_with_parameters(folder / "net.onnx",
                                                          net_id=network.id)
        return read, read_params
    if fmt in ("nnef", "nnef-graph"):
        nnef.write(network, folder / "net.nnef", params=params, input_shapes=[list(x.shape)])
        return nnef.read_with_parameters(folder / "net.nnef", metadata=fmt == "nnef",
                                         net_id=network.id, input_ids=list(network.inputs))
    if fmt.startswith("torchscript"):
        kind = fmt.split("-")[1]
        m = copy.deepcopy(module).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            archive = torch.jit.script(m) if kind == "script" else torch.jit.trace(
                m, (torch.as_tensor(x),))
        torch.jit.save(archive, str(folder / f"net.{kind}.pt"))
        return torchscript.read_with_parameters(folder / f"net.{kind}.pt", trust_code=True,
                                                net_id=network.id,
                                                input_ids=list(network.inputs))
    raise AssertionError(fmt)


@pytest.mark.parametrize("net_id", list(INPUT_SHAPES))
def test_discussion_networks_through_every_format(discussion_file: Path, net_id: str,
                                                  tmp_path: Path) -> None:
    from petab_sciml.formats import yaml as yaml_format

    network, params = pytorch_file.read_with_parameters(discussion_file, trust_code=True,
                                                        net_id=net_id, input_ids=["input0"])
    module = _original(discussion_file, net_id)
    module.load_state_dict({f"{g}.{a}": torch.as_tensor(v) for g, arrays in params.items()
                            for a, v in arrays.items()})
    x = np.random.default_rng(1).standard_normal(INPUT_SHAPES[net_id]).astype(np.float32)
    with torch.no_grad():
        expected = module.eval()(torch.as_tensor(x)).numpy()
    reference_yaml = yaml_format.dumps(network)
    seen: dict[str, Any] = {}
    for fmt, (keeps_dropout, exact) in FORMAT_KEEPS.items():
        folder = tmp_path / fmt
        folder.mkdir()
        read, read_params = (network, params) if fmt == "pytorch" else _via(
            fmt, network, params, module, x, folder)
        key = yaml_format.dumps(read)
        for backend in ("torch", "jax"):
            memo = (backend, key, json.dumps({g: sorted(a) for g, a in read_params.items()}))
            if memo not in seen:
                seen[memo] = _run(read, read_params, [x], backend)[0]
            np.testing.assert_allclose(seen[memo], expected, atol=1e-5, rtol=1e-5,
                                       err_msg=f"{net_id} via {fmt} in {backend}")
        if net_id == "DropoutMLP":
            has_dropout = any(layer.type == "Dropout" for layer in read.layers.values())
            assert has_dropout == keeps_dropout, f"{fmt}: dropout kept = {has_dropout}"
        if exact:
            assert key == reference_yaml, f"{fmt} changed the IR"


def test_discussion_table_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text()
    assert "What each format keeps" in doc
    for fmt in ("YAML", "ONNX", "NNEF", "TorchScript", "PyTorch file"):
        assert fmt in doc


# ----------------------------------------------------------------------------- reading
def test_reads_the_class_named_as_the_network_id(discussion_file: Path) -> None:
    network = get_format("pytorch").read(discussion_file, trust_code=True, net_id="ConvNet")
    assert network.id == "ConvNet"
    assert [layer.type for layer in network.layers.values()] == [
        "Conv1d", "MaxPool1d", "Flatten", "Linear"]


def test_initial_parameters_are_reproducible_and_leave_the_rng_alone(
        discussion_file: Path) -> None:
    state = torch.random.get_rng_state()
    _, a = pytorch_file.read_with_parameters(discussion_file, trust_code=True,
                                             net_id="TanhMLP")
    _, b = pytorch_file.read_with_parameters(discussion_file, trust_code=True,
                                             net_id="TanhMLP")
    assert torch.equal(state, torch.random.get_rng_state())
    np.testing.assert_array_equal(a["layer1"]["weight"], b["layer1"]["weight"])


def test_refuses_without_trust_and_says_how(discussion_file: Path) -> None:
    with pytest.raises(UntrustedCodeError) as info:
        get_format("pytorch").read(discussion_file, net_id="TanhMLP")
    message = str(info.value)
    assert str(discussion_file) in message and "runs code" in message
    assert "trust_code=True" in message and "--trust-code" in message
    assert get_format("pytorch").runs_code


def test_several_classes_need_the_network_id(discussion_file: Path) -> None:
    with pytest.raises(NetworkError, match="pass the network id"):
        pytorch_file.read(discussion_file, trust_code=True)


def test_missing_class_and_constructor_arguments(tmp_path: Path) -> None:
    path = tmp_path / "net.py"
    path.write_text("from torch import nn\n\nclass net0(nn.Module):\n"
                    "    def __init__(self, width):\n        super().__init__()\n")
    with pytest.raises(NetworkError, match="no torch.nn.Module subclass named 'other'"):
        pytorch_file.read(path, trust_code=True, net_id="other")
    with pytest.raises(NetworkError, match="constructible without arguments"):
        pytorch_file.read(path, trust_code=True, net_id="net0")


def test_import_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("raise ValueError('boom')\n")
    with pytest.raises(NetworkError) as info:
        pytorch_file.read(path, trust_code=True)
    assert str(path) in str(info.value) and "boom" in str(info.value)
    assert not [m for m in sys.modules if m.startswith("_petab_sciml_network_broken")]

"""The trust gate: formats whose loading runs code never run it without trust.

The network of a PEtab problem is a Python file, or a TorchScript archive, that writes a
marker file when executed.  Validating the problem (API and command line), reading the
network through the format registry and converting it leave no marker unless trust was
given; with trust, the Python file does run (so the marker test can see execution).
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from petab_sciml.formats.pytorch_file import UntrustedCodeError
from petab_sciml.plugins import format_for_path, get_format
from tests.support.suite import SUITE

REPO = Path(__file__).resolve().parents[2]
PROBLEM = (SUITE or REPO / "missing") / "test_cases" / "sciml_problem_import" / "001" / "petab"
needs_suite_problem = pytest.mark.skipif(
    not PROBLEM.is_dir(), reason="official PEtab SciML suite not found: set "
    "PETAB_SCIML_TESTSUITE or place it at ../shared/petab_sciml_testsuite")
CLI = [sys.executable, "-c", "from petab_sciml.cli import main; main()"]


def cli_has(command: str) -> bool:
    from petab_sciml.cli import main

    return command in getattr(main, "commands", {})


def python_network(marker: Path) -> str:
    return (
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('imported')\n"
        "import torch\n"
        "from torch import nn\n\n"
        "class net1(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        f"        Path({str(marker)!r}).write_text('constructed')\n"
        "        self.layer1 = nn.Linear(2, 5)\n"
        "        self.layer2 = nn.Linear(5, 2)\n\n"
        "    def forward(self, x):\n"
        "        return self.layer2(torch.tanh(self.layer1(x)))\n"
    )


class _Payload:
    """Pickles to a call that writes ``marker`` when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('unpickled')",))


def torchscript_archive(path: Path, marker: Path) -> None:
    """A TorchScript archive whose ``data.pkl`` runs code when unpickled."""
    torch = pytest.importorskip("torch")

    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), buffer)
    payload = pickle.dumps(_Payload(marker), protocol=2)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, zipfile.ZipFile(
            path, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("/data.pkl"):
                data = payload
            dst.writestr(item, data)


def problem_with(tmp_path: Path, network_file: Path, fmt: str) -> Path:
    folder = tmp_path / "problem"
    shutil.copytree(PROBLEM, folder)
    shutil.copy(network_file, folder / network_file.name)
    problem = folder / "problem.yaml"
    data = yaml.safe_load(problem.read_text())
    data["extensions"]["sciml"]["neural_networks"]["net1"].update(
        {"location": network_file.name, "format": fmt})
    problem.write_text(yaml.safe_dump(data))
    return problem


@pytest.fixture(params=["pytorch", "torchscript"])
def code_network(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, Path]:
    marker = tmp_path / "marker.txt"
    if request.param == "pytorch":
        path = tmp_path / "net1.py"
        path.write_text(python_network(marker))
    else:
        path = tmp_path / "net1.pt"
        torchscript_archive(path, marker)
    return request.param, path, marker


def test_the_payloads_do_run_code(tmp_path: Path) -> None:
    """Sanity: the marker files appear when the payloads are executed."""
    marker = tmp_path / "proof.txt"
    path = tmp_path / "proof.pt"
    torchscript_archive(path, marker)
    with zipfile.ZipFile(path) as archive:
        data = next(archive.read(n) for n in archive.namelist() if n.endswith("/data.pkl"))
    pickle.loads(data)  # what a naive loader would do
    assert marker.read_text() == "unpickled"


def test_reading_refuses_without_trust(code_network: tuple[str, Path, Path]) -> None:
    fmt, path, marker = code_network
    plugin = get_format(fmt)
    assert plugin.runs_code and format_for_path(path) is plugin
    with pytest.raises(UntrustedCodeError) as info:
        plugin.read(path)
    assert not marker.exists()
    message = str(info.value)
    assert str(path) in message and "runs code" in message
    assert "trust_code=True" in message and "--trust-code" in message


def test_python_file_runs_only_with_trust(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    marker = tmp_path / "marker.txt"
    path = tmp_path / "net1.py"
    path.write_text(python_network(marker))
    network = get_format("pytorch").read(path, trust_code=True, net_id="net1")
    assert marker.read_text() == "constructed"
    assert [layer.type for layer in network.layers.values()] == ["Linear", "Linear"]


@needs_suite_problem
def test_validating_a_problem_runs_no_code(code_network: tuple[str, Path, Path],
                                           tmp_path: Path) -> None:
    from petab_sciml.problem.validate import validate_problem

    fmt, path, marker = code_network
    problem = problem_with(tmp_path, path, fmt)
    report = validate_problem(problem)
    assert not marker.exists()
    assert any(issue.code == "NN_CODE_NOT_RUN" for issue in report.issues)
    result = subprocess.run([*CLI, "validate", str(problem)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300)
    assert not marker.exists(), result.stdout + result.stderr
    assert "trust" in (result.stdout + result.stderr).lower()


def test_converting_refuses_without_trust(code_network: tuple[str, Path, Path],
                                          tmp_path: Path) -> None:
    convert = pytest.importorskip("petab_sciml.convert")
    fmt, path, marker = code_network
    with pytest.raises(UntrustedCodeError):
        convert.convert(path, tmp_path / "out.yaml", src_format=fmt)
    assert not marker.exists()
    if not cli_has("convert"):
        pytest.skip("the convert command is not registered on the CLI yet")
    result = subprocess.run([*CLI, "convert", str(path), str(tmp_path / "out.yaml")],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode != 0 and not marker.exists()
    assert "--trust-code" in result.stdout + result.stderr


@pytest.mark.slow
def test_converting_a_python_file_with_trust(tmp_path: Path) -> None:
    convert = pytest.importorskip("petab_sciml.convert")
    pytest.importorskip("torch")
    if not cli_has("convert"):
        pytest.skip("the convert command is not registered on the CLI yet")
    marker = tmp_path / "marker.txt"
    path = tmp_path / "net1.py"
    path.write_text(python_network(marker))
    result = subprocess.run([*CLI, "convert", str(path), str(tmp_path / "out.yaml"),
                             "--trust-code"], capture_output=True, text=True, cwd=tmp_path,
                            timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert marker.exists() and (tmp_path / "out.yaml").is_file()
    del convert


@needs_suite_problem
def test_validating_with_trust_loads_the_python_network(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from petab_sciml.problem.validate import validate_problem

    marker = tmp_path / "marker.txt"
    path = tmp_path / "net1.py"
    path.write_text(python_network(marker))
    report = validate_problem(problem_with(tmp_path, path, "pytorch"), trust_code=True)
    assert marker.exists()
    assert "net1" in report.context.networks

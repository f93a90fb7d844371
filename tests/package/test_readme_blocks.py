"""Every code block of README.md runs as written.

Convention (also stated in README.md, "Python"):

* each ```python block runs in its own namespace, in a scratch folder that holds the
  files the README names: ``problem.yaml`` and its tables (the bundled example,
  ``examples/lotka_volterra_ude``), ``net.yaml`` and ``net_ps.hdf5`` (the network of
  ``test_cases/001_linear`` and its first parameter file), ``model.onnx`` and ``net.onnx``
  (that network in ONNX, with its weights);
* a block preceded by the comment ``<!-- readme-test: cwd=FOLDER -->`` (FOLDER relative
  to the repository) runs in a copy of FOLDER instead;
* in ```bash blocks, every line that starts with ``petab-sciml`` runs in the same scratch
  folder and must exit 0; a synopsis line (one with ``[optional]`` parts) is checked
  instead: ``--help`` of its command works and lists every ``--option`` the line names.

New blocks are picked up without changing this file.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from petab_sciml.cli import main

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
_BLOCK = re.compile(r"(?:<!--\s*readme-test:\s*(?P<marker>[^>]*?)\s*-->\s*\n)?"
                    r"^```(?P<lang>[a-z]*)\n(?P<code>.*?)^```", re.S | re.M)


def readme_blocks() -> list[tuple[str, str, str, int]]:
    """(language, code, marker, line) of every fenced block in README.md."""
    text = README.read_text(encoding="utf-8")
    return [(m["lang"], m["code"], m["marker"] or "", text.count("\n", 0, m.start("code")) + 1)
            for m in _BLOCK.finditer(text)]


def python_blocks():
    return [pytest.param(code, marker, id=f"line{line}")
            for lang, code, marker, line in readme_blocks() if lang == "python"]


def cli_lines():
    out = []
    for lang, code, _, line in readme_blocks():
        if lang not in ("bash", "sh", "console"):
            continue
        for k, text in enumerate(code.splitlines()):
            command = text.split(" #", 1)[0].strip()
            if command.startswith("petab-sciml "):
                out.append(pytest.param(command, id=f"line{line + k}"))
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """The folder README blocks run in (see the module docstring)."""
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "examples" / "lotka_volterra_ude", folder, dirs_exist_ok=True)
    case = REPO / "test_cases" / "001_linear"
    shutil.copy(case / "net.yaml", folder / "net.yaml")
    shutil.copy(case / "net_ps_1.hdf5", folder / "net_ps.hdf5")
    pytest.importorskip("onnx")
    from petab_sciml.convert import convert

    for name in ("model.onnx", "net.onnx"):
        convert(folder / "net.yaml", folder / name, params_in=folder / "net_ps.hdf5")
    return folder


def _folder_for(marker: str, scratch: Path, tmp_path: Path) -> Path:
    if not marker:
        return scratch
    key, _, value = marker.partition("=")
    assert key.strip() == "cwd" and value.strip(), f"unknown readme-test marker {marker!r}"
    target = tmp_path / "cwd"
    shutil.copytree(REPO / value.strip(), target)
    return target


def test_readme_has_python_and_cli_blocks():
    assert len(python_blocks()) >= 3
    assert len(cli_lines()) >= 5


@pytest.mark.parametrize(("code", "marker"), python_blocks())
@pytest.mark.slow
def test_python_block_runs(code, marker, scratch, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    monkeypatch.chdir(_folder_for(marker, scratch, tmp_path))
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("command", cli_lines())
def test_cli_line_runs(command, scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    runner = CliRunner()
    words = shlex.split(command)[1:]
    if "[" not in command:
        result = runner.invoke(main, words, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return
    # a synopsis: the command's --help works and knows every option the line names
    sub, group = [], main
    for word in words:
        if not isinstance(group, click.Group) or word not in group.commands:
            break
        sub.append(word)
        group = group.commands[word]
    result = runner.invoke(main, [*sub, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for option in re.findall(r"--[a-z][a-z-]*", command):
        assert option in result.output, f"{command}: {option} is not an option of {sub}"


def test_cwd_marker_runs_a_block_in_a_copy_of_a_folder(tmp_path):
    text = ("Text\n<!-- readme-test: cwd=examples/lotka_volterra_ude -->\n```python\n"
            "x = 1\n```\n\n```python\ny = 2\n```\n")
    first, second = _BLOCK.finditer(text)
    assert (first["marker"], first["code"]) == ("cwd=examples/lotka_volterra_ude", "x = 1\n")
    assert (second["marker"], second["code"]) == (None, "y = 2\n")
    folder = _folder_for(first["marker"], tmp_path / "scratch", tmp_path)
    assert (folder / "problem.yaml").is_file() and folder != REPO / "examples"

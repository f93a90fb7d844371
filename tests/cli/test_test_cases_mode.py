"""``petab-sciml test-cases run --mode eval|train``: the mode of network cases whose
solutions.yaml names none; a case's own ``mode`` still wins.

BatchNorm1d differs between the modes (batch statistics in train, running statistics in
eval); the eval-mode references are written here by PyTorch itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from petab_sciml.cli import main
from tests.support.suite import REPO

torch = pytest.importorskip("torch")

CASE = REPO / "test_cases" / "033_batchnorm1d"   # train-mode references, no mode key


def _eval_case(dest: Path, mode: str | None) -> Path:
    """Case 033 with references from PyTorch in eval mode (and ``mode`` if given)."""
    shutil.copytree(CASE, dest)
    for i in (1, 2, 3):
        layer = torch.nn.BatchNorm1d(3, eps=1e-3, momentum=0.2).double().eval()
        with h5py.File(dest / f"net_ps_{i}.hdf5") as h5:
            group = h5["parameters/net0/layer1"]
            layer.weight.data = torch.tensor(group["weight"][()], dtype=torch.float64)
            layer.bias.data = torch.tensor(group["bias"][()], dtype=torch.float64)
        with h5py.File(dest / f"net_input_{i}.hdf5") as h5:
            x = torch.tensor(h5["inputs/input0/data"][()], dtype=torch.float64)
        with torch.no_grad():
            y = layer(x).numpy()
        assert not np.allclose(y, layer.train()(x).detach().numpy(), atol=1e-2)
        with h5py.File(dest / f"net_output_{i}.hdf5", "r+") as h5:
            h5["outputs/output0/data"][...] = y
    if mode is not None:
        solutions = dest / "solutions.yaml"
        solutions.write_text(solutions.read_text() + f"mode: {mode}\n")
    return dest


def _run(*args: str) -> tuple[int, dict[str, bool]]:
    result = CliRunner().invoke(main, ["test-cases", "run", *args, "--backend", "all",
                                       "--json"])
    data = json.loads(result.output)
    verdicts: dict[str, bool] = {}
    for r in data["results"]:
        verdicts[r["case"]] = verdicts.get(r["case"], True) and r["passed"]
    return result.exit_code, verdicts


def test_mode_option_sets_the_mode_of_cases_without_one(tmp_path):
    pytest.importorskip("jax")
    case = _eval_case(tmp_path / "eval_refs", None)
    code, verdicts = _run(str(case))
    assert code == 1 and verdicts == {f"{tmp_path.name}/eval_refs": False}   # train: wrong
    code, verdicts = _run(str(case), "--mode", "eval")
    assert code == 0 and verdicts == {f"{tmp_path.name}/eval_refs": True}
    code, verdicts = _run(str(CASE), "--mode", "eval")     # train references, eval run
    assert code == 1 and not any(verdicts.values())


def test_a_case_mode_wins_over_the_option(tmp_path):
    pytest.importorskip("jax")
    marked = _eval_case(tmp_path / "eval_marked", "eval")
    code, verdicts = _run(str(marked), "--mode", "train")
    assert code == 0 and all(verdicts.values())
    train_marked = tmp_path / "train_marked"
    shutil.copytree(CASE, train_marked)
    solutions = train_marked / "solutions.yaml"
    solutions.write_text(solutions.read_text() + "mode: train\n")
    code, verdicts = _run(str(train_marked), "--mode", "eval")
    assert code == 0 and all(verdicts.values())


def test_mode_must_be_train_or_eval():
    result = CliRunner().invoke(main, ["test-cases", "run", str(CASE), "--mode", "test"])
    assert result.exit_code == 2 and "'test' is not one of 'train', 'eval'" in result.output

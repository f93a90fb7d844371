"""Hostile fit folders: ``fit --resume`` on a crafted, damaged or foreign checkpoint, and
``FitResult.load`` on a crafted ``results.h5``.

Each case is refused with an error that names the file and what is wrong and says how
to start over (``--force``), and nothing runs: the marker file that a pickle bomb would
create does not appear, and no file of the fit folder changes.  One fit per backend
(one start, one step, in this process) is shared by the module; each case works on a
copy of it.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from petab_sciml.errors import PetabSciMLError
from petab_sciml.fit import fit
from petab_sciml.fit.artifacts import ArtifactError
from petab_sciml.fit.results import FitResult
from tests.support.hostile import edit, make_problem
from tests.support.measure import changed, snapshot
from tests.support.suite import REPO

SETTINGS = dict(starts=1, steps=1, in_process=True, plots=False, progress=False)


class Bomb:
    """Unpickling it runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def problem(tmp_path_factory) -> Path:
    return make_problem(tmp_path_factory.mktemp("security"))


def settings(backend: str, **changes) -> dict:
    """:data:`SETTINGS` for ``backend``: torch with eager solves (one step does not
    repay compiling; a resume must ask for the same options)."""
    return {**SETTINGS, **({"compile": False} if backend == "torch" else {}), **changes}


def _fit_folder(tmp_path_factory, problem: Path, backend: str) -> Path:
    out = tmp_path_factory.mktemp(f"fit_{backend}") / "fit"
    fit(problem, backend=backend, out=out, **settings(backend))
    return out


@pytest.fixture(scope="module")
def torch_fit(tmp_path_factory, problem) -> Path:
    pytest.importorskip("torch")
    return _fit_folder(tmp_path_factory, problem, "torch")


@pytest.fixture(scope="module")
def jax_fit(tmp_path_factory, problem) -> Path:
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    return _fit_folder(tmp_path_factory, problem, "jax")


def _copy(folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / "fit"
    shutil.copytree(folder, out, symlinks=True)
    return out


def _refused(problem: Path, out: Path, backend: str, *words: str) -> str:
    """Resume in this process: refused with every word in the message, nothing in the
    fit folder changed, and no marker beside it."""
    before = snapshot(out)
    with pytest.raises(ArtifactError) as caught:
        fit(problem, backend=backend, out=out, resume=True, **settings(backend))
    message = str(caught.value)
    for word in ("--force", *words):
        assert word in message, message
    assert "internal error" not in message
    assert changed(before, snapshot(out), []) == []
    assert not (out.parent / "MARKER").exists(), "the checkpoint ran code"
    return message


# --------------------------------------------------------------------------- PyTorch
def _torch_checkpoint(out: Path) -> tuple[Path, dict]:
    import torch

    path = out / "checkpoints" / "start_0000.pt"
    return path, torch.load(path, weights_only=True)


def _torch_save(path: Path, data) -> None:
    import torch

    torch.save(data, path)


@pytest.mark.slow
def test_torch_resume_of_an_untouched_checkpoint_works(problem, torch_fit, tmp_path):
    out = _copy(torch_fit, tmp_path)
    result = fit(problem, backend="torch", out=out, resume=True,
                 **settings("torch", steps=2))
    assert result.best.steps == 2


@pytest.mark.parametrize("where", ["whole", "module", "optimizer", "trace"])
def test_torch_pickle_bomb_is_refused_unrun(problem, torch_fit, tmp_path, where):
    out = _copy(torch_fit, tmp_path)
    path, data = _torch_checkpoint(out)
    bomb = Bomb(out.parent / "MARKER")
    if where == "whole":
        data = bomb
    elif where == "module":
        data["module"][next(iter(data["module"]))] = bomb
    elif where == "optimizer":
        data["optimizer"]["state"][0]["exp_avg"] = bomb
    else:
        data["trace"] = [bomb]
    _torch_save(path, data)
    _refused(problem, out, "torch", str(path), "system")


@pytest.fixture(scope="module")
def torch_fit_as_the_cli_runs_it(tmp_path_factory, problem) -> Path:
    """A torch fit folder with the CLI's options (none: compiled solves)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("fit_torch_cli") / "fit"
    fit(problem, backend="torch", out=out, **SETTINGS)
    return out


@pytest.mark.slow
def test_torch_cli_resume_on_a_bomb_exits_1_unrun(problem, torch_fit_as_the_cli_runs_it,
                                                  tmp_path):
    out = _copy(torch_fit_as_the_cli_runs_it, tmp_path)
    path, _ = _torch_checkpoint(out)
    _torch_save(path, Bomb(tmp_path / "MARKER"))
    before = snapshot(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"}
    env.pop("PETAB_SCIML_DEBUG", None)
    run = subprocess.run([sys.executable, "-m", "petab_sciml.cli", "fit", str(problem),
                          "--backend", "torch", "--starts", "1", "--steps", "1",
                          "--in-process", "--no-plots", "--out", str(out), "--resume"],
                         capture_output=True, text=True, env=env, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "Traceback" not in output and "internal error" not in output
    assert "start_0000.pt" in output and "--force" in output and "posix.system" in output
    assert not (tmp_path / "MARKER").exists()
    assert changed(before, snapshot(tmp_path), []) == []


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _module_tensor(data: dict, change) -> dict:
    key = next(k for k, v in data["module"].items() if v.numel() > 1)
    data["module"][key] = change(data["module"][key])
    return data


@pytest.mark.parametrize("damage, words", [
    ("truncated", ["not a", "zip"]),
    ("empty", ["not a"]),
    ("dtype", ["dtype torch.float32", "module."]),
    ("shape", ["shape", "module."]),
    ("missing_entry", ["expected the entries"]),
    ("trace_length", ["loss values"]),
    ("optimizer_state_shape", ["optimizer.state.0"]),
    ("other_optimizer", ["optimizer settings"]),
    ("other_start", ["holds start 7"]),
    ("other_settings", ["other settings", "lr"]),
    ("no_identity", ["no identity record"]),
    ("compressed", ["compressed"]),
    ("tensor_in_settings", ["is not a checkpoint of this model"]),
])
def test_torch_damaged_or_foreign_checkpoint_is_refused(problem, torch_fit, tmp_path,
                                                        damage, words):
    import torch

    out = _copy(torch_fit, tmp_path)
    path, data = _torch_checkpoint(out)
    if damage == "truncated":
        _truncate(path)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "compressed":
        raw = path.read_bytes()
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as new, \
                zipfile.ZipFile(io.BytesIO(raw)) as old:
            for info in old.infolist():
                new.writestr(info.filename, old.read(info))
    else:
        if damage == "dtype":
            _module_tensor(data, lambda t: t.to(torch.float32))
        elif damage == "shape":
            _module_tensor(data, lambda t: torch.cat([t.reshape(-1), t.reshape(-1)]))
        elif damage == "missing_entry":
            del data["previous"]
        elif damage == "trace_length":
            data["trace"] = data["trace"] * 3
        elif damage == "optimizer_state_shape":
            data["optimizer"]["state"][0]["exp_avg"] = torch.zeros(1000)
        elif damage == "other_optimizer":
            data["optimizer"]["param_groups"][0]["betas"] = (0.5, 0.5)
        elif damage == "other_start":
            data["identity"]["start"] = 7
        elif damage == "other_settings":
            data["identity"]["lr"] = 0.5
        elif damage == "no_identity":
            data["identity"] = {}
        elif damage == "tensor_in_settings":
            data["optimizer"]["param_groups"][0]["lr"] = torch.ones(3)
        _torch_save(path, data)
    _refused(problem, out, "torch", str(path), *words)


def test_torch_checkpoint_of_another_problem_is_refused(problem, torch_fit, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(problem.parent, other)
    edit(other / "measurements.tsv", "prey_obs\texp1\t0.5\t1", "prey_obs\texp1\t0.7\t1")
    out = _copy(torch_fit, tmp_path)
    _refused(other / "problem.yaml", out, "torch", "start_0000.pt", "another problem")


# --------------------------------------------------------------------------- JAX
def _npz(out: Path) -> tuple[Path, dict[str, np.ndarray]]:
    path = out / "checkpoints" / "start_0000.npz"
    with np.load(path) as z:
        return path, {k: z[k] for k in z.files}


@pytest.mark.slow
def test_jax_resume_of_an_untouched_checkpoint_works(problem, jax_fit, tmp_path):
    out = _copy(jax_fit, tmp_path)
    result = fit(problem, backend="jax", out=out, resume=True, **{**SETTINGS, "steps": 2})
    assert result.best.steps == 2


@pytest.mark.slow
@pytest.mark.parametrize("damage, words", [
    ("pickle", ["m0", "Python objects", "nothing unpickled"]),
    ("pickle_trace", ["trace", "Python objects"]),
    ("compressed", ["compressed"]),
    ("truncated", ["not an .npz", "zip"]),
    ("dtype", ["m0", "dtype float32"]),
    ("shape", ["m0", "shape"]),
    ("extra_array", ["unknown: ['x']"]),
    ("other_start", ["holds start 3"]),
    ("other_settings", ["other settings", "optimizer"]),
    ("no_identity", ["missing: ['identity']"]),
    ("trace_length", ["loss values"]),
    ("huge_header", ["truncated?"]),
])
def test_jax_damaged_or_foreign_checkpoint_is_refused(problem, jax_fit, tmp_path, damage,
                                                      words):
    out = _copy(jax_fit, tmp_path)
    path, arrays = _npz(out)
    identity = json.loads(str(arrays["identity"]))
    if damage == "truncated":
        _truncate(path)
    elif damage == "huge_header":
        # a stored member whose header claims 10^12 float64 values: refused from the
        # header, nothing allocated
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {
            "descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
        with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as z:
            z.writestr("big.npy", header.getvalue())
    else:
        if damage == "pickle":
            arrays["m0"] = np.array([Bomb(out.parent / "MARKER")], dtype=object)
        elif damage == "pickle_trace":
            arrays["trace"] = np.array([Bomb(out.parent / "MARKER")], dtype=object)
        elif damage == "dtype":
            arrays["m0"] = arrays["m0"].astype(np.float32)
        elif damage == "shape":
            arrays["m0"] = np.zeros(arrays["m0"].size + 5)
        elif damage == "extra_array":
            arrays["x"] = np.zeros(3)
        elif damage == "other_start":
            arrays["identity"] = np.asarray(json.dumps({**identity, "start": 3}))
        elif damage == "other_settings":
            arrays["identity"] = np.asarray(json.dumps({**identity, "optimizer": "sgd"}))
        elif damage == "no_identity":
            del arrays["identity"]
        elif damage == "trace_length":
            arrays["trace"] = np.zeros(5)
        save = np.savez_compressed if damage == "compressed" else np.savez
        save(path, **arrays)
    _refused(problem, out, "jax", str(path), *words)


def test_jax_checkpoint_of_another_problem_is_refused(problem, jax_fit, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(problem.parent, other)
    edit(other / "measurements.tsv", "prey_obs\texp1\t0.5\t1", "prey_obs\texp1\t0.7\t1")
    out = _copy(jax_fit, tmp_path)
    _refused(other / "problem.yaml", out, "jax", "start_0000.npz", "another problem")


# --------------------------------------------------------------------------- the folder
@pytest.mark.parametrize("damage, words", [
    ("fit_json_not_json", ["fit.json", "not valid JSON"]),
    ("fit_json_list", ["fit.json", "JSON object"]),
    ("fit_json_fifo", ["fit.json", "FIFO"]),
    ("checkpoint_symlink", ["start_0000.npz", "symbolic link"]),
    ("checkpoints_symlink", ["checkpoints", "symbolic link"]),
    ("results_symlink", ["results.h5", "symbolic link"]),
])
def test_fit_folder_links_and_damaged_settings_are_refused(problem, jax_fit, tmp_path,
                                                           damage, words):
    out = _copy(jax_fit, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if damage == "fit_json_not_json":
        (out / "fit.json").write_text('{"backend": "jax",')
    elif damage == "fit_json_list":
        (out / "fit.json").write_text("[1, 2]")
    elif damage == "fit_json_fifo":
        (out / "fit.json").unlink()
        os.mkfifo(out / "fit.json")
    elif damage == "checkpoint_symlink":
        checkpoint = out / "checkpoints" / "start_0000.npz"
        shutil.move(checkpoint, elsewhere / checkpoint.name)
        checkpoint.symlink_to(elsewhere / checkpoint.name)
    elif damage in ("checkpoints_symlink", "results_symlink"):
        name = "checkpoints" if damage == "checkpoints_symlink" else "results.h5"
        shutil.move(out / name, elsewhere / name)
        (out / name).symlink_to(elsewhere / name)
    before = snapshot(elsewhere)
    _refused(problem, out, "jax", *words)
    assert changed(before, snapshot(elsewhere), []) == []


@pytest.mark.slow
def test_force_replaces_a_linked_entry_without_writing_through_it(problem, jax_fit,
                                                                  tmp_path):
    out = _copy(jax_fit, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(out / "checkpoints", elsewhere)
    (out / "checkpoints").symlink_to(elsewhere)
    before = snapshot(elsewhere)
    fit(problem, backend="jax", out=out, force=True, **SETTINGS)
    assert (out / "checkpoints").is_dir() and not (out / "checkpoints").is_symlink()
    assert changed(before, snapshot(elsewhere), []) == []


# --------------------------------------------------------------------------- results.h5
@pytest.mark.parametrize("damage, words", [
    ("external_link", ["starts/0/w", "external link"]),
    ("soft_link", ["starts/0/w", "soft link"]),
    ("huge_dataset", ["starts/0/trace", "max_array_elements"]),
    ("external_storage", ["starts/0/trace", "other files"]),
    ("virtual", ["starts/0/trace", "other files"]),
    ("pickled_object", ["starts/0/mech", "dtype"]),
    ("huge_attribute", ["@parameter_ids", "max_array_elements"]),
    ("not_hdf5", ["not an HDF5 file"]),
    ("many_starts", ["starts", "max_array_entries"]),
])
def test_results_file_is_read_as_untrusted_input(torch_fit, tmp_path, damage, words):
    from petab_sciml.limits import use_limits

    path = _copy(torch_fit, tmp_path) / "results.h5"
    secret = tmp_path / "secret.h5"
    with h5py.File(secret, "w") as h5:
        h5["data"] = np.arange(5.0)
    budget = {}
    if damage == "not_hdf5":
        path.write_bytes(b"PK\x03\x04 not hdf5")
    else:
        with h5py.File(path, "a") as h5:
            start = h5["starts/0"]
            if damage == "external_link":
                del start["w"]
                start["w"] = h5py.ExternalLink(str(secret), "/data")
            elif damage == "soft_link":
                del start["w"]
                start["w"] = h5py.SoftLink("/starts/0/trace")
            elif damage == "huge_dataset":
                del start["trace"]
                start.create_dataset("trace", shape=(10**6, 10**6), dtype="f8",
                                     chunks=(1, 1000))
            elif damage == "external_storage":
                del start["trace"]
                start.create_dataset("trace", shape=(5,), dtype="f8",
                                     external=[(str(secret), 0, 40)])
            elif damage == "virtual":
                del start["trace"]
                layout = h5py.VirtualLayout(shape=(5,), dtype="f8")
                layout[:] = h5py.VirtualSource(str(secret), "data", shape=(5,))
                start.create_virtual_dataset("trace", layout)
            elif damage == "pickled_object":
                del start["mech"]
                start["mech"] = np.void(pickle.dumps(Bomb(tmp_path / "MARKER")))
            elif damage == "huge_attribute":
                h5.attrs["parameter_ids"] = np.zeros(2000, np.int8)
                budget = {"max_array_elements": 1000}
            elif damage == "many_starts":
                for k in range(1, 30):
                    h5.copy(h5["starts/0"], h5["starts"], name=str(k))
                budget = {"max_array_entries": 20}
    # a budget exceeded is the budget's own error (it says how to raise the budget)
    with use_limits(**budget), pytest.raises(PetabSciMLError) as caught:
        FitResult.load(path)
    message = str(caught.value)
    assert str(path) in message, message
    for word in words:
        assert word in message, message
    assert not (tmp_path / "MARKER").exists()


def test_an_untouched_results_file_reads_back(torch_fit, problem):
    result = FitResult.load(torch_fit / "results.h5")
    assert [r.start for r in result.starts] == [0] and result.parameter_ids
    assert result.settings["backend"] == "torch" and result.starts[0].optimizer_state

"""``--confine`` (``confine=True``): a problem (or a network file given to ``convert``)
makes the toolkit open no file outside its folder, symlinks resolved.

Each hostile layout is refused with ``FILE_OUTSIDE_CONFINED`` naming the file and the
entry of the problem YAML that names it; the file outside is never opened (every open
of this process is watched) and its content never shows; without ``--confine`` the
same problem keeps today's behaviour (a warning, and the file is read).
"""

from __future__ import annotations

import builtins
import os
import shutil
from pathlib import Path

import pytest

from petab_sciml.confine import CODE, OutsideFolderError, check_confined, confined
from petab_sciml.problem import load_problem, validate_problem
from petab_sciml.problem.loader import ProblemError
from tests.support.hostile import CLI, Run, edit, make_problem
from tests.support.measure import check_run

SECRET = "SECRET_COLUMN_NAME"


@pytest.fixture
def watched(monkeypatch):
    """Every path this process opens (``os.open``, ``open``, h5py) while the test runs."""
    import h5py

    opened: list[str] = []

    def spy(fn, name):
        def wrapper(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)):
                opened.append(os.path.realpath(path))
            return fn(path, *args, **kwargs)
        wrapper.__name__ = name
        return wrapper

    monkeypatch.setattr(os, "open", spy(os.open, "open"))
    monkeypatch.setattr(builtins, "open", spy(builtins.open, "open"))
    monkeypatch.setattr(h5py, "File", spy(h5py.File, "File"))
    monkeypatch.setattr(h5py, "is_hdf5", spy(h5py.is_hdf5, "is_hdf5"))
    return opened


def _outside(root: Path) -> Path:
    """A folder beside the problem with a table whose header would be quoted."""
    folder = root / "elsewhere"
    folder.mkdir()
    (folder / "secret.tsv").write_text(f"{SECRET}\tother\n1\t2\n")
    return folder


def _refusals(report, entry: str) -> list:
    return [i for i in report.issues if i.code == CODE and i.path == entry]


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink", "symlinked_folder",
                                 "missing"])
def test_a_table_outside_is_refused_unopened(tmp_path, watched, how):
    problem = make_problem(tmp_path)
    outside = _outside(tmp_path)
    name = {"relative": "../elsewhere/secret.tsv",
            "absolute": str(outside / "secret.tsv"),
            "symlink": "link.tsv", "symlinked_folder": "sub/secret.tsv",
            "missing": str(outside / "nothing_here.tsv")}[how]
    if how == "symlink":
        (problem.parent / "link.tsv").symlink_to(outside / "secret.tsv")
    if how == "symlinked_folder":
        (problem.parent / "sub").symlink_to(outside)
    edit(problem, "measurement_files: [measurements.tsv]", f"measurement_files: [{name}]")
    report = validate_problem(problem, confine=True)
    assert not report.ok
    (issue,) = _refusals(report, "measurement_files")
    assert issue.file == "problem.yaml" and name in issue.message
    assert "not opened" in issue.message
    # no existence oracle: a missing file outside is refused like an existing one
    assert not [i for i in report.issues if i.code == "FILE_NOT_FOUND"]
    assert SECRET not in " ".join(map(str, report.issues))
    assert not [p for p in watched if p.startswith(str(outside.resolve()))]


def test_without_confine_the_same_problem_warns_and_reads(tmp_path, watched):
    problem = make_problem(tmp_path)
    outside = _outside(tmp_path)
    edit(problem, "measurement_files: [measurements.tsv]",
         "measurement_files: [../elsewhere/secret.tsv]")
    report = validate_problem(problem)
    assert [i.code for i in report.issues if i.path == "measurement_files"] == \
        ["FILE_OUTSIDE_PROBLEM"]
    assert str((outside / "secret.tsv").resolve()) in watched


@pytest.mark.parametrize("entry", ["model", "network", "array", "hybridization"])
def test_every_kind_of_file_is_confined(tmp_path, watched, entry):
    problem = make_problem(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    name, yaml_path = {
        "model": ("lv.xml", "model_files.lv.location"),
        "network": ("net1.yaml", "extensions.sciml.neural_networks.net1.location"),
        "array": ("net1_ps.hdf5", "extensions.sciml.array_files"),
        "hybridization": ("hybridization.tsv", "extensions.sciml.hybridization_files"),
    }[entry]
    # the file moves out; a symlink with its name stays in the folder
    shutil.move(problem.parent / name, outside / name)
    (problem.parent / name).symlink_to(outside / name)
    report = validate_problem(problem, confine=True)
    (issue,) = _refusals(report, yaml_path)
    assert "resolves to" in issue.message and str(outside / name) in issue.message
    assert not [p for p in watched if p.startswith(str(outside.resolve()))]
    with pytest.raises(ProblemError, match=CODE):
        load_problem(problem, confine=True, simulation=False)


def test_the_problem_yaml_itself_may_not_lead_out(tmp_path, watched):
    problem = make_problem(tmp_path)
    outside = _outside(tmp_path)
    shutil.move(problem, outside / "problem.yaml")
    problem.symlink_to(outside / "problem.yaml")
    report = validate_problem(problem, confine=True)
    assert [i.code for i in report.issues] == [CODE]
    assert not [p for p in watched if p.startswith(str(outside.resolve()))]


def test_nnef_folder_members_are_confined(tmp_path):
    pytest.importorskip("nnef")
    from petab_sciml.convert import convert

    problem = make_problem(tmp_path)
    folder = problem.parent
    convert(folder / "net1.yaml", folder / "net1_nnef", dst_format="nnef",
            params_in=folder / "net1_ps.hdf5")
    edit(problem, "location: net1.yaml\n        format: YAML",
         "location: net1_nnef\n        format: nnef")
    assert validate_problem(problem, confine=True).ok
    # one variable file moves out, a symlink stays
    dat = next((folder / "net1_nnef").rglob("*.dat"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(dat, outside / dat.name)
    dat.symlink_to(outside / dat.name)
    assert validate_problem(problem).ok            # without --confine: read
    report = validate_problem(problem, confine=True)
    refused = [i for i in report.issues if i.code == CODE]
    assert refused and dat.name in str(refused[0]), report.issues


def test_nnef_variable_label_may_not_leave_its_folder(tmp_path):
    pytest.importorskip("nnef")
    from petab_sciml.convert import convert
    from petab_sciml.errors import NetworkError
    from petab_sciml.formats.nnef import read_with_parameters

    folder = make_problem(tmp_path).parent
    model = folder / "net1_nnef"
    convert(folder / "net1.yaml", model, dst_format="nnef", params_in=folder / "net1_ps.hdf5")
    graph = model / "graph.nnef"
    text = graph.read_text()
    label = next(line.split("label = '")[1].split("'")[0] for line in text.splitlines()
                 if "label = '" in line)
    (tmp_path / "stolen.dat").write_bytes((model / f"{label}.dat").read_bytes())
    graph.write_text(text.replace(f"label = '{label}'", "label = '../../stolen'"))
    with pytest.raises(NetworkError, match="outside the model folder"):
        read_with_parameters(model, metadata=False)


def test_a_valid_problem_loads_confined_also_through_a_symlinked_folder(tmp_path):
    problem = make_problem(tmp_path)
    (tmp_path / "via").symlink_to(problem.parent)
    for path in (problem, tmp_path / "via" / "problem.yaml"):
        report = validate_problem(path, confine=True)
        assert report.ok, report.issues
    loaded = load_problem(tmp_path / "via" / "problem.yaml", confine=True)
    assert loaded.plan is not None


def test_confinement_is_scoped(tmp_path):
    (tmp_path / "a").mkdir()
    inside, outside = tmp_path / "a" / "x", tmp_path / "y"
    with confined(tmp_path / "a"):
        check_confined(inside)
        with pytest.raises(OutsideFolderError) as caught:
            check_confined(outside, named_by="entry")
        assert caught.value.file == str(outside) and caught.value.entry == "entry"
    check_confined(outside)   # no longer confined


@pytest.mark.slow
def test_cli_validate_info_and_convert_confine(tmp_path):
    problem = make_problem(tmp_path)
    _outside(tmp_path)
    edit(problem, "measurement_files: [measurements.tsv]",
         "measurement_files: [../elsewhere/secret.tsv]")
    net = problem.parent / "net1.yaml"
    (tmp_path / "moved").mkdir()
    shutil.copy(problem.parent / "net1_ps.hdf5", tmp_path / "moved" / "net1_ps.hdf5")
    runs = [Run([*CLI, "validate", "--confine", str(problem)], 1,
                [CODE, "problem.yaml", "measurement_files", "secret.tsv"]),
            Run([*CLI, "info", "--confine", str(problem)], 1, ["invalid"]),
            Run([*CLI, "convert", "--confine", str(net), str(tmp_path / "out.onnx"),
                 "--params-in", str(tmp_path / "moved" / "net1_ps.hdf5")], 1,
                ["net1_ps.hdf5", "--confine", "not opened"]),
            Run([*CLI, "convert", "--confine", str(net), str(tmp_path / "out.yaml"),
                 "--params-in", str(problem.parent / "net1_ps.hdf5")], 0, ["wrote"],
                ["out.yaml"])]
    for run in runs:
        result = check_run(run, tmp_path)
        assert SECRET not in result.output

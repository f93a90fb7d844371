"""Older drafts of the format: recognised in one line first, rewritten by ``upgrade``.

The four older-draft problems (``tests/support/problems/models.py``, written on first use by
``tests/support/problems/make_problems.py``) are built like the official
documentation examples (getting_started, how_to_dmms, how_to_neural_ode,
how_to_observable) in their older draft; each is upgraded, validated, loaded and its
objective compared in both backends with an independent numpy/scipy reference
(``tests/support/problems/models.py``).
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from petab_sciml.cli import main
from petab_sciml.problem import load_problem, validate_problem
from petab_sciml.problem.loader import ProblemError
from petab_sciml.problem.upgrade import UpgradeError, upgrade_problem
from tests.support.problems import models
from tests.support.suite import REPO

EXAMPLES = {f.__name__: f for f in models.OLDER_DRAFT_EXAMPLES}   # named as built
NAMES = sorted(EXAMPLES)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory) -> dict[str, object]:
    out = {}
    base = tmp_path_factory.mktemp("upgraded")
    for name in NAMES:
        out[name] = upgrade_problem(EXAMPLES[name]().problem, base / name)
    return out


# ------------------------------------------------------------------ recognising
@pytest.mark.parametrize("name", NAMES)
def test_older_draft_is_named_in_the_first_line(name):
    problem = EXAMPLES[name]().problem
    report = validate_problem(problem, libpetab=False)
    assert not report.ok
    first = report.issues[0]
    assert first.code == "LEGACY_LAYOUT" and first.file == "problem.yaml"
    for construct in ("`problems:` list", "`parameter_file`", "`simulationConditionId` in "
                      "measurements.tsv", "no extension `version`", "petab-sciml upgrade"):
        assert construct in first.message
    assert [i.code for i in report.issues].count("LEGACY_LAYOUT") == 1
    result = CliRunner().invoke(main, ["validate", str(problem), "--no-libpetab"])
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith("error   LEGACY_LAYOUT problem.yaml: ")


def test_per_target_condition_columns_are_named_before_their_follow_on_errors():
    report = validate_problem(EXAMPLES["how_to_dmms"]().problem, libpetab=False)
    codes = [i.code for i in report.issues]
    assert codes[0] == "LEGACY_LAYOUT"
    assert "one column per condition target in conditions.tsv" in report.issues[0].message
    assert "TABLE_COLUMNS_MISSING" in codes[1:]       # caused by it, listed after it


def test_load_refuses_an_older_draft_with_the_root_cause_first():
    with pytest.raises(ProblemError) as info:
        load_problem(EXAMPLES["how_to_observable"]().problem, backend="torch")
    lines = str(info.value).splitlines()
    assert "LEGACY_LAYOUT" in lines[1] and "older draft" in lines[1]


# ------------------------------------------------------------------ upgrading
def test_upgrade_lists_what_it_changed(upgraded):
    changes = {name: "\n".join(r.changes) for name, r in upgraded.items()}
    for text in changes.values():
        assert "moved the single entry of `problems:` to the top level" in text
        assert "`parameter_file` became `parameter_files`" in text
        assert "measurements.tsv: simulationConditionId became experimentId" in text
        assert "extensions.sciml.version '0.1.0' added" in text
        assert "extensions.sciml.required: true added" in text
    assert "one column per target (prey, predator) became" in changes["getting_started"]
    assert "dropped the conditionName column" in changes["getting_started"]
    assert "neural_nets became neural_networks" in changes["how_to_observable"]
    assert "network net3: `static` became `pre_initialization`" in changes["how_to_dmms"]
    assert "estimate 1/0 became true/false" in changes["how_to_neural_ode"]
    assert ("experiments.tsv: experiment_cond1 = cond1, experiment_cond2 = cond2"
            in changes["how_to_dmms"])


def test_upgraded_files(upgraded):
    result = upgraded["how_to_dmms"]
    new = result.problem.parent
    config = yaml.safe_load(result.problem.read_text())
    assert "problems" not in config and "parameter_file" not in config
    assert config["parameter_files"] == ["parameters.tsv"]
    assert config["experiment_files"] == ["experiments.tsv"]
    assert (config["extensions"]["sciml"]["version"],
            config["extensions"]["sciml"]["required"]) == ("0.1.0", True)
    net = config["extensions"]["sciml"]["neural_networks"]["net3"]
    assert net == {"location": "net3.yaml", "pre_initialization": True, "format": "YAML"}
    assert _rows(new / "experiments.tsv") == [
        {"experimentId": "experiment_cond1", "time": "0", "conditionId": "cond1"},
        {"experimentId": "experiment_cond2", "time": "0", "conditionId": "cond2"}]
    assert [(r["conditionId"], r["targetId"], float(r["targetValue"]))
            for r in _rows(new / "conditions.tsv")] == [
        ("cond1", "prey", 0.44), ("cond1", "predator", 4.6), ("cond2", "prey", 0.5),
        ("cond2", "predator", 4.0)]
    old = _rows(EXAMPLES["how_to_dmms"]().folder / "measurements.tsv")
    now = _rows(new / "measurements.tsv")
    assert [(r["observableId"], "experiment_" + r["simulationConditionId"], r["measurement"],
             r["time"]) for r in old] == [
        (r["observableId"], r["experimentId"], r["measurement"], r["time"]) for r in now]
    for unchanged in ("net3.yaml", "net3_ps.hdf5", "net3_input2.hdf5", "lv.xml",
                      "mapping.tsv", "hybridization.tsv"):
        assert (new / unchanged).read_bytes() == \
            (EXAMPLES["how_to_dmms"]().folder / unchanged).read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_upgraded_problem_is_valid(upgraded, name):
    report = validate_problem(upgraded[name].problem, libpetab=True)
    assert report.ok, "\n".join(map(str, report.issues))
    assert not report.issues.warnings, "\n".join(map(str, report.issues))
    assert report.plan is not None      # the SBML import and plan loading needs were run


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("name", NAMES)
def test_upgraded_problem_objective_matches_scipy(upgraded, name, backend, tmp_path):
    pytest.importorskip(backend)
    pytest.importorskip("scipy")
    example = EXAMPLES[name]()
    problem = load_problem(upgraded[name].problem, backend=backend)
    options = {"cache_dir": tmp_path} if backend == "jax" else {}
    value = problem.simulator(**options).objective(problem.parameters())
    assert value == pytest.approx(example.nll(), rel=1e-6)


def test_upgrade_command_prints_changes_and_validates(tmp_path):
    old = EXAMPLES["getting_started"]().problem
    result = CliRunner().invoke(main, ["upgrade", str(old), str(tmp_path / "new")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{old} -> {tmp_path / 'new' / 'problem.yaml'}:"
    assert "  - moved the single entry of `problems:` to the top level" in lines
    assert lines[-1] == f"{tmp_path / 'new' / 'problem.yaml'}: valid (0 warning(s))"
    again = CliRunner().invoke(main, ["upgrade", str(old), str(tmp_path / "new")])
    assert again.exit_code == 1 and "already exists" in again.output
    forced = CliRunner().invoke(main, ["upgrade", str(old), str(tmp_path / "new"), "--force"])
    assert forced.exit_code == 0, forced.output


def test_a_current_problem_is_left_alone(tmp_path):
    problem = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"
    result = CliRunner().invoke(main, ["upgrade", str(problem), str(tmp_path / "new")])
    assert result.exit_code == 0
    assert "already in the current format; nothing written" in result.output
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------ what cannot be upgraded
def _copy(name: str, dest: Path) -> Path:
    shutil.copytree(EXAMPLES[name]().folder, dest)
    return dest / "problem.yaml"


def _edit_yaml(path: Path, edit) -> None:
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_upgrade_refuses_two_problems_in_one_file(tmp_path):
    problem = _copy("how_to_observable", tmp_path / "old")
    _edit_yaml(problem, lambda d: d["problems"].append(dict(d["problems"][0])))
    with pytest.raises(UpgradeError, match="`problems:` holds 2 problems"):
        upgrade_problem(problem, tmp_path / "new")


def test_upgrade_refuses_the_first_draft_and_its_own_folder(tmp_path):
    problem = _copy("how_to_observable", tmp_path / "old")
    with pytest.raises(UpgradeError, match="own folder"):
        upgrade_problem(problem, problem.parent)
    _edit_yaml(problem, lambda d: d["extensions"]["sciml"].update(
        {"net1": {"file": "net1.yaml", "hybridization": {"input": "ode", "output": "ode"}}})
        or d["extensions"]["sciml"].pop("neural_nets"))
    with pytest.raises(UpgradeError, match="first draft"):
        upgrade_problem(problem, tmp_path / "new")


# ------------------------------------------------------------------ conditions -> hybridization
def _conditions_hold_the_hybridization(tmp_path: Path, *, second_condition: bool) -> Path:
    """getting_started as a still older draft: no hybridization table, the network's
    inputs and outputs assigned by per-target condition columns."""
    problem = _copy("getting_started", tmp_path / "old")
    folder = problem.parent
    _edit_yaml(problem, lambda d: d["extensions"]["sciml"].pop("hybridization_files"))
    (folder / "hybridization.tsv").unlink()
    rows = ["conditionId\tprey\tpredator\tnet1_input1\tnet1_input2\tbeta\tgamma",
            "cond1\t0.44\t4.6\tprey\tpredator\tnet1_output1\tnet1_output2"]
    if second_condition:
        rows.append("cond2\t0.44\t4.6\tpredator\tpredator\tnet1_output1\tnet1_output2")
    (folder / "conditions.tsv").write_text("\n".join(rows) + "\n")
    return problem


def test_upgrade_moves_simulation_network_assignments_to_a_hybridization_table(tmp_path):
    problem = _conditions_hold_the_hybridization(tmp_path, second_condition=False)
    result = upgrade_problem(problem, tmp_path / "new")
    text = "\n".join(result.changes)
    assert "net1_input1 = prey: moved from the condition table to the hybridization" in text
    assert "added a hybridization table" in text
    new = result.problem.parent
    assert [(r["targetId"], r["targetValue"]) for r in _rows(new / "hybridization.tsv")] == [
        ("net1_input1", "prey"), ("net1_input2", "predator"), ("beta", "net1_output1"),
        ("gamma", "net1_output2")]
    assert {r["targetId"] for r in _rows(new / "conditions.tsv")} == {"prey", "predator"}
    assert yaml.safe_load(result.problem.read_text())["extensions"]["sciml"][
        "hybridization_files"] == ["hybridization.tsv"]
    problem = load_problem(result.problem, backend="torch")
    assert problem.objective() == pytest.approx(EXAMPLES["getting_started"]().nll(),
                                                rel=1e-6)


def test_upgrade_refuses_a_network_input_that_differs_between_conditions(tmp_path):
    problem = _conditions_hold_the_hybridization(tmp_path, second_condition=True)
    with pytest.raises(UpgradeError, match="'net1_input1' is assigned per condition "
                                           r"\(cond1=prey, cond2=predator\)"):
        upgrade_problem(problem, tmp_path / "new")


def test_preequilibration_becomes_a_period_at_minus_infinity(tmp_path):
    """And the result validates and loads: a pre-equilibration period, then the
    simulation condition from 0."""
    problem = _copy("how_to_neural_ode", tmp_path / "old")
    folder = problem.parent
    rows = _rows(folder / "measurements.tsv")
    with open(folder / "measurements.tsv", "w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["observableId", "preequilibrationConditionId",
                         "simulationConditionId", "measurement", "time"])
        writer.writerows([r["observableId"], "cond1", "cond1", r["measurement"], r["time"]]
                         for r in rows)
    result = upgrade_problem(problem, tmp_path / "new")
    new = result.problem.parent
    assert _rows(new / "experiments.tsv") == [
        {"experimentId": "experiment_cond1_cond1", "time": "-inf", "conditionId": "cond1"},
        {"experimentId": "experiment_cond1_cond1", "time": "0", "conditionId": "cond1"}]
    report = validate_problem(result.problem, libpetab=False)
    assert not report.issues.errors, report.issues.errors
    plan = load_problem(result.problem, backend="jax").plan
    (experiment,) = plan.experiments
    assert [(p.pre_equilibration, p.steady_state, p.start) for p in experiment.periods] == [
        (True, True, 0.0), (False, False, 0.0)]


def test_measurements_keep_their_values_exactly(upgraded):
    for name, result in upgraded.items():
        old = _rows(EXAMPLES[name]().folder / "measurements.tsv")
        new = _rows(result.problem.parent / "measurements.tsv")
        assert np.array_equal([float(r["measurement"]) for r in old],
                              [float(r["measurement"]) for r in new])


def _without_targets(name: str, tmp_path: Path, sbml_x0: dict[str, str] | None = None
                     ) -> Path:
    """The older-draft example ``name`` with a ``conditionId``-only condition table (as
    the official documentation examples have), optionally with the SBML initial amounts
    set to ``sbml_x0``."""
    src = Path(EXAMPLES[name]().problem).parent
    folder = tmp_path / name
    shutil.copytree(src, folder)
    conditions = _rows(folder / "conditions.tsv")
    (folder / "conditions.tsv").write_text(
        "conditionId\n" + "".join(f"{r['conditionId']}\n" for r in conditions))
    for sbml in folder.glob("*.xml"):
        text = sbml.read_text()
        for species, value in (sbml_x0 or {}).items():
            start = text.index(f'species id="{species}"')
            at = text.index('initialAmount="', start) + len('initialAmount="')
            text = text[:at] + value + text[text.index('"', at):]
        sbml.write_text(text)
    return folder / "problem.yaml"


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_condition_table_without_targets_upgrades_to_a_valid_problem(tmp_path, backend):
    """Conditions that change nothing have no rows in the current format: the
    experiments use no condition, and with the SBML holding the initial values the
    conditions set, the objective is the scipy reference's."""
    pytest.importorskip(backend)
    old = _without_targets("getting_started", tmp_path,
                           {"prey": "0.44", "predator": "4.6"})
    result = upgrade_problem(old, tmp_path / "new")
    assert any("no target columns" in change for change in result.changes)
    report = validate_problem(result.problem)
    assert report.ok, "\n".join(map(str, report.issues))
    assert [r["conditionId"] for r in _rows(tmp_path / "new" / "experiments.tsv")] == [""]
    problem = load_problem(result.problem, backend=backend)
    options = {"cache_dir": tmp_path} if backend == "jax" else {}
    value = problem.simulator(**options).objective(problem.parameters())
    assert value == pytest.approx(EXAMPLES["getting_started"]().nll(), rel=1e-6)


def test_conditions_that_array_files_key_inputs_by_are_kept(tmp_path):
    """how_to_dmms keys its images by condition: those ids stay in the experiments
    (without condition rows, as the official suite's case 038 has them)."""
    old = _without_targets("how_to_dmms", tmp_path)
    result = upgrade_problem(old, tmp_path / "new")
    report = validate_problem(result.problem)
    assert report.ok, "\n".join(map(str, report.issues))
    used = {r["conditionId"] for r in _rows(tmp_path / "new" / "experiments.tsv")}
    assert used == {"cond1", "cond2"}
    assert _rows(tmp_path / "new" / "conditions.tsv") == []


def test_every_mismatched_parameter_array_is_reported_with_its_shapes(upgraded, tmp_path):
    """A parameter file written for another network size (how_to_neural_ode ships a
    2-5-5-1 file for a 2-10-10-2 network): each array that does not fit is named with the
    shape found and the shape expected, weights as well as biases, and nothing is then
    reported missing for it."""
    from petab_sciml.arrays import write_array_file

    folder = tmp_path / "p"
    shutil.copytree(Path(upgraded["getting_started"].problem).parent, folder)
    write_array_file(folder / "net1_ps.hdf5", parameters={"net1": {
        "layer1": {"weight": np.zeros((5, 2)), "bias": np.zeros(5)},
        "layer2": {"weight": np.zeros((2, 5)), "bias": np.zeros(2)}}})
    report = validate_problem(folder / "problem.yaml")
    found = sorted((i.code, i.message) for i in report.issues)
    assert found == [
        ("ARRAY_PARAMETERS_MISMATCH", "shape mismatch: got (2, 5), expected (2, 4) for "
         "layer2.weight of layer 'layer2' (Linear)"),
        ("ARRAY_PARAMETERS_MISMATCH", "shape mismatch: got (5, 2), expected (4, 2) for "
         "layer1.weight of layer 'layer1' (Linear)"),
        ("ARRAY_PARAMETERS_MISMATCH", "shape mismatch: got (5,), expected (4,) for "
         "layer1.bias of layer 'layer1' (Linear)")]

"""Training strategies as PEtab problems (``petab_sciml/training``): the partitions, the
curriculum and multiple-shooting tables, table by table, and the multiple-shooting
problem simulated against the original problem it was made from."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from petab_sciml.cli import main
from petab_sciml.training import (
    PartitionError,
    StrategyError,
    curriculum_tables,
    merged_windows,
    read_source,
    shooting_tables,
    shooting_windows,
    stage_ends,
    training_problems,
)

pytest.importorskip("libsbml")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lotka_volterra_ude"


def _two_period_problem(folder: Path, preequilibration: bool = False) -> Path:
    """The bundled Lotka-Volterra UDE with a condition table: experiment ``lv`` starts
    from ``c0`` and at t = 5 gets ``shift`` (``delta`` := 2, ``prey`` := 1)."""
    folder.mkdir(parents=True)
    for name in ("lv.xml", "net1.yaml", "net1_ps.hdf5", "hybridization.tsv", "mapping.tsv",
                 "observables.tsv", "parameters.tsv", "problem.yaml"):
        shutil.copy(EXAMPLE / name, folder / name)
    meas = (EXAMPLE / "measurements.tsv").read_text().replace("lv_experiment", "lv")
    (folder / "measurements.tsv").write_text(meas)
    pre = "lv\t-inf\tpre\n" if preequilibration else ""
    (folder / "experiments.tsv").write_text(
        f"experimentId\ttime\tconditionId\n{pre}lv\t0\tc0\nlv\t5\tshift\n")
    (folder / "conditions.tsv").write_text(
        "conditionId\ttargetId\ttargetValue\nc0\tprey\t0.8\nc0\tpredator\t3.0\n"
        "shift\tdelta\t2.0\nshift\tprey\t1.0\npre\tbeta\t0.75\n")
    text = (folder / "problem.yaml").read_text().replace(
        'experiment_files: ["experiments.tsv"]',
        'experiment_files: ["experiments.tsv"]\ncondition_files: ["conditions.tsv"]')
    (folder / "problem.yaml").write_text(text)
    return folder / "problem.yaml"


def _rows(tables, kind, **match):
    return [r for r in tables[kind].rows if all(r.get(k) == v for k, v in match.items())]


# ----------------------------------------------------------------------------- partitions
def test_stage_ends_split_the_distinct_times_evenly():
    times = [1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, math.inf]
    assert stage_ends(times, stages=3) == [4.0, 7.0, 10.0]
    assert stage_ends(times, stages=1) == [10.0]
    assert stage_ends(times, stages=10) == [float(t) for t in range(1, 11)]
    assert stage_ends(times, split=[2.5, 6]) == [2.5, 6.0, 10.0]
    with pytest.raises(PartitionError, match="11 stages need at least"):
        stage_ends(times, stages=11)
    with pytest.raises(PartitionError, match="strictly inside"):
        stage_ends(times, split=[10])
    with pytest.raises(PartitionError, match="adds no measurement time"):
        stage_ends(times, split=[2.2, 2.5])


def test_shooting_windows_cover_the_times_and_merge_stage_by_stage():
    times = np.arange(1.0, 11.0)
    windows = shooting_windows(times, windows=3)
    assert windows == [(1.0, 4.0), (4.0, 7.0), (7.0, 10.0)]
    assert shooting_windows(times, windows=9)[-1] == (9.0, 10.0)
    assert shooting_windows(times, split=[3, 7.5]) == [(1.0, 3.0), (3.0, 7.5), (7.5, 10.0)]
    assert merged_windows(windows, 1) == windows
    assert merged_windows(windows, 2) == [(1.0, 7.0), (4.0, 10.0)]
    assert merged_windows(windows, 3) == [(1.0, 10.0)]
    with pytest.raises(PartitionError, match="10 windows need at least 11"):
        shooting_windows(times, windows=10)
    with pytest.raises(PartitionError, match="holds no measurement"):
        shooting_windows([0, 1, 10], split=[2, 3])
    with pytest.raises(PartitionError, match="strictly ascending"):
        shooting_windows(times, split=[5, 4])


# ----------------------------------------------------------------------------- curriculum
def test_curriculum_stage_drops_later_measurements_periods_and_conditions(tmp_path):
    source = read_source(_two_period_problem(tmp_path / "p"))
    stage = curriculum_tables(source, 3.0)
    assert sorted({float(r["time"]) for r in stage["measurement"].rows}) == [1.0, 2.0, 3.0]
    assert len(stage["measurement"].rows) == 6
    assert [(r["time"], r["conditionId"]) for r in stage["experiment"].rows] == [("0", "c0")]
    assert {r["conditionId"] for r in stage["condition"].rows} == {"c0"}
    # observables and parameters whole: every stage estimates the same parameters
    assert stage["parameter"].rows == source.tables["parameter"].rows
    later = curriculum_tables(source, 6.0)
    assert [r["conditionId"] for r in later["experiment"].rows] == ["c0", "shift"]
    assert {r["conditionId"] for r in later["condition"].rows} == {"c0", "shift"}


def test_curriculum_problems_are_written_valid_and_the_last_is_the_original(tmp_path):
    problem = _two_period_problem(tmp_path / "p")
    paths = training_problems(problem, "curriculum", tmp_path / "out", stages=3)
    assert [p.parent.name for p in paths] == ["stage1", "stage2", "stage3"]
    for path in paths:    # complete on its own: network, arrays, model copied beside it
        assert (path.parent / "net1.yaml").is_file() and (path.parent / "lv.xml").is_file()
    counts = [len((p.parent / "measurements.tsv").read_text().splitlines()) - 1 for p in paths]
    assert counts == [8, 14, 20]
    last = (paths[-1].parent / "measurements.tsv").read_text().splitlines()
    original = (problem.parent / "measurements.tsv").read_text().splitlines()
    assert sorted(last[1:]) == sorted(original[1:])


# ------------------------------------------------------------------------ multiple shooting
def test_multiple_shooting_tables(tmp_path):
    source = read_source(_two_period_problem(tmp_path / "p"))
    t = shooting_tables(source, [(1.0, 3.0), (3.0, 7.0), (7.0, 10.0)], penalty=4.0)
    w = [f"WINDOW{i}_EXPERIMENT_lv" for i in (1, 2, 3)]
    periods = [(r["experimentId"], float(r["time"]), r["conditionId"])
               for r in t["experiment"].rows]
    # window 1 is the experiment up to its end (the period at 0, before the first
    # measurement, kept); a later window starts with its _IC condition, later periods kept
    assert periods == [(w[0], 0.0, "c0"), (w[1], 3.0, f"{w[1]}_IC"), (w[1], 5.0, "shift"),
                       (w[2], 7.0, f"{w[2]}_IC")]
    ic2 = {r["targetId"]: r["targetValue"] for r in _rows(t, "condition",
                                                          conditionId=f"{w[1]}_IC")}
    assert ic2 == {"prey": f"{w[1]}_PARAMETER_prey", "predator": f"{w[1]}_PARAMETER_predator"}
    # window 3 starts after `shift`: its delta = 2 is still in effect, its prey is not
    ic3 = {r["targetId"]: r["targetValue"] for r in _rows(t, "condition",
                                                          conditionId=f"{w[2]}_IC")}
    assert ic3 == {"delta": "2.0", "prey": f"{w[2]}_PARAMETER_prey",
                   "predator": f"{w[2]}_PARAMETER_predator"}
    # measurements: each in its window, boundary times in both
    def times(eid, obs="prey_obs"):
        return [float(r["time"]) for r in _rows(t, "measurement", experimentId=eid,
                                                 observableId=obs)]
    assert times(w[0]) == [1.0, 2.0, 3.0]
    assert times(w[1]) == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert times(w[2]) == [7.0, 8.0, 9.0, 10.0]
    # penalties: measured 0 at the window's start in the window before, noise 1
    for i, t0 in ((2, 3.0), (3, 7.0)):
        for state in ("prey", "predator"):
            oid = f"WINDOW{i}_EXPERIMENT_lv_PENALTY_{state}"
            (obs,) = _rows(t, "observable", observableId=oid)
            assert obs["observableFormula"] == \
                f"({state} - WINDOW{i}_EXPERIMENT_lv_PARAMETER_{state}) * MS_PENALTY_SQRT"
            assert (obs["noiseFormula"], obs["noiseDistribution"]) == ("1.0", "normal")
            (m,) = _rows(t, "measurement", observableId=oid)
            assert (m["experimentId"], float(m["time"]), float(m["measurement"])) == \
                (f"WINDOW{i - 1}_EXPERIMENT_lv", t0, 0.0)
            (p,) = _rows(t, "parameter", parameterId=f"WINDOW{i}_EXPERIMENT_lv_PARAMETER_{state}")
            # species cannot be negative; the bound is not the draft code's 1e-8
            assert (float(p["lowerBound"]), float(p["upperBound"]), p["estimate"]) == \
                (0.0, 1e8, "true")
    (sqrt,) = _rows(t, "parameter", parameterId="MS_PENALTY_SQRT")
    assert (float(sqrt["nominalValue"]), sqrt["estimate"]) == (2.0, "false")
    log = shooting_tables(source, [(1.0, 5.0), (5.0, 10.0)], penalty=1.0, log_penalty=True)
    (obs,) = _rows(log, "observable", observableId="WINDOW2_EXPERIMENT_lv_PENALTY_prey")
    assert obs["observableFormula"] == ("(log(abs(prey)) - log(abs("
                                        "WINDOW2_EXPERIMENT_lv_PARAMETER_prey))) * MS_PENALTY_SQRT")


def test_pre_equilibration_stays_in_the_first_window_and_its_values_carry_on(tmp_path):
    source = read_source(_two_period_problem(tmp_path / "p", preequilibration=True))
    t = shooting_tables(source, [(1.0, 4.0), (4.0, 10.0)], penalty=1.0)
    first = [float(r["time"]) for r in _rows(t, "experiment",
                                             experimentId="WINDOW1_EXPERIMENT_lv")]
    assert first == [-math.inf, 0.0]
    second = _rows(t, "experiment", experimentId="WINDOW2_EXPERIMENT_lv")
    assert [float(r["time"]) for r in second] == [4.0, 5.0]
    ic = {r["targetId"]: r["targetValue"]
          for r in _rows(t, "condition", conditionId="WINDOW2_EXPERIMENT_lv_IC")}
    assert ic["beta"] == "0.75"          # set in the pre-equilibration, still in effect


def test_experiments_of_partial_coverage_and_measurements_without_experiment(tmp_path):
    problem = _two_period_problem(tmp_path / "p")
    meas = (problem.parent / "measurements.tsv").read_text().splitlines()
    # a second experiment measured only up to t = 4, and prey_obs rows without experiment
    extra = [line.replace("\tlv\t", "\tshort\t") for line in meas[1:]
             if float(line.split("\t")[3]) <= 4]
    bare = [line.replace("\tlv\t", "\t\t") for line in meas[1:] if line.startswith("prey")]
    (problem.parent / "measurements.tsv").write_text("\n".join([*meas, *extra, *bare]) + "\n")
    with open(problem.parent / "experiments.tsv", "a") as fh:
        fh.write("short\t0\tc0\n")
    t = shooting_tables(read_source(problem), [(1.0, 3.0), (3.0, 6.0), (6.0, 10.0)],
                        penalty=1.0)
    experiments = {r["experimentId"] for r in t["experiment"].rows}
    assert {"WINDOW1_EXPERIMENT_short", "WINDOW2_EXPERIMENT_short"} <= experiments
    assert "WINDOW3_EXPERIMENT_short" not in experiments       # its data end at 4 < 6
    assert not _rows(t, "measurement", observableId="WINDOW3_EXPERIMENT_short_PENALTY_prey")
    default = _rows(t, "experiment", experimentId="WINDOW1_EXPERIMENT_default")
    assert [(float(r["time"]), r["conditionId"]) for r in default] == [(0.0, "")]
    assert len(_rows(t, "measurement", experimentId="WINDOW3_EXPERIMENT_default")) == 5   # 6..10


def test_multiple_shooting_refuses_what_it_cannot_split(tmp_path):
    problem = _two_period_problem(tmp_path / "p")
    with open(problem.parent / "conditions.tsv", "a") as fh:
        fh.write("shift\tbeta\tprey * 0.5\n")
    source = read_source(problem)
    with pytest.raises(StrategyError, match="'beta'.*depends on states or time"):
        shooting_tables(source, [(1.0, 6.0), (6.0, 10.0)], penalty=1.0)
    with pytest.raises(StrategyError, match="penalty must be a positive number"):
        shooting_tables(source, [(1.0, 6.0), (6.0, 10.0)], penalty=0.0)


def test_curriculum_multiple_shooting_stages(tmp_path):
    problem = _two_period_problem(tmp_path / "p")
    paths = training_problems(problem, "curriculum-multiple-shooting", tmp_path / "out",
                              split=[3, 7], penalty=2.0)
    assert [p.parent.name for p in paths] == ["stage1", "stage2", "stage3"]
    stage2 = (paths[1].parent / "experiments.tsv").read_text()
    assert "WINDOW3" not in stage2 and "WINDOW2_EXPERIMENT_lv\t3.0" in stage2
    meas2 = (paths[1].parent / "measurements.tsv").read_text().splitlines()
    # window 1 is [1, 7], window 2 [3, 10]: the overlap 3..7 measured in both
    w1 = [line for line in meas2 if "\tWINDOW1_EXPERIMENT_lv\t" in line
          and line.startswith("prey_obs")]
    assert len(w1) == 7
    penalty = [line for line in meas2 if line.startswith("WINDOW2_EXPERIMENT_lv_PENALTY")]
    assert len(penalty) == 2 and all("\tWINDOW1_EXPERIMENT_lv\t" in line for line in penalty)
    for name in ("measurements.tsv", "experiments.tsv", "conditions.tsv"):
        final = (paths[2].parent / name).read_text().splitlines()
        original = (problem.parent / name).read_text().splitlines()
        assert sorted(final[1:]) == sorted(original[1:]), name


def test_cli_writes_validated_problems_and_keeps_existing_output(tmp_path):
    problem = _two_period_problem(tmp_path / "p")
    runner = CliRunner()
    done = runner.invoke(main, ["training-problems", "multiple-shooting", str(problem),
                                "--out", str(tmp_path / "ms"), "--stages", "3", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["problems"] == [str(tmp_path / "ms" / "problem.yaml")]
    again = runner.invoke(main, ["training-problems", "curriculum", str(problem), "--out",
                                 str(tmp_path / "ms"), "--stages", "2"])
    assert again.exit_code == 1 and "--force" in again.output
    assert (tmp_path / "ms" / "problem.yaml").is_file()
    usage = runner.invoke(main, ["training-problems", "curriculum", str(problem), "--out",
                                 str(tmp_path / "c")])
    assert usage.exit_code == 2 and "--stages or --split" in usage.output


def test_official_network_problem_gives_valid_stage_problems(tmp_path):
    from petab_sciml.testcases import default_suite

    suite = default_suite()
    if suite is None:
        pytest.skip("the official PEtab SciML suite is not beside the checkout")
    case = Path(suite) / "test_cases" / "sciml_problem_import" / "001" / "petab" / "problem.yaml"
    for strategy in ("curriculum", "multiple-shooting", "curriculum-multiple-shooting"):
        paths = training_problems(case, strategy, tmp_path / strategy, stages=2)
        assert all(p.is_file() for p in paths)


@pytest.mark.slow
def test_multiple_shooting_at_the_true_window_states_simulates_the_original(tmp_path):
    """Window states set to the original simulation's states at the window starts: every
    window simulates the original trajectory (the carried ``delta`` = 2 included) and
    every continuity penalty is zero, up to the solver's tolerance."""
    pytest.importorskip("jax")
    from petab_sciml.problem import load_problem

    problem = _two_period_problem(tmp_path / "p")
    original = load_problem(problem, backend="jax")
    sims = original.simulate()
    rows = [(r["observableId"], float(r["time"])) for r in
            read_source(problem).tables["measurement"].rows]
    reference = dict(zip(rows, sims, strict=True))
    (ms,) = training_problems(problem, "multiple-shooting", tmp_path / "ms",
                              split=[3, 7], penalty=9.0)
    params = (ms.parent / "parameters.tsv").read_text().splitlines()
    for k, line in enumerate(params):
        for i, t0 in ((2, 3.0), (3, 7.0)):
            for state in ("prey", "predator"):
                pid = f"WINDOW{i}_EXPERIMENT_lv_PARAMETER_{state}"
                if line.startswith(pid + "\t"):
                    cells = line.split("\t")
                    cells[4] = repr(float(reference[f"{state}_obs", t0]))
                    params[k] = "\t".join(cells)
    (ms.parent / "parameters.tsv").write_text("\n".join(params) + "\n")
    windows = load_problem(ms, backend="jax")
    got = windows.simulate()
    n_data = n_penalty = 0
    for r, value in zip(read_source(ms).tables["measurement"].rows, got, strict=True):
        key = (r["observableId"], float(r["time"]))
        if "_PENALTY_" in r["observableId"]:
            n_penalty += 1
            assert abs(value) < 3e-6, (r, value)      # (state - its parameter) * 3
        else:
            n_data += 1
            np.testing.assert_allclose(value, reference[key], rtol=1e-6, atol=1e-8,
                                       err_msg=str(r))
    assert (n_data, n_penalty) == (24, 4)


def test_problem_without_experiment_table(tmp_path):
    """Measurements without an experiment (no experiment table, no experimentId column)
    become experiment ``default`` starting at 0; curriculum stages keep them as they
    are."""
    folder = tmp_path / "p"
    shutil.copytree(EXAMPLE, folder)
    (folder / "experiments.tsv").unlink()
    text = (folder / "problem.yaml").read_text()
    (folder / "problem.yaml").write_text(text.replace('experiment_files: ["experiments.tsv"]\n',
                                                      ""))
    lines = (folder / "measurements.tsv").read_text().splitlines()
    (folder / "measurements.tsv").write_text("\n".join(
        "\t".join(c for k, c in enumerate(line.split("\t")) if k != 1) for line in lines) + "\n")
    problem = folder / "problem.yaml"
    t = shooting_tables(read_source(problem), [(1.0, 5.0), (5.0, 10.0)], penalty=1.0)
    assert [(r["experimentId"], float(r["time"]), r["conditionId"])
            for r in t["experiment"].rows] == [
        ("WINDOW1_EXPERIMENT_default", 0.0, ""),
        ("WINDOW2_EXPERIMENT_default", 5.0, "WINDOW2_EXPERIMENT_default_IC")]
    assert {r["experimentId"] for r in t["measurement"].rows} == {
        "WINDOW1_EXPERIMENT_default", "WINDOW2_EXPERIMENT_default"}
    paths = training_problems(problem, "curriculum", tmp_path / "c", stages=2)
    stage1 = (paths[0].parent / "measurements.tsv").read_text().splitlines()
    assert len(stage1) == 1 + 10 and all(line.split("\t")[3] == "" for line in stage1[1:])
    training_problems(problem, "multiple-shooting", tmp_path / "ms", stages=2)  # validated


@pytest.mark.parametrize("initial_value", [True, False])
def test_events_around_window_starts(tmp_path, initial_value):
    """A dose at ``time >= tau`` (tau = 1.3) in windows [0.5, 1], [1, 2], [2, 3.5] with
    the true window states: window 2 gives the dose inside itself, as the original does;
    window 3 starts after it, where the trigger is already true.  With
    ``initialValue="true"`` it does not fire there (the closed-form trajectory
    throughout); with ``"false"`` SBML fires it at the window start, so window 3 doses
    again (docs/training_strategies.md, "Events")."""
    pytest.importorskip("torch")
    from petab_sciml.problem import load_problem
    from tests.simulation.test_events import DOSE, TAU, TIMES, dosed_x, write_dosing

    problem = write_dosing(tmp_path / "p", initial_value=initial_value)
    (ms,) = training_problems(problem, "multiple-shooting", tmp_path / "ms",
                              split=[1.0, 2.0], penalty=1.0)
    d = 0.7
    truth = {t: dosed_x(t, d, TAU, DOSE) for t in TIMES}
    params = (ms.parent / "parameters.tsv").read_text().splitlines()
    header = params[0].split("\t")
    for k, line in enumerate(params):
        cells = line.split("\t")
        for i, t0 in ((2, 1.0), (3, 2.0)):
            if cells[0] == f"WINDOW{i}_EXPERIMENT_default_PARAMETER_X":
                cells[header.index("nominalValue")] = repr(truth[t0])
                params[k] = "\t".join(cells)
    (ms.parent / "parameters.tsv").write_text("\n".join(params) + "\n")
    sims = load_problem(ms, backend="torch").simulator(compile=False).evaluate(
        grad=False).simulations
    rows = read_source(ms).tables["measurement"].rows
    window3 = [(float(r["time"]), v) for r, v in zip(rows, sims, strict=True)
               if r["experimentId"] == "WINDOW3_EXPERIMENT_default" and r["observableId"] == "obs"]
    others = [(float(r["time"]), v) for r, v in zip(rows, sims, strict=True)
              if r["experimentId"] != "WINDOW3_EXPERIMENT_default" and r["observableId"] == "obs"]
    assert [t for t, _ in others] == [0.5, 1.0, 1.0, 2.0]
    for t, v in others:
        assert v == pytest.approx(truth[t], rel=1e-6)
    assert [t for t, _ in window3] == [2.0, 3.5]
    extra = 0.0 if initial_value else DOSE      # fired again at the window's start
    for t, v in window3:
        assert v == pytest.approx((truth[2.0] + extra) * math.exp(-d * (t - 2.0)), rel=1e-6)

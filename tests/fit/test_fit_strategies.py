"""``fit`` with a training strategy (``petab_sciml/fit/strategy.py``): parameters carried
between stages by id, new window states started at the original problem's simulated
states, the original objective reported after every stage, in both backends."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("libsbml")
pytest.importorskip("optax")

from petab_sciml.fit.strategy import carry, fit_strategy  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402
from tests.training.test_training_problems import _two_period_problem  # noqa: E402


def test_carry_takes_parameters_and_network_arrays_by_id(tmp_path):
    from petab_sciml.training import training_problems

    problem = _two_period_problem(tmp_path / "p")
    (ms,) = training_problems(problem, "multiple-shooting", tmp_path / "ms", split=[5])
    a = load_problem(problem, backend="jax").plan
    b = load_problem(ms, backend="jax").plan
    w = np.random.default_rng(0).normal(size=a.n_w)
    got = carry(a, w, b, b.w0)
    va, vb = a.unpack(w), b.unpack(got)
    for pid in a.mech_ids:
        assert vb["mech"][b.mech_ids.index(pid)] == va["mech"][a.mech_ids.index(pid)]
    for layer, arrays in va["nets"]["net1"].items():
        for name, value in arrays.items():
            np.testing.assert_array_equal(vb["nets"]["net1"][layer][name], value)
    new = [j for j, pid in enumerate(b.mech_ids) if pid not in a.mech_ids]
    assert len(new) == 2 and all(got[j] == b.w0[j] for j in new)     # window states
    back = carry(b, got, a, np.zeros(a.n_w))
    np.testing.assert_array_equal(back, w)


@pytest.mark.slow
def test_stages_without_steps_carry_the_starts_unchanged(tmp_path):
    """With 0 steps per stage every stage starts where the last ended, so the original
    objective after each stage is the objective at the drawn starts, and each window
    state starts at the original trajectory's state at its window's start."""
    problem = _two_period_problem(tmp_path / "p")
    result = fit_strategy(problem, "curriculum-multiple-shooting", split=[3, 7], steps=0,
                          starts=2, seed=3, out=tmp_path / "fit", in_process=True,
                          plots=False, progress=False)
    original = load_problem(problem, backend="jax")
    sim = original.simulator(cache=False)
    from petab_sciml.fit.starts import draw_starts
    from petab_sciml.training import read_source

    starts = draw_starts(original, 3, 2, lambda w: sim.evaluate(w, grad=False).value)
    expected = [sim.evaluate(w, grad=False).value for w in starts]
    assert [s.name for s in result.stages] == ["stage1", "stage2", "stage3"]
    for stage in result.stages:
        np.testing.assert_array_equal(stage.original_values, expected)
    for w, w0 in zip(result.original_w, starts, strict=True):
        np.testing.assert_array_equal(w, w0)
    # stage 1's window states: the original simulation of that start at t = 3 and 7
    stage1 = result.stages[0]
    plan = load_problem(stage1.problem, backend="jax").plan
    rows = [(r["observableId"], float(r["time"]))
            for r in read_source(problem).tables["measurement"].rows]
    for start in stage1.result.starts:
        sims = dict(zip(rows, sim.evaluate(starts[start.start], grad=False).simulations,
                        strict=True))
        for i, t0 in ((2, 3.0), (3, 7.0)):
            for state in ("prey", "predator"):
                j = plan.mech_ids.index(f"WINDOW{i}_EXPERIMENT_lv_PARAMETER_{state}")
                # the probe's solve ends at t = 7, the original's at 10: equal to the
                # solver's tolerance (rtol 1e-8), not bit for bit
                assert start.w[j] == pytest.approx(sims[f"{state}_obs", t0], rel=1e-6)
    summary = json.loads((tmp_path / "fit" / "strategy.json").read_text())
    assert [s["original_objective"] for s in summary["stages"]] == [expected] * 3
    assert (tmp_path / "fit" / "stage2" / "results.h5").is_file()
    # the last stage of curriculum multiple shooting is the original problem: its fit
    # evaluates the starts as one vmapped batch, the reference one by one, so they agree
    # to round-off (1e-11 relative with JAX 0.10), not bit for bit
    assert summary["stages"][-1]["stage_objective"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_short_multiple_shooting_fit_agrees_across_backends(tmp_path):
    """Two Adam steps of a multiple-shooting fit from the same start in JAX (optax) and
    PyTorch (torch.optim), both from the nominal values (drawn starts differ by backend):
    the same losses and the same original objective after it."""
    pytest.importorskip("torch")
    problem = _two_period_problem(tmp_path / "p")
    results = {backend: fit_strategy(problem, "multiple-shooting", stages=2, penalty=10.0,
                                     steps=2, starts=1, seed=0, backend=backend,
                                     out=tmp_path / backend, in_process=True, plots=False,
                                     progress=False, lr=0.02, start_from_nominal=True,
                                     # PyTorch's eager solve: its compile is not the subject
                                     **({"compile": False} if backend == "torch" else {}))
               for backend in ("jax", "torch")}
    jax_stage, torch_stage = (results[b].stages[0] for b in ("jax", "torch"))
    (a,), (b,) = jax_stage.result.starts, torch_stage.result.starts
    assert a.steps == b.steps == 2
    np.testing.assert_allclose(a.trace, b.trace, rtol=1e-6)
    np.testing.assert_allclose(a.w, b.w, rtol=1e-6, atol=1e-9)
    assert np.isfinite(jax_stage.original_values[0])
    np.testing.assert_allclose(jax_stage.original_values, torch_stage.original_values,
                               rtol=1e-6)
    original = load_problem(problem, backend="jax").simulator(cache=False)
    value = original.evaluate(results["jax"].original_w[0], grad=False).value
    assert jax_stage.original_values[0] == pytest.approx(value, rel=1e-12)


@pytest.mark.slow
def test_cli_fit_with_a_strategy(tmp_path):
    from click.testing import CliRunner

    from petab_sciml.cli import main

    problem = _two_period_problem(tmp_path / "p")
    runner = CliRunner()
    done = runner.invoke(main, ["fit", str(problem), "--strategy", "curriculum", "--stages",
                                "2", "--steps", "0", "--starts", "1", "--in-process",
                                "--no-plots", "--out", str(tmp_path / "fit"), "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.output[done.output.index("{"):])
    assert [s["name"] for s in out["stages"]] == ["stage1", "stage2"]
    assert out["stages"][0]["original_objectives"] == out["stages"][1]["original_objectives"]
    usage = runner.invoke(main, ["fit", str(problem), "--stages", "2", "--out",
                                 str(tmp_path / "x")])
    assert usage.exit_code == 2 and "go with --strategy" in usage.output


CURRICULUM = {"split": [5], "steps": 2, "starts": 2, "seed": 1, "plots": False,
              "progress": False, "lr": 0.02}
"""A short curriculum fit of the two-period problem (two stages, two starts)."""


@pytest.fixture(scope="module")
def curriculum_in_process(tmp_path_factory):
    """(problem, output folder, result) of the :data:`CURRICULUM` fit in this process,
    shared by the tests that compare other runs of it with it (none may change it)."""
    tmp = tmp_path_factory.mktemp("curriculum")
    problem = _two_period_problem(tmp / "p")
    result = fit_strategy(problem, "curriculum", out=tmp / "full", in_process=True,
                          **CURRICULUM)
    return problem, tmp / "full", result


@pytest.mark.slow
def test_resume_keeps_finished_stages_and_ends_as_an_uninterrupted_fit(
        tmp_path, curriculum_in_process):
    """A fit stopped after its first stage (strategy.json lists one stage, the later
    stage folders absent) resumes from stage 2 and ends with the uninterrupted fit's
    parameters, bit for bit; other settings are refused by name."""
    import shutil

    from petab_sciml.fit import FitError

    problem, folder, full = curriculum_in_process
    settings = {**CURRICULUM, "in_process": True}
    out = tmp_path / "cut"
    shutil.copytree(folder, out)     # the same fit, then cut after stage 1
    summary = json.loads((out / "strategy.json").read_text())
    summary["stages"] = summary["stages"][:1]
    (out / "strategy.json").write_text(json.dumps(summary))
    shutil.rmtree(out / "stage2")
    with pytest.raises(FitError, match="these differ: seed"):
        fit_strategy(problem, "curriculum", out=out, resume=True, **{**settings, "seed": 2})
    resumed = fit_strategy(problem, "curriculum", out=out, resume=True, **settings)
    for a, b in zip(resumed.original_w, full.original_w, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(resumed.stages[0].original_values,
                                  full.stages[0].original_values)
    assert len(json.loads((out / "strategy.json").read_text())["stages"]) == 2


@pytest.mark.slow
def test_stages_run_on_a_dask_cluster_as_in_one_process(curriculum_in_process, tmp_path):
    """Each stage's starts go to Dask workers as a plain fit's do (here a LocalCluster of
    one worker process, both stages on it): the same stages as the fit in this process."""
    distributed = pytest.importorskip("distributed")
    problem, _, alone = curriculum_in_process
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = fit_strategy(problem, "curriculum", out=tmp_path / "cluster", client=client,
                              **CURRICULUM)
    assert [s.name for s in remote.stages] == ["stage1", "stage2"]
    for a, b in zip(remote.stages, alone.stages, strict=True):
        np.testing.assert_allclose(a.original_values, b.original_values, rtol=1e-10, atol=0)
        for ra, rb in zip(a.result.starts, b.result.starts, strict=True):
            assert ra.start == rb.start and ra.steps == rb.steps == CURRICULUM["steps"]
            np.testing.assert_allclose(ra.trace, rb.trace, rtol=1e-10, atol=0)
            np.testing.assert_allclose(ra.w, rb.w, rtol=1e-10, atol=1e-12)
    for a, b in zip(remote.original_w, alone.original_w, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)

"""``petab-sciml fit``: the same per-start results in this process, on a LocalCluster and on
a separately started ``dask scheduler`` + ``dask worker`` pair; an interrupted and resumed
fit equals an uninterrupted one; the outputs (best problem, results file, plots) hold
what they claim.

Runs on the bundled example with a few steps (the per-step cost is the example's
objective and gradient; recovery of its parameters is checked in
``test_fit_recovers.py``).  Worker processes share a JAX persistent compilation cache
in a temporary folder, so that each compiles the vmapped step at most once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")
pytest.importorskip("distributed")
pytest.importorskip("matplotlib")

from click.testing import CliRunner  # noqa: E402

from petab_sciml.cli import main  # noqa: E402
from petab_sciml.fit import FitError, FitResult, fit  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402
from tests.support.fit_outputs import saved_values  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"
BIN = Path(sys.executable).parent
COMMON = dict(starts=4, steps=8, lr=0.02, seed=3, batch=2, checkpoint_every=2, schedule="cosine")


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory):
    """A JAX persistent compilation cache shared with the worker processes started here
    (they inherit the environment)."""
    folder = tmp_path_factory.mktemp("jax_cache")
    saved = {k: os.environ.get(k) for k in ("JAX_COMPILATION_CACHE_DIR",
                                            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(folder)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    yield folder
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def in_process(tmp_path_factory, jax_cache) -> FitResult:
    out = tmp_path_factory.mktemp("fit") / "in_process"
    return fit(EXAMPLE, in_process=True, out=out, progress=False, **COMMON)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def scheduler_and_worker():
    """``dask scheduler`` and one ``dask worker`` started as separate processes."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(BIN / "dask")
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    try:
        time.sleep(1.0)
        procs.append(subprocess.Popen(
            [dask, "worker", address, "--nworkers", "1", "--nthreads", "1",
             "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(1, timeout=120)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _assert_same(a: FitResult, b: FitResult) -> None:
    assert [r.start for r in a.starts] == [r.start for r in b.starts] == [0, 1, 2, 3]
    np.testing.assert_allclose(b.objectives, a.objectives, rtol=1e-10, atol=0)
    for ra, rb in zip(a.starts, b.starts):
        np.testing.assert_allclose(rb.w, ra.w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(rb.trace, ra.trace, rtol=1e-10, atol=0)


@pytest.mark.slow
def test_in_process_local_cluster_and_scheduler_agree(in_process, tmp_path, jax_cache):
    assert np.isfinite(in_process.objectives).all()
    # every start improved on its start point
    for r in in_process.starts:
        assert r.trace.size == COMMON["steps"] and r.value < r.trace[0]
    local = fit(EXAMPLE, n_workers=2, out=tmp_path / "local", progress=False, plots=False,
                **COMMON)
    _assert_same(in_process, local)
    with scheduler_and_worker() as address:
        args = ["fit", str(EXAMPLE), "--scheduler", address, "--out", str(tmp_path / "dask"),
                "--json", "--no-plots"]
        for k, v in COMMON.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        run = CliRunner().invoke(main, args)
        assert run.exit_code == 0, run.output
    summary = json.loads(run.stdout)
    np.testing.assert_allclose(summary["objectives"], in_process.objectives, rtol=1e-10)
    saved = saved_values(in_process.files["best"])
    assert set(summary["parameters"]) == set(saved)
    for name, value in saved.items():
        np.testing.assert_allclose(summary["parameters"][name], value, rtol=1e-10,
                                   err_msg=name)
    assert [s["start"] for s in summary["starts"]] == [0, 1, 2, 3]
    assert all(s["seconds"] > 0 and s["steps"] == COMMON["steps"] for s in summary["starts"])
    _assert_same(in_process, FitResult.load(tmp_path / "dask" / "results.h5"))


@pytest.mark.slow
def test_one_start_needs_no_dask(tmp_path, monkeypatch, jax_cache):
    monkeypatch.setitem(sys.modules, "distributed", None)
    result = fit(EXAMPLE, starts=1, steps=2, out=tmp_path / "one", plots=False,
                 progress=False)
    assert result.best.steps == 2 and np.isfinite(result.best.value)


@pytest.mark.slow
def test_interrupted_then_resumed_equals_uninterrupted(in_process, tmp_path, monkeypatch):
    from petab_sciml import fit as fit_module

    out = tmp_path / "resumed"
    update = fit_module._Progress.update

    def interrupt_at_step_5(self, starts, step, losses):
        update(self, starts, step, losses)
        if step == 5:
            raise KeyboardInterrupt   # as Ctrl-C during the step loop

    monkeypatch.setattr(fit_module._Progress, "update", interrupt_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        fit(EXAMPLE, in_process=True, out=out, progress=False, **COMMON)
    monkeypatch.setattr(fit_module._Progress, "update", update)
    saved = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert saved == [f"start_{k:04d}.npz" for k in range(2)]
    # the first task (starts 0, 1) stopped at step 5; the second never ran
    with np.load(out / "checkpoints" / "start_0000.npz") as z:
        assert int(z["step"]) == 5
    with pytest.raises(FitError, match="lr"):
        fit(EXAMPLE, in_process=True, out=out, progress=False, resume=True,
            **{**COMMON, "lr": 0.5})
    resumed = fit(EXAMPLE, in_process=True, out=out, progress=False, resume=True, **COMMON)
    _assert_same(in_process, resumed)


@pytest.mark.slow
def test_ctrl_c_checkpoints_and_exits_cleanly_then_resume_finishes(tmp_path, jax_cache):
    out = tmp_path / "cli"
    cmd = [str(BIN / "petab-sciml"), "fit", str(EXAMPLE), "--out", str(out), "--starts", "2",
           "--in-process", "--steps", "100000", "--checkpoint-every", "1", "--no-plots"]
    # Ctrl-C as at a terminal, however this suite was started: a suite run in the
    # background (`make test &`, nohup) hands its children SIGINT ignored, and a Python
    # started with SIGINT ignored keeps ignoring it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = out / "checkpoints" / "start_0000.npz"
    deadline = time.monotonic() + 300
    while not first.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first.is_file(), proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr and "--resume" in stderr
    assert "Traceback" not in stderr
    with np.load(first) as z:
        step = int(z["step"])
        trace = z["trace"]
    assert step >= 1 and trace.size == step
    # resume to a few steps beyond: the run ends with the full trace
    cmd[cmd.index("100000")] = str(step + 2)
    done = subprocess.run(cmd + ["--resume", "--json"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = FitResult.load(out / "results.h5")
    assert [r.steps for r in result.starts] == [step + 2] * 2
    np.testing.assert_array_equal(result.starts[0].trace[:step], trace)


@pytest.mark.slow
def test_outputs_best_problem_results_file_and_plots(in_process):
    import matplotlib.pyplot as plt

    from petab_sciml.fit import plots
    from petab_sciml.problem import validate_problem

    files = in_process.files
    # the best start as a PEtab SciML problem that validates and reloads to its values
    best_yaml = files["best"]
    report = validate_problem(best_yaml)
    assert not report.issues.errors, report.issues.errors
    reloaded = load_problem(best_yaml, backend="jax")
    np.testing.assert_allclose(reloaded.plan.w0, in_process.best.w, rtol=1e-15, atol=0)
    assert reloaded.objective(reloaded.plan.w0) == pytest.approx(in_process.best.value,
                                                                 rel=1e-9)
    # the results file holds every start
    loaded = FitResult.load(files["results"])
    np.testing.assert_array_equal(loaded.objectives, in_process.objectives)
    for a, b in zip(loaded.starts, in_process.starts):
        np.testing.assert_array_equal(a.trace, b.trace)
        np.testing.assert_array_equal(a.w, b.w)
        assert a.optimizer_state.keys() == b.optimizer_state.keys() and a.optimizer_state
        for name in a.optimizer_state:
            np.testing.assert_array_equal(a.optimizer_state[name], b.optimizer_state[name])

    _assert_named_as_saved(files["results"], best_yaml, in_process.best.start)
    saved = saved_values(best_yaml)
    for named in (loaded.parameters(), in_process.parameters()):   # read back, in memory
        assert set(named) == set(saved)
        for name, value in saved.items():
            np.testing.assert_array_equal(named[name], value, err_msg=name)

    # waterfall: K points, the sorted final objectives relative to the best (+1, log axis)
    fig = plots.waterfall(in_process)
    (ax,) = fig.axes
    ys = np.concatenate([line.get_ydata() for line in ax.get_lines()])
    assert ys.size == COMMON["starts"] and ax.get_yscale() == "log"
    ranked = np.sort(in_process.objectives)
    np.testing.assert_allclose(ys, ranked - ranked[0] + 1.0, rtol=1e-12)
    plt.close(fig)
    # loss curves: one line per start holding its trace as the offset to the lowest
    # loss (+1, log axis); the best start drawn last, labelled and thickest
    fig = plots.loss_curves(in_process)
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert len(lines) == COMMON["starts"] and ax.get_yscale() == "log"
    lowest = min(r.trace.min() for r in in_process.starts)
    by_label = {line.get_label(): line for line in lines}
    for r in in_process.starts:
        label = f"start {r.start}" + (" (best)" if r.start == in_process.best.start else "")
        np.testing.assert_allclose(by_label[label].get_ydata(), r.trace - lowest + 1.0,
                                   rtol=1e-15)
    assert lines[-1].get_label() == f"start {in_process.best.start} (best)"
    assert lines[-1].get_linewidth() > max(line.get_linewidth() for line in lines[:-1])
    plt.close(fig)
    # fits: one figure for the experiment, one panel per observable, each holding the
    # measurements, the simulation at the best start and a band of one noise sd
    problem = load_problem(EXAMPLE, backend="jax")
    plan = problem.plan
    evaluation = problem.simulator(cache=False).evaluate(in_process.best.w, grad=False)
    figures = plots.fits(plan, evaluation)
    assert list(figures) == ["fit_lv_experiment"]
    fig = figures["fit_lv_experiment"]
    assert len(fig.axes) == 4          # a fit and a residual panel per observable
    m = plan.measurements
    for ax, res_ax, obs in zip(fig.axes[:2], fig.axes[2:], ("prey_obs", "predator_obs")):
        idx = np.flatnonzero(m.observable == plan.observable_ids.index(obs))
        idx = idx[np.argsort(m.time[idx])]
        data, sim = ax.get_lines()
        np.testing.assert_array_equal(data.get_xdata(), m.time[idx])
        np.testing.assert_array_equal(data.get_ydata(), m.value[idx])
        np.testing.assert_allclose(sim.get_ydata(), evaluation.simulations[idx], rtol=1e-12)
        (band,) = ax.collections
        top = band.get_paths()[0].vertices[:, 1].max()
        assert top == pytest.approx((evaluation.simulations[idx] + 0.05).max(), rel=1e-9)
        # residuals: (measurement - simulation) / sd, the example's noise sd being 0.05
        (res,) = [line for line in res_ax.get_lines() if line.get_marker() == "o"]
        np.testing.assert_array_equal(res.get_xdata(), m.time[idx])
        np.testing.assert_allclose(res.get_ydata(),
                                   (m.value[idx] - evaluation.simulations[idx]) / 0.05,
                                   rtol=1e-12)
    plt.close(fig)
    # units where the model declares them (the example declares none)
    from petab_sciml.fit import model_units

    assert model_units(problem) == (None, {})
    fig = plots.fits(plan, evaluation, units=("day", {"prey_obs": "mmol"}))[
        "fit_lv_experiment"]
    assert [ax.get_ylabel() for ax in fig.axes[:2]] == ["prey_obs [mmol]", "predator_obs"]
    assert fig.axes[2].get_xlabel() == "time [day]"
    plt.close(fig)
    # with a dense simulation: the curve on >= 500 times from 0 to the last measurement,
    # through the simulated values at the measurement times (drawn as markers)
    from petab_sciml.simulation.dense import dense_plan
    from petab_sciml.simulation.objective import Simulator

    grid = dense_plan(problem.data, plan)
    dense_ev = Simulator(grid, "jax", cache=False).evaluate(in_process.best.w, grad=False)
    fig = plots.fits(plan, evaluation, dense=(grid, dense_ev))["fit_lv_experiment"]
    for ax, obs in zip(fig.axes[:2], ("prey_obs", "predator_obs")):
        idx = np.flatnonzero(m.observable == plan.observable_ids.index(obs))
        idx = idx[np.argsort(m.time[idx])]
        data, curve, markers = ax.get_lines()
        t = curve.get_xdata()
        assert t.size >= 500 and t[0] == 0.0 and t[-1] == m.time[idx].max()
        np.testing.assert_allclose(np.interp(m.time[idx], t, curve.get_ydata()),
                                   evaluation.simulations[idx], rtol=1e-9)
        np.testing.assert_allclose(markers.get_ydata(), evaluation.simulations[idx],
                                   rtol=1e-12)
    plt.close(fig)
    # the learned term: net1(prey, predator) -> gamma as a heat map over the range the
    # trajectories reach, each value the PyTorch network's at that grid point
    pytest.importorskip("torch")
    from petab_sciml.backends.torch import BACKEND as TORCH
    from petab_sciml.fit import learned_terms

    (term,) = learned_terms(problem, problem.simulator(cache=False), in_process.best.w)
    assert term["inputs"] == ["prey", "predator"] and list(term["outputs"]) == ["net1_gamma"]
    prey = grid.measurements.observable == grid.observable_ids.index("prey_obs")
    np.testing.assert_allclose(term["seen"][:, 0], dense_ev.simulations[prey], rtol=1e-12)
    fig = plots.learned_terms([term])["term_net1"]
    mesh = fig.axes[0].collections[0]
    xs, ys = np.meshgrid(*term["axes"])
    torch_net = TORCH.set_parameters(TORCH.build(plan.networks[0].network, dtype="float64"),
                                     plan.unpack(in_process.best.w)["nets"]["net1"])
    (want,) = TORCH.forward(torch_net, [np.stack([xs.ravel(), ys.ravel()], axis=1)])
    np.testing.assert_allclose(np.asarray(mesh.get_array()).ravel(),
                               np.asarray(want).ravel(), rtol=1e-12)
    assert xs.min() == term["seen"][:, 0].min() and ys.max() == term["seen"][:, 1].max()
    plt.close(fig)
    for name in ("waterfall", "loss", "fit_lv_experiment", "term_net1"):
        assert files[name].stat().st_size > 1000


def _assert_named_as_saved(results: Path, best_yaml: Path, best: int) -> None:
    """``results.h5`` read by parameter name only (h5py, no code of ours) holds the
    values ``problem.save`` wrote for the best start, per start and in the table."""
    import h5py

    saved = saved_values(best_yaml)
    with h5py.File(results, "r") as h5:
        named = h5[f"starts/{best}/parameters"]
        assert set(named) == set(saved)
        for name, value in saved.items():
            np.testing.assert_array_equal(named[name][()], value, err_msg=name)
        table = h5["parameters"]
        ids = [str(x) for x in table.attrs["ids"]]
        column = list(table.attrs["starts"]).index(best)
        rows = dict(zip(ids, table["table"][:, column]))
        assert len(rows) == sum(np.size(v) for v in saved.values())
        for name, value in saved.items():
            if np.ndim(value) == 0:
                assert rows[name] == value, name
            else:
                for index in np.ndindex(*np.shape(value)):
                    key = f"{name}[{', '.join(map(str, index))}]"
                    assert rows[key] == value[index], key


@pytest.mark.slow
def test_torch_fit_follows_torch_optim(tmp_path):
    """Two starts of three steps, with an exponential learning-rate schedule, as a
    plain torch.optim loop with ExponentialLR trains them."""
    pytest.importorskip("torch")
    import torch

    from petab_sciml.fit.starts import draw_starts

    result = fit(EXAMPLE, backend="torch", starts=2, steps=3, lr=0.02, seed=1,
                 in_process=True, out=tmp_path / "torch", plots=False, progress=False,
                 schedule="exponential", lr_decay=0.5)
    problem = load_problem(EXAMPLE, backend="torch")
    for r, w0 in zip(result.starts, draw_starts(problem, 1, 2, None)):
        module = problem.model(problem.plan.unpack(w0), compile=False)
        module.train()
        opt = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=0.02)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
        trace = []
        for _ in range(3):
            opt.zero_grad()
            loss = module()
            loss.backward()
            opt.step()
            sched.step()
            module.project_()
            trace.append(loss.item())
        np.testing.assert_allclose(r.trace, trace, rtol=1e-10)
        np.testing.assert_allclose(r.w, problem.plan.pack(module.values()), rtol=1e-10)
        # the optimizer state by parameter name, as torch.optim holds it
        for name, p in module.named_parameters():
            if p.requires_grad:
                np.testing.assert_allclose(r.optimizer_state[f"{name}.exp_avg_sq"],
                                           opt.state[p]["exp_avg_sq"].numpy(), rtol=1e-8)
    # by name, as the JAX fit writes them (test_outputs_best_problem_results_file_and_plots)
    best_yaml = problem.save(problem.plan.unpack(result.best.w), tmp_path / "best")
    _assert_named_as_saved(tmp_path / "torch" / "results.h5", best_yaml, result.best.start)


def test_settings_are_checked(tmp_path):
    with pytest.raises(FitError, match="unknown optimizer"):
        fit(EXAMPLE, optimizer="newton", out=tmp_path / "x")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "something").write_text("x")
    with pytest.raises(FitError, match="not empty.*--force"):
        fit(EXAMPLE, out=tmp_path / "busy", starts=1, steps=1)
    with pytest.raises(FitError, match="nothing to resume"):
        fit(EXAMPLE, out=tmp_path / "empty", resume=True, starts=1, steps=1)
    shutil.rmtree(tmp_path / "busy")

"""The core data layout (:mod:`petab_sciml.simulation.layout`) equals, array for array
(values and dtypes), what each backend's executor builds for itself, on suite problem
cases, the example, the benchmark-like and scaled problems and two problems of ours
(placeholders, several noise models, priors, multi-period experiments; pre-equilibration
and steady-state measurements).

The backends' own builders are reached through :func:`torch_arrays` and
:func:`jax_arrays` only: each runs the executor's data-preparation method on a stand-in
holding just what that method reads.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.support.suite import REPO, SUITE

pytest.importorskip("libsbml")
pytest.importorskip("sympy")

SUITE_CASES = ["sciml_problem_import/003", "sciml_problem_import/014",
               "sciml_problem_import/016", "sciml_problem_import/032",
               "sciml_problem_import/038", "initialization/001"]


# --------------------------------------------------------------------------- the problems
def _problem_paths(folder: Path) -> list[tuple[str, Path]]:
    sys.path.insert(0, str(REPO))
    from tests.simulation.test_steady_state import write_problem as write_steady_problem
    from tests.simulation.test_synthetic_problem import write_decay_problem
    from tests.support.problems.five_state import write_five_state
    from tests.support.problems.scaled_lv import write_scaled_lv

    paths = [("example", REPO / "examples" / "lotka_volterra_ude" / "problem.yaml")]
    paths += [(f"benchmark_like/{p.parent.name}", p) for p in
              sorted((REPO / "tests" / "problems" / "benchmark_like").glob("*/problem.yaml"))]
    paths += [("scaled/lv_10", write_scaled_lv(folder / "lv", 8, n_two_period=2)),
              ("scaled/five_state_6", write_five_state(folder / "five", 6)),
              ("decay", write_decay_problem(folder / "decay")),
              ("steady", write_steady_problem(folder / "steady"))]
    if SUITE is not None and SUITE.is_dir():
        paths += [(case, SUITE / "test_cases" / case / "petab" / "problem.yaml")
                  for case in SUITE_CASES]
    return paths


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, object]:
    import warnings

    from petab_sciml.problem import load_problem

    folder = tmp_path_factory.mktemp("layout")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, path in _problem_paths(folder):
            out[name] = load_problem(path, backend="torch").plan
    return out


# --------------------------------------------------------------------------- the backends
def torch_arrays(plan) -> tuple[dict[str, np.ndarray], SimpleNamespace]:
    """PyTorch's data arrays of ``plan`` (and the stand-in with what it set)."""
    from petab_sciml.backends.torch.simulation import TorchExecutor

    stub = SimpleNamespace(plan=plan)
    TorchExecutor._prepare(stub)
    return stub._numpy_data, stub


def jax_arrays(plan) -> tuple[dict[str, np.ndarray], SimpleNamespace]:
    """JAX's data arrays of ``plan`` (with ``free``, which forward-ad adds)."""
    from petab_sciml.backends.jax.simulation import JaxExecutor

    steady = any(p.steady_state for e in plan.experiments for p in e.periods)
    stub = SimpleNamespace(plan=plan, steady_state=steady, sensitivity="forward-ad")
    return JaxExecutor._data_arrays(stub), stub


# --------------------------------------------------------------------------- the layout,
# named as each backend names it
def _measurement_arrays(layout) -> dict[str, np.ndarray]:
    out = {"m_group": layout.measurement_group, "m_time": layout.measurement_time,
           "m_value": layout.measurement_value, "m_opt": layout.obs_par_theta,
           "m_opv": layout.obs_par_value, "m_npt": layout.noise_par_theta,
           "m_npv": layout.noise_par_value, "m_order": layout.table_order}
    out.update({f"obs_{i}": rows for i, rows in layout.observable_rows})
    out.update({f"llh_{tr}_{di}": rows for tr, di, rows in layout.likelihood_groups})
    out.update({f"prior_{i}": idx for i, idx in enumerate(layout.prior_index)})
    out.update({f"arr_{j}_{arg}": data for j, arg, data in layout.array_inputs})
    return out


def _torch_named(plan, layout) -> dict[str, np.ndarray]:
    out = _measurement_arrays(layout)
    out.update({"theta0": plan.theta0, "mech_theta": plan.mech_theta_index,
                "free": plan.free_index, "m_x": layout.measurement_point,
                "m_th": layout.measurement_period})
    for g, count in enumerate(layout.group_theta_count.tolist()):
        out[f"g{g}_tgt"] = layout.group_theta_target[g, :count]
        out[f"g{g}_src"] = layout.group_theta_source[g, :count]
    for e, periods in enumerate(layout.periods):
        for k, p in enumerate(periods):
            key = f"e{e}p{k}"
            out.update({f"{key}_ts": p.save_times, f"{key}_grid": p.grid,
                        f"{key}_where": p.grid_index, f"{key}_th_t": p.theta_target,
                        f"{key}_th_s": p.theta_source, f"{key}_st_t": p.state_target,
                        f"{key}_st_s": p.state_source})
    return out


def _jax_named(plan, layout, steady: bool) -> dict[str, np.ndarray]:
    out = _measurement_arrays(layout)
    out.update({"free": plan.free_index, "mech_theta": plan.mech_theta_index,
                "m_x": layout.measurement_point_batched,
                "m_th": layout.measurement_period_batched, "g_t0": layout.group_t0,
                "g_th_tgt": layout.group_theta_target, "g_th_src": layout.group_theta_source,
                "chg_const": layout.change_constant, "chg_formula": layout.change_is_formula,
                "chg_pos": layout.change_formula_index})
    for b, batch in enumerate(layout.batches):
        out.update({f"b{b}_start": batch.start, f"b{b}_end": batch.end,
                    f"b{b}_ts": batch.save_times, f"b{b}_th_tgt": batch.theta_target,
                    f"b{b}_th_src": batch.theta_source, f"b{b}_st_tgt": batch.state_target,
                    f"b{b}_st_src": batch.state_source, f"b{b}_group": batch.group})
        if steady:
            out[f"b{b}_tinf"] = batch.at_steady_state
    return out


def _assert_same(expected: dict, actual: dict, where: str) -> None:
    assert sorted(expected) == sorted(actual), where
    for key, want in expected.items():
        want, got = np.asarray(want), np.asarray(actual[key])
        assert got.dtype == want.dtype, (where, key, got.dtype, want.dtype)
        assert got.shape == want.shape, (where, key, got.shape, want.shape)
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), (where, key)


# --------------------------------------------------------------------------- tests
def test_layout_equals_torch(plans):
    pytest.importorskip("torch")
    from petab_sciml.simulation.layout import data_layout

    for name, plan in plans.items():
        layout = data_layout(plan)
        arrays, stub = torch_arrays(plan)
        _assert_same(arrays, _torch_named(plan, layout), name)
        assert stub.n_out_max == layout.n_out_max, name
        assert stub.array_keys == [(j, arg) for j, arg, _ in layout.array_inputs], name
        assert stub.obs_rows == [(i, f"obs_{i}") for i, _ in layout.observable_rows], name
        assert stub.llh_groups == [(tr, di, f"llh_{tr}_{di}")
                                   for tr, di, _ in layout.likelihood_groups], name
        for e, periods in enumerate(layout.periods):
            assert stub.periods[e] == [
                {"key": f"e{e}p{k}", "start": p.start, "end": p.end, "n_times": p.n_times,
                 "steady": p.steady_state, "n_inf": p.n_inf}
                for k, p in enumerate(periods)], (name, e)


def test_layout_equals_jax(plans):
    pytest.importorskip("jax")
    pytest.importorskip("diffrax")
    from petab_sciml.simulation.layout import data_layout

    for name, plan in plans.items():
        layout = data_layout(plan)
        arrays, stub = jax_arrays(plan)
        _assert_same(arrays, _jax_named(plan, layout, stub.steady_state), name)
        assert stub.batches == [(b.n_periods, b.experiments.tolist(), b.n_times)
                                for b in layout.batches], name
        assert stub.obs_rows == [(i, f"obs_{i}") for i, _ in layout.observable_rows], name
        assert stub.llh_groups == [(tr, di, f"llh_{tr}_{di}")
                                   for tr, di, _ in layout.likelihood_groups], name


def test_problems_cover_the_layout(plans):
    """The problems exercise what the layout handles: steady states, several periods,
    placeholders, several noise models, priors, array inputs and condition formulas."""
    from petab_sciml.simulation.layout import data_layout

    layouts = [data_layout(p) for p in plans.values()]
    assert any(b.at_steady_state.any() for lay in layouts for b in lay.batches)
    assert any(b.n_periods > 1 for lay in layouts for b in lay.batches)
    assert any((lay.obs_par_theta >= 0).any() and (lay.noise_par_theta < 0).any()
               for lay in layouts)
    assert any(len(lay.likelihood_groups) > 1 for lay in layouts)
    assert any(lay.prior_index for lay in layouts)
    assert any(lay.change_is_formula.any() and not lay.change_is_formula.all()
               for lay in layouts)
    if SUITE is not None and SUITE.is_dir():
        assert any(lay.array_inputs for lay in layouts)
        assert any(lay.group_theta_target.shape[1] for lay in layouts)

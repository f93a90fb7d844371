"""The core data layout (:mod:`petab_sciml.simulation.layout`) against what the plan
says, entry by entry, on suite problem cases, the example, the benchmark-like and scaled
problems and two problems of ours (placeholders, several noise models, priors,
multi-period experiments; pre-equilibration and steady-state measurements): every
measurement reads, in both solution layouts, the output at its own time in its own
experiment and period; the row groups partition the measurements; the change tables
hold the plan's changes.  Last, each backend's data are the core's arrays, named.
"""

from __future__ import annotations

import sys
from pathlib import Path

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
    benchmark_like = sorted((REPO / "tests" / "support" / "problems" / "benchmark_like")
                            .glob("*/problem.yaml"))
    assert benchmark_like, "no benchmark-like problems found"
    paths += [(f"benchmark_like/{p.parent.name}", p) for p in benchmark_like]
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


@pytest.fixture(scope="module")
def layouts(plans) -> dict[str, object]:
    from petab_sciml.simulation.layout import data_layout

    return {name: data_layout(plan) for name, plan in plans.items()}


def _measured(plan):
    """Per measurement: experiment, period, time (from the plan)."""
    m = plan.measurements
    return list(zip(m.experiment.tolist(), m.period.tolist(), m.time.tolist()))


def _expected_time(plan, e: int, k: int, t: float) -> float:
    """Where the solve saves measurement time ``t`` of period ``(e, k)``: ``inf`` for a
    steady-state measurement, else ``t`` within the period."""
    p = plan.experiments[e].periods[k]
    return t if not np.isfinite(t) else float(np.clip(t, p.start, p.end))


# --------------------------------------------------------------------------- tests
def test_sequential_points_read_their_own_time(plans, layouts):
    """Sequential layout: the outputs of every period concatenated (its finite times,
    then one per steady-state measurement) hold, at ``measurement_point``, the
    measurement's own time; ``measurement_period`` is its own period."""
    for name, plan in plans.items():
        lay = layouts[name]
        times, owner = [], []
        for e, periods in enumerate(lay.periods):
            assert len(periods) == len(plan.experiments[e].periods), name
            for k, p in enumerate(periods):
                assert p.n_times + p.n_inf == len(plan.experiments[e].periods[k].times)
                times += p.save_times[: p.n_times].tolist() + [np.inf] * p.n_inf
                owner.append((e, k))
        for i, (e, k, t) in enumerate(_measured(plan)):
            assert owner[lay.measurement_period[i]] == (e, k), (name, i)
            assert times[lay.measurement_point[i]] == _expected_time(plan, e, k, t), (name, i)
            assert lay.measurement_group[i] == plan.experiments[e].group, (name, i)


def test_periods_match_the_plan(plans, layouts):
    """Each period: its bounds, a steady-state period's end at its last finite time, the
    output times padded with the end, the grid of distinct times and its changes."""
    for name, plan in plans.items():
        lay = layouts[name]
        for exp, periods in zip(plan.experiments, lay.periods):
            for src, p in zip(exp.periods, periods):
                finite = src.times[np.isfinite(src.times)]
                end = (float(finite[-1]) if finite.size else src.start) \
                    if src.steady_state else src.end
                assert (p.start, p.end, p.steady_state) == (src.start, end,
                                                            src.steady_state), name
                assert p.save_times.shape == (lay.n_out_max,), name
                assert p.save_times[: p.n_times].tolist() == finite.tolist(), name
                assert (p.save_times[p.n_times:] == end).all(), name
                assert p.grid.tolist() == sorted({src.start, end, *finite.tolist()}), name
                assert p.grid[p.grid_index].tolist() == finite.tolist(), name
                assert list(zip(p.theta_target.tolist(), p.theta_source.tolist())) \
                    == [tuple(c) for c in src.theta_changes], name
                assert list(zip(p.state_target.tolist(), p.state_source.tolist())) \
                    == [tuple(c) for c in src.state_changes], name
        assert lay.n_out_max == max(1, max(len(p.times) for e in plan.experiments
                                           for p in e.periods)), name


def test_batched_points_read_their_own_time(plans, layouts):
    """Batched layout: experiments grouped by number of periods; the batches' output
    times (C order, concatenated) hold, at ``measurement_point_batched``, the
    measurement's time, flagged ``at_steady_state`` exactly for steady-state ones;
    ``measurement_period_batched`` is its own period."""
    for name, plan in plans.items():
        lay = layouts[name]
        assert sorted(e for b in lay.batches for e in b.experiments.tolist()) \
            == list(range(len(plan.experiments))), name
        times, at_ss, owner = [], [], []
        for b in lay.batches:
            E, P, N = len(b.experiments), b.n_periods, b.n_times
            assert b.save_times.shape == b.at_steady_state.shape == (E, P, N), name
            for i, e in enumerate(b.experiments.tolist()):
                exp = plan.experiments[e]
                assert len(exp.periods) == P and b.group[i] == exp.group, name
                for k, p in enumerate(exp.periods):
                    assert (b.start[i, k], b.end[i, k]) == (p.start, p.end), name
                    owner.append((e, k))
                    assert _changes(b.theta_target[i, k], b.theta_source[i, k],
                                    len(plan.theta_ids)) == [tuple(c) for c in
                                                             p.theta_changes], name
                    assert _changes(b.state_target[i, k], b.state_source[i, k],
                                    len(plan.state_ids)) == [tuple(c) for c in
                                                             p.state_changes], name
            times += b.save_times.ravel().tolist()
            at_ss += b.at_steady_state.ravel().tolist()
        for i, (e, k, t) in enumerate(_measured(plan)):
            j = lay.measurement_point_batched[i]
            assert owner[lay.measurement_period_batched[i]] == (e, k), (name, i)
            assert at_ss[j] == (not np.isfinite(t)), (name, i)
            if np.isfinite(t):
                assert times[j] == t, (name, i)


def _changes(target, source, dropped: int) -> list[tuple[int, int]]:
    """(target, source) pairs of a padded row: padding targets ``dropped``, sources 0."""
    pairs = list(zip(target.tolist(), source.tolist()))
    kept = [c for c in pairs if c[0] != dropped]
    assert pairs[len(kept):] == [(dropped, 0)] * (len(pairs) - len(kept))
    return kept


def test_measurement_groups_partition_the_table(plans, layouts):
    """Observable rows and likelihood groups partition the measurements, each row of
    its own observable / noise model, ascending; ``table_order`` undoes the observable
    grouping; measurement values and placeholders are the plan's."""
    for name, plan in plans.items():
        lay, m = layouts[name], plan.measurements
        M = m.size
        for i, rows in lay.observable_rows:
            assert (m.observable[rows] == i).all() and (np.diff(rows) > 0).all(), name
        grouped = np.concatenate([r for _, r in lay.observable_rows] or [np.zeros(0, int)])
        assert sorted(grouped.tolist()) == list(range(M)), name
        assert grouped[lay.table_order].tolist() == list(range(M)), name
        seen = []
        for tr, di, rows in lay.likelihood_groups:
            assert (m.transform[rows] == tr).all() and (m.distribution[rows] == di).all()
            seen += rows.tolist()
        assert sorted(seen) == list(range(M)), name
        assert lay.measurement_value.tolist() == m.value.tolist(), name
        np.testing.assert_array_equal(lay.obs_par_theta, m.obs_par_theta)
        np.testing.assert_array_equal(lay.noise_par_value, m.noise_par_value)
        assert [p.tolist() for p in lay.prior_index] == [list(idx) for _, idx, *_ in
                                                         plan.priors], name


def test_groups_and_changes_match_the_plan(plans, layouts):
    """Initial-condition groups' first-period changes (padded rows), array inputs per
    group, and the change values: numbers in the table, formulas numbered in order."""
    for name, plan in plans.items():
        lay = layouts[name]
        assert lay.group_t0.tolist() == plan.group_t0.tolist(), name
        for g, changes in enumerate(plan.group_theta_changes):
            assert lay.group_theta_count[g] == len(changes), name
            assert _changes(lay.group_theta_target[g], lay.group_theta_source[g],
                            len(plan.theta_ids)) == [tuple(c) for c in changes], name
        inputs = [(j, inp.arg, inp.data) for j, net in enumerate(plan.networks)
                  for inp in net.inputs if inp.kind == "array"]
        assert [(j, a) for j, a, _ in lay.array_inputs] == [(j, a) for j, a, _ in inputs]
        for (_, _, got), (_, _, want) in zip(lay.array_inputs, inputs):
            assert got.shape[0] == len(plan.groups_conditions), name
            np.testing.assert_array_equal(got, want)
        n_formula = 0
        for c, expr in enumerate(plan.change_exprs):
            if getattr(expr, "is_number", False):
                assert not lay.change_is_formula[c] and lay.change_constant[c] == float(expr)
            else:
                assert lay.change_is_formula[c] and lay.change_constant[c] == 0.0, name
                assert lay.change_formula_index[c] == n_formula, name
                n_formula += 1


def test_dtypes(layouts):
    """Integer arrays int64, real arrays float64, as the backends take them."""
    for name, lay in layouts.items():
        for key in ("measurement_group", "measurement_point", "measurement_period",
                    "measurement_point_batched", "measurement_period_batched",
                    "obs_par_theta", "noise_par_theta", "table_order",
                    "group_theta_target", "group_theta_source", "change_formula_index"):
            assert getattr(lay, key).dtype == np.int64, (name, key)
        for key in ("measurement_time", "measurement_value", "obs_par_value",
                    "noise_par_value", "group_t0", "change_constant"):
            assert getattr(lay, key).dtype == np.float64, (name, key)


def test_problems_cover_the_layout(layouts):
    """The problems exercise what the layout handles: steady states, several periods,
    placeholders, several noise models, priors, array inputs and condition formulas."""
    layouts = list(layouts.values())
    assert any(b.at_steady_state.any() for lay in layouts for b in lay.batches)
    assert any(b.n_periods > 1 for lay in layouts for b in lay.batches)
    assert any(p.steady_state and p.n_inf for lay in layouts for e in lay.periods
               for p in e)
    assert any((lay.obs_par_theta >= 0).any() and (lay.noise_par_theta < 0).any()
               for lay in layouts)
    assert any(len(lay.likelihood_groups) > 1 for lay in layouts)
    assert any(lay.prior_index for lay in layouts)
    assert any(lay.change_is_formula.any() and not lay.change_is_formula.all()
               for lay in layouts)
    if SUITE is not None and SUITE.is_dir():
        assert any(lay.array_inputs for lay in layouts)
        assert any(lay.group_theta_target.shape[1] for lay in layouts)


# --------------------------------------------------------------------------- backends
def test_backends_read_the_core_arrays(plans, layouts):
    """Each backend's data are the core layout's arrays (the same objects), named."""
    pytest.importorskip("torch")
    from petab_sciml.backends.jax.data_layout import named_arrays
    from petab_sciml.backends.torch.layout import named_layout

    for name, plan in plans.items():
        lay = layouts[name]
        torch_d = named_layout(plan, lay).arrays
        jax_d = named_arrays(plan, lay, steady_state=True, forward_ad=True).arrays
        assert torch_d["m_x"] is lay.measurement_point, name
        assert jax_d["m_x"] is lay.measurement_point_batched, name
        for d in (torch_d, jax_d):
            assert d["m_order"] is lay.table_order and d["m_time"] is lay.measurement_time
        for b, batch in enumerate(lay.batches):
            assert jax_d[f"b{b}_ts"] is batch.save_times, name
            assert jax_d[f"b{b}_tinf"] is batch.at_steady_state, name
        for e, periods in enumerate(lay.periods):
            for k, p in enumerate(periods):
                assert torch_d[f"e{e}p{k}_ts"] is p.save_times, name

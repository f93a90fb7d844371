"""The JAX fit step and final evaluation are kept in the export cache: a second fit of
the same problem (a resumed fit, a new process, a Dask worker) loads them instead of
tracing, and trains as the first did, as a fit with the cache switched off does, and as
a plain optax loop over the native model does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
optax = pytest.importorskip("optax")

from petab_sciml.backends.jax import fit as jax_fit  # noqa: E402
from petab_sciml.fit import fit  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"
SETTINGS = dict(starts=2, steps=3, lr=0.02, seed=1, in_process=True, plots=False,
                progress=False)


@pytest.mark.slow
def test_second_fit_loads_the_step_and_trains_as_without_the_cache(tmp_path, monkeypatch):
    import equinox as eqx
    import jax

    from petab_sciml.backends.jax.problem import from_vector, loss, project
    from petab_sciml.fit.starts import draw_starts
    from petab_sciml.problem import load_problem

    monkeypatch.setenv("PETAB_SCIML_CACHE_DIR", str(tmp_path / "cache"))
    caches = []
    make_cache = jax_fit._export_cache
    monkeypatch.setattr(jax_fit, "_export_cache",
                        lambda: caches.append(make_cache()) or caches[-1])
    monkeypatch.setattr(jax_fit, "_STEPS", {})
    first = fit(EXAMPLE, out=tmp_path / "first", **SETTINGS)
    jax_fit._STEPS.clear()   # as in a new process: the step is built again
    second = fit(EXAMPLE, out=tmp_path / "second", **SETTINGS)
    assert [c.events for c in caches] == [["exported", "exported"], ["loaded", "loaded"]]
    jax_fit._STEPS.clear()
    monkeypatch.setenv("PETAB_SCIML_CACHE", "0")
    uncached = fit(EXAMPLE, out=tmp_path / "uncached", **SETTINGS)
    assert caches[2] is None
    for a, b, c in zip(first.starts, second.starts, uncached.starts, strict=True):
        np.testing.assert_array_equal(b.trace, a.trace)
        np.testing.assert_array_equal(b.w, a.w)
        assert b.value == a.value
        np.testing.assert_allclose(c.trace, a.trace, rtol=1e-12, atol=0)
        np.testing.assert_allclose(c.w, a.w, rtol=1e-12, atol=1e-14)

    # the same three Adam steps, one start at a time, with the native model
    problem = load_problem(EXAMPLE, backend="jax")
    spec = problem.model().spec
    opt = optax.adam(0.02)
    value_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))
    for r, w0 in zip(second.starts, draw_starts(problem, 1, 2, None), strict=True):
        model = from_vector(spec, w0)
        state = opt.init(eqx.filter(model, eqx.is_inexact_array))
        trace = []
        for _ in range(SETTINGS["steps"]):
            (value, _), grads = value_and_grad(model)
            updates, state = opt.update(grads, state, model)
            model = project(eqx.apply_updates(model, updates))
            trace.append(float(value))
        # one start alone against starts solved as one vmapped system: equal within
        # the solver's tolerance (rtol 1e-8 by default)
        np.testing.assert_allclose(r.trace, trace, rtol=1e-6)
        w = problem.plan.pack(jax.device_get(model.values()))
        # Adam divides by the gradient's root mean square: an element whose gradient is
        # near zero moves by up to lr per step whatever its size, so the solver's
        # tolerance shows up there as an absolute difference of about lr * 1e-6
        np.testing.assert_allclose(r.w, w, rtol=1e-6, atol=1e-7)

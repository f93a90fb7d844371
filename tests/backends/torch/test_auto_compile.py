"""The numpy API's PyTorch executor starts eager and compiles once that pays
(``backends/torch/auto_compile.py``).

* By default a short session stays eager (a few calls never compile).
* Past the threshold the solves compile, and the compiled objective and gradient
  agree with eager solves (``compile=False``, the independent reference) to 1e-8
  relative (the two sum in different orders; both solve to rtol 1e-8).
* A compiler failure warns and keeps the eager result, never a silent switch.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.suite import SUITE, requires_suite

torch = pytest.importorskip("torch")
pytest.importorskip("torchdiffeq")
pytest.importorskip("libsbml")

from petab_sciml.backends.torch import auto_compile  # noqa: E402


def _case(name: str):
    from petab_sciml.problem import load_problem

    return load_problem(SUITE / "test_cases" / "sciml_problem_import" / name / "petab"
                        / "problem.yaml", backend="torch")


@requires_suite
def test_short_sessions_stay_eager():
    problem = _case("004")
    sim = problem.simulator()
    # the explicit executor under the stiff fallback (petab_sciml/simulation/stiff_fallback.py)
    assert isinstance(sim.executor.explicit, auto_compile.AutoCompileExecutor)
    for _ in range(2):
        sim.value_and_grad()
    assert sim.executor.compiled is None
    assert sim.executor.options.compile is False


@requires_suite
@pytest.mark.slow
def test_compiled_switch_agrees_with_eager(monkeypatch):
    monkeypatch.setattr(auto_compile, "COMPILE_AFTER_CPU_S", 0.0)
    problem = _case("004")
    auto = problem.simulator()
    eager = problem.simulator(compile=False)
    w = problem.plan.w0 * 1.01
    auto.value_and_grad(w)                       # threshold 0: compiles at once
    assert auto.executor.compiled is not None
    v, g = auto.value_and_grad(w)                # compiled
    v_ref, g_ref = eager.value_and_grad(w)
    assert auto.executor.active.options.compile is True
    assert v == pytest.approx(v_ref, rel=1e-8)
    flat, flat_ref = auto.evaluate(w).grad_flat, eager.evaluate(w).grad_flat
    assert np.allclose(flat, flat_ref, rtol=1e-7, atol=1e-9 * np.abs(flat_ref).max())


@requires_suite
def test_compile_failure_warns_and_stays_eager(monkeypatch):
    from petab_sciml.backends.torch import simulation

    real = simulation.TorchExecutor

    class Failing(real):
        def run(self, kind, w):
            if self.options.compile:
                raise RuntimeError("inductor cannot compile this")
            return super().run(kind, w)

    monkeypatch.setattr(simulation, "TorchExecutor", Failing)
    monkeypatch.setattr(auto_compile, "COMPILE_AFTER_CPU_S", 0.0)
    problem = _case("004")
    sim = problem.simulator()
    v_ref = problem.simulator(compile=False).objective()
    with pytest.warns(RuntimeWarning, match="inductor cannot compile this"):
        v = sim.objective()
    assert sim.executor.compiled is None and not sim.executor.may_compile
    assert v == v_ref
    assert sim.objective() == v_ref


@requires_suite
def test_a_single_costly_call_never_compiles(monkeypatch):
    """Past the threshold after one call, the compile waits for a second call: a single
    evaluation (the CLI's ``evaluate``) pays no compile it cannot use."""
    monkeypatch.setattr(auto_compile, "COMPILE_AFTER_CPU_S", 1e-9)
    sim = _case("004").simulator()
    calls = []
    monkeypatch.setattr(auto_compile.AutoCompileExecutor, "_compile",
                        lambda self, kind, w: calls.append(kind))
    sim.objective()
    assert sim.executor.eager_cpu_s > 1e-9 and calls == []
    sim.objective()
    assert len(calls) == 1

"""SBML events (``petab_sciml/simulation/events.py``) in both backends, against closed-form
solutions written here from the SBML semantics:

* a dose at a parameter-dependent time (``time >= tau: X = X + dose``), with the
  gradient with respect to ``tau``, ``dose`` and the decay rate in every sensitivity
  mode;
* an event that changes a compartment's size at the same time as a PEtab condition
  (the condition first, then the event; amounts of concentration species kept), for a
  trigger on time and one on a state;
* ``initialValue``: a trigger true at the initial time fires there only when
  ``initialValue="false"``;
* a state-triggered event inside a period (root finding), repeated, with the gradient
  through its state-dependent times; and one during a pre-equilibration;
* delays or compound triggers are refused at load with the event named.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

libsbml = pytest.importorskip("libsbml")

from tests.support.marks import slow_unless  # noqa: E402
from tests.support.problems.models import (  # noqa: E402
    lv_sbml,
    write_one_observable_problem,
    write_petab_v2_problem,
)

X0, D, TAU, DOSE = 2.0, 0.7, 1.3, 1.5
TIMES = [0.5, 1.0, 2.0, 3.5]
MEASURED = [1.5, 1.1, 2.0, 1.2]
SIGMA = 0.3
PARAMETERS = ("d", "tau", "dose")


def with_events(sbml: str, events: list[tuple[str, str, list[tuple[str, str]], bool]],
                delay: str | None = None) -> str:
    """``sbml`` with the events ``(id, trigger, [(target, value)], initialValue)``
    (L3 formulas)."""
    doc = libsbml.readSBMLFromString(sbml)
    model = doc.getModel()
    for eid, trigger, assignments, initial_value in events:
        event = model.createEvent()
        event.setId(eid)
        event.setUseValuesFromTriggerTime(False)
        t = event.createTrigger()
        t.setMath(libsbml.parseL3Formula(trigger))
        t.setInitialValue(initial_value)
        t.setPersistent(True)
        if delay is not None:
            event.createDelay().setMath(libsbml.parseL3Formula(delay))
        for target, value in assignments:
            ea = event.createEventAssignment()
            ea.setVariable(target)
            ea.setMath(libsbml.parseL3Formula(value))
    return libsbml.writeSBMLToString(doc)


def decay_sbml(events) -> str:
    return with_events(lv_sbml("dosing", {"X": X0}, {"d": D, "tau": TAU, "dose": DOSE},
                               [("decay", ["X"], [], "d * X")]), events)


def write_dosing(folder: Path, trigger: str = "time >= tau", initial_value: bool = True
                 ) -> Path:
    sbml = decay_sbml([("dose_given", trigger, [("X", "X + dose")], initial_value)])
    return write_one_observable_problem(
        folder, sbml, "X", TIMES, MEASURED, SIGMA,
        {"d": (0, 10, D), "tau": (0, 10, TAU), "dose": (0, 10, DOSE)})


def dosed_x(t: float, d: float, tau: float, dose: float) -> float:
    if t < tau:
        return X0 * math.exp(-d * t)
    return (X0 * math.exp(-d * tau) + dose) * math.exp(-d * (t - tau))


def dosed_value(p: np.ndarray) -> float:
    return sum(0.5 * math.log(2 * math.pi * SIGMA**2) + (m - dosed_x(t, *p)) ** 2
               / (2 * SIGMA**2) for t, m in zip(TIMES, MEASURED, strict=True))


def central_difference(f, p: np.ndarray, h: float = 1e-6) -> np.ndarray:
    out = np.empty(p.size)
    for i in range(p.size):
        e = np.zeros(p.size)
        e[i] = h
        out[i] = (f(p + e) - f(p - e)) / (2 * h)
    return out


def simulator(path: Path, backend: str, **options):
    pytest.importorskip(backend)
    from petab_sciml.problem import load_problem

    problem = load_problem(path, backend=backend)
    if backend == "torch":
        options.setdefault("compile", False)
    return problem, problem.simulator(**options)


# JAX compiles each mode (2-4 s): its default mode stays in `make test-fast`.
MODES = slow_unless(
    [("jax", "forward"), ("jax", "reverse"), ("jax", "forward-ad"), ("jax", "adjoint"),
     ("torch", "forward"), ("torch", "autograd"), ("torch", "adjoint")],
    fast=[("jax", "forward"), ("torch", "forward"), ("torch", "autograd"), ("torch", "adjoint")])
BACKENDS = slow_unless(["jax", "torch"], fast=["torch"])


@pytest.mark.parametrize(("backend", "sensitivity"), MODES)
def test_dose_at_a_parameter_time_value_and_gradient(tmp_path, backend, sensitivity):
    problem, sim = simulator(write_dosing(tmp_path / "p"), backend, sensitivity=sensitivity)
    ev = sim.evaluate(grad=True)
    assert ev.ok, ev.reason
    p = np.array([D, TAU, DOSE])
    np.testing.assert_allclose(ev.simulations, [dosed_x(t, *p) for t in TIMES],
                               rtol=1e-6, atol=1e-9)
    assert ev.value == pytest.approx(dosed_value(p), abs=1e-5)
    order = [list(problem.plan.mech_ids).index(name) for name in PARAMETERS]
    reference = central_difference(dosed_value, p)
    assert abs(reference[1]) > 1.0   # d value / d tau comes only from the event time
    np.testing.assert_allclose(ev.grad_flat[order], reference, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("initial_value", [True, False])
def test_trigger_true_at_the_start_fires_only_without_initial_value(tmp_path, backend,
                                                                    initial_value):
    """``X > 0`` holds from the start: SBML fires it at t0 only when the trigger is
    taken as false before (``initialValue="false"``)."""
    path = write_dosing(tmp_path / "p", "X > 0", initial_value)
    _, sim = simulator(path, backend)
    ev = sim.evaluate(grad=False)
    assert ev.ok, ev.reason
    x0 = X0 if initial_value else X0 + DOSE
    np.testing.assert_allclose(ev.simulations, [x0 * math.exp(-D * t) for t in TIMES],
                               rtol=1e-6)


def compartment_problem(folder: Path, trigger: str) -> Path:
    """A concentration species ``S`` (``dS/dt = p = 1``) in a compartment ``C`` of size 4;
    the event doubles ``C``; the condition at t=10 sets ``S = S + C`` and ``C = 8``."""
    doc = libsbml.SBMLDocument(3, 2)
    model = doc.createModel()
    model.setId("compartment_event")
    c = model.createCompartment()
    c.setId("C"), c.setSize(4), c.setConstant(True), c.setSpatialDimensions(3)
    s = model.createSpecies()
    s.setId("S"), s.setCompartment("C"), s.setInitialConcentration(3)
    s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(False), s.setConstant(False)
    p = model.createParameter()
    p.setId("p"), p.setValue(1), p.setConstant(True)
    rule = model.createRateRule()
    rule.setVariable("S")
    rule.setMath(libsbml.parseL3Formula("p"))
    sbml = with_events(libsbml.writeSBMLToString(doc), [("grow", trigger, [("C", "C * 2")],
                                                         True)])
    return write_petab_v2_problem(folder, sbml, {
        "observables": "observableId\tobservableFormula\tnoiseFormula\tnoiseDistribution\n"
                       "obs_C\tC\t1\tnormal\nobs_amount_S\tS * C\t1\tnormal\n"
                       "obs_conc_S\tS\t1\tnormal\n",
        "conditions": "conditionId\ttargetId\ttargetValue\nc1\tS\t2\nc2\tS\tS + C\n"
                      "c2\tC\t8\n",
        "experiments": "experimentId\ttime\tconditionId\ne1\t0\tc1\ne1\t10\tc2\n",
        "measurements": "observableId\texperimentId\ttime\tmeasurement\n"
                        + "".join(f"{o}\te1\t{t}\t{t}\n" for t in (0, 5, 10, 15)
                                  for o in ("obs_C", "obs_amount_S", "obs_conc_S")),
        "parameters": "parameterId\tlowerBound\tupperBound\tnominalValue\testimate\n"
                      "p\t0\t10\t1\ttrue\n",
    })


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("trigger", ["time >= 10", "S >= 14"])
def test_event_after_the_condition_at_the_same_time_keeps_amounts(tmp_path, backend,
                                                                  trigger):
    """At t=10 the condition sets ``C = 8`` and ``[S] = 12 + 4 = 16`` (amount 128); then
    the event (its trigger becomes true there: time reaches 10, or ``[S]`` jumps past
    14) doubles ``C`` and keeps the amount: ``[S] = 8``.  Then ``[S]`` grows by 1 per
    unit time in ``C = 16``."""
    _, sim = simulator(compartment_problem(tmp_path / "p", trigger), backend)
    ev = sim.evaluate(grad=False)
    assert ev.ok, ev.reason
    expected = [4, 8, 2, 4, 28, 7, 16, 128, 8, 16, 208, 13]
    np.testing.assert_allclose(ev.simulations, expected, rtol=1e-7)


def repeated_x(t: float, d: float, dose: float) -> float:
    """``X`` with ``X < 1: X = X + dose``: from ``X0``, each time ``X`` decays to 1 it
    jumps to ``1 + dose``."""
    x, start = X0, 0.0
    while True:
        root = start + math.log(x) / d
        if t < root:
            return x * math.exp(-d * (t - start))
        x, start = 1.0 + dose, root


def repeated_value(p: np.ndarray) -> float:
    return sum(0.5 * math.log(2 * math.pi * SIGMA**2) + (m - repeated_x(t, *p)) ** 2
               / (2 * SIGMA**2) for t, m in zip(TIMES, MEASURED, strict=True))


@pytest.mark.parametrize(("backend", "sensitivity"), MODES)
def test_state_event_inside_a_period_repeats_with_its_gradient(tmp_path, backend,
                                                               sensitivity):
    """``X < 1`` becomes true at ``t = ln(2) / d`` and again ``ln(1 + dose) / d`` later:
    two events inside the one period, found by root finding, at times that depend on
    ``d`` and ``dose`` (whose derivatives then include ``dtau/dp``)."""
    problem, sim = simulator(write_dosing(tmp_path / "p", "X < 1"), backend,
                             sensitivity=sensitivity)
    ev = sim.evaluate(grad=True)
    assert ev.ok, ev.reason
    p = np.array([D, DOSE])
    assert math.log(X0) / D + math.log(1 + DOSE) / D < TIMES[-1]   # two events before it
    np.testing.assert_allclose(ev.simulations, [repeated_x(t, *p) for t in TIMES],
                               rtol=1e-6)
    ids = list(problem.plan.mech_ids)
    reference = central_difference(repeated_value, p)
    np.testing.assert_allclose(ev.grad_flat[[ids.index("d"), ids.index("dose")]],
                               reference, rtol=1e-4)
    assert ev.grad_flat[ids.index("tau")] == 0.0   # tau is not in this model's trigger


def pre_equilibration_problem(folder: Path) -> Path:
    """``dp/dt = 1`` while ``p <= 500``, from ``p = 2``; the event ``p >= 500`` adds 1000.
    The experiment is a pre-equilibration only, measured at 0 and at steady state: both
    read the steady state ``p = 1500``, reached only through the event."""
    doc = libsbml.SBMLDocument(3, 2)
    model = doc.createModel()
    model.setId("steady_event")
    for pid, value, constant in (("p", 2.0, False), ("rate", 1.0, True)):
        par = model.createParameter()
        par.setId(pid), par.setValue(value), par.setConstant(constant)
    rule = model.createRateRule()
    rule.setVariable("p")
    rule.setMath(libsbml.parseL3Formula("piecewise(rate, p <= 500, 0)"))
    sbml = with_events(libsbml.writeSBMLToString(doc), [("boost", "p >= 500",
                                                         [("p", "p + 1000")], False)])
    return write_petab_v2_problem(folder, sbml, {
        "observables": "observableId\tobservableFormula\tnoiseFormula\tnoiseDistribution\n"
                       "obs_p\tp\t1\tnormal\n",
        "experiments": "experimentId\ttime\tconditionId\ne1\t-inf\t\n",
        "measurements": "observableId\texperimentId\ttime\tmeasurement\n"
                        "obs_p\te1\t0\t1500\nobs_p\te1\tinf\t1500\n",
        "parameters": "parameterId\tlowerBound\tupperBound\tnominalValue\testimate\n"
                      "rate\t0\t10\t1\ttrue\n",
    })


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_event_during_pre_equilibration(tmp_path, backend):
    _, sim = simulator(pre_equilibration_problem(tmp_path / "p"), backend)
    ev = sim.evaluate(grad=False)
    assert ev.ok, ev.reason
    np.testing.assert_allclose(ev.simulations, [1500.0, 1500.0], rtol=1e-8)


@pytest.mark.parametrize(("delay", "trigger", "message"), [
    ("1", "time >= tau", "delay"),
    (None, "time >= tau && X > 1", "not one comparison"),
])
def test_unsupported_events_are_refused_at_load_naming_the_event(tmp_path, delay, trigger,
                                                                 message):
    from petab_sciml.sbml import UnsupportedSbmlError, load_sbml

    sbml = with_events(lv_sbml("dosing", {"X": X0}, {"d": D, "tau": TAU, "dose": DOSE},
                               [("decay", ["X"], [], "d * X")]),
                       [("dose_given", trigger, [("X", "X + dose")], True)], delay=delay)
    path = tmp_path / "model.xml"
    path.write_text(sbml)
    with pytest.raises(UnsupportedSbmlError, match=message) as info:
        load_sbml(path)
    assert "dose_given" in str(info.value)

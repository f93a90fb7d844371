"""Pre-equilibration and steady-state (``time = inf``) measurements against an analytic
reference, with gradients through the steady state.

The problem (ours): ``dx/dt = k_in - net(x)`` with a 1-1 Linear network in the
right-hand side (``net(x) = w x + b``: steady state ``(k_in - b) / w``), and ``A <-> B``
(``kf A``, ``kr B``): a conservation law, so the steady state depends on the initial
amount ``a0`` too (a Newton/implicit-function step alone could not give that gradient).
Four experiments: steady-state measurements only; finite and ``inf`` times in one
period; a pre-equilibration period at ``-inf`` (``k_in = 1``) before a period at 0 that
changes ``k_in`` and ``kr`` and is measured at finite times and at ``inf``; and two finite
periods (batched with the pre-equilibrated one in JAX).  Everything
has a closed form (exponential relaxation to the steady states); the reference gradient
is the central difference of that closed form.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libsbml")

from petab_sciml.arrays import write_array_file  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402

pytestmark = pytest.mark.usefixtures("restore_x64")

SBML = """<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" level="3" version="2">
  <model id="steady">
    <listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="x" compartment="c" initialAmount="0.5" hasOnlySubstanceUnits="true"
               boundaryCondition="false" constant="false"/>
      <species id="A" compartment="c" initialAmount="1" hasOnlySubstanceUnits="true"
               boundaryCondition="false" constant="false"/>
      <species id="B" compartment="c" initialAmount="0.2" hasOnlySubstanceUnits="true"
               boundaryCondition="false" constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="k_in" value="2" constant="true"/>
      <parameter id="deg" value="1" constant="true"/>
      <parameter id="kf" value="1" constant="true"/>
      <parameter id="kr" value="1" constant="true"/>
    </listOfParameters>
    <listOfReactions>
      <reaction id="src" reversible="false"><listOfProducts>
        <speciesReference species="x" stoichiometry="1" constant="true"/></listOfProducts>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML"><ci>k_in</ci></math>
        </kineticLaw></reaction>
      <reaction id="sink" reversible="false"><listOfReactants>
        <speciesReference species="x" stoichiometry="1" constant="true"/></listOfReactants>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML"><ci>deg</ci></math>
        </kineticLaw></reaction>
      <reaction id="fwd" reversible="false">
        <listOfReactants><speciesReference species="A" stoichiometry="1" constant="true"/>
        </listOfReactants>
        <listOfProducts><speciesReference species="B" stoichiometry="1" constant="true"/>
        </listOfProducts>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML"><apply><times/>
          <ci>kf</ci><ci>A</ci></apply></math></kineticLaw></reaction>
      <reaction id="rev" reversible="false">
        <listOfReactants><speciesReference species="B" stoichiometry="1" constant="true"/>
        </listOfReactants>
        <listOfProducts><speciesReference species="A" stoichiometry="1" constant="true"/>
        </listOfProducts>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML"><apply><times/>
          <ci>kr</ci><ci>B</ci></apply></math></kineticLaw></reaction>
    </listOfReactions>
  </model>
</sbml>
"""

NET = """nn_model_id: net1
inputs:
- input_id: input0
layers:
- layer_id: layer1
  layer_type: Linear
  args: {in_features: 1, out_features: 1, bias: true}
forward:
- {name: x, op: placeholder, target: x, args: [], kwargs: {}}
- {name: layer1, op: call_module, target: layer1, args: [x], kwargs: {}}
- {name: output, op: output, target: output, args: [layer1], kwargs: {}}
"""

B0 = 0.2
X0 = 0.5
SIGMA = 0.1
# (observable, experiment, time, measurement)
MEASUREMENTS = [
    ("obs_x", "e_ss", math.inf, 2.3), ("obs_a", "e_ss", math.inf, 0.6),
    ("obs_b", "e_ss", math.inf, 1.0),
    ("obs_x", "e_mix", 1.0, 1.5), ("obs_x", "e_mix", 2.0, 2.0),
    ("obs_x", "e_mix", math.inf, 2.4), ("obs_a", "e_mix", 0.5, 1.2),
    ("obs_a", "e_mix", math.inf, 0.7),
    ("obs_x", "e_pre", 0.0, 1.1), ("obs_x", "e_pre", 0.5, 1.9), ("obs_x", "e_pre", 2.0, 3.0),
    ("obs_x", "e_pre", math.inf, 3.6), ("obs_a", "e_pre", 1.0, 1.0),
    ("obs_a", "e_pre", math.inf, 0.9), ("obs_b", "e_pre", 1.0, 0.8),
    # two finite periods, solved in one batch with e_pre (one runs to steady state, one
    # does not)
    ("obs_x", "e_two", 0.5, 1.4), ("obs_x", "e_two", 1.5, 2.6), ("obs_a", "e_two", 2.0, 0.9),
]
# estimated: kf, kr, kr2, a0 (parameter table order), then the network's w and b
THETA0 = np.array([0.7, 0.4, 1.1, 1.5, 0.8, 0.1])


def write_problem(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.xml").write_text(SBML)
    (folder / "net1.yaml").write_text(NET)
    write_array_file(folder / "net1_ps.hdf5", parameters={"net1": {"layer1": {
        "weight": np.array([[THETA0[4]]]), "bias": np.array([THETA0[5]])}}})
    tables = {
        "problem.yaml": """
            format_version: 2.0.0
            model_files: {steady: {location: model.xml, language: sbml}}
            parameter_files: [parameters.tsv]
            observable_files: [observables.tsv]
            measurement_files: [measurements.tsv]
            condition_files: [conditions.tsv]
            experiment_files: [experiments.tsv]
            mapping_files: [mapping.tsv]
            extensions:
              sciml:
                version: 0.1.0
                array_files: [net1_ps.hdf5]
                hybridization_files: [hybridization.tsv]
                neural_networks:
                  net1: {location: net1.yaml, format: YAML, pre_initialization: false}
            """,
        "parameters.tsv": f"""
            parameterId	lowerBound	upperBound	nominalValue	estimate
            kf	0.01	10	{THETA0[0]}	true
            kr	0.01	10	{THETA0[1]}	true
            kr2	0.01	10	{THETA0[2]}	true
            a0	0.01	10	{THETA0[3]}	true
            net1_ps	-10	10	array	true
            """,
        "observables.tsv": """
            observableId	observableFormula	noiseFormula
            obs_x	x	0.1
            obs_a	A	0.1
            obs_b	B	0.1
            """,
        "conditions.tsv": """
            conditionId	targetId	targetValue
            c1	k_in	2
            c1	A	a0
            c_pre	k_in	1
            c_pre	A	a0
            c_main	k_in	3
            c_main	kr	kr2
            """,
        "experiments.tsv": """
            experimentId	time	conditionId
            e_ss	0	c1
            e_mix	0	c1
            e_pre	-inf	c_pre
            e_pre	0	c_main
            e_two	0	c1
            e_two	1	c_main
            """,
        "mapping.tsv": """
            petabEntityId	modelEntityId
            net1_input	net1.inputs[0][0]
            net1_output	net1.outputs[0][0]
            net1_ps	net1.parameters
            """,
        "hybridization.tsv": """
            targetId	targetValue
            net1_input	x
            deg	net1_output
            """,
    }
    for name, text in tables.items():
        (folder / name).write_text(textwrap.dedent(text).strip() + "\n")
    rows = ["observableId\texperimentId\ttime\tmeasurement"]
    rows += [f"{o}\t{e}\t{t}\t{m}" for o, e, t, m in MEASUREMENTS]
    (folder / "measurements.tsv").write_text("\n".join(rows) + "\n")
    return folder / "problem.yaml"


def analytic(theta: np.ndarray) -> tuple[float, np.ndarray]:
    """(log-likelihood, simulations in measurement order) in closed form."""
    kf, kr, kr2, a0, w, b = theta
    total = a0 + B0

    def x_at(x_start, k_in, t):
        steady = (k_in - b) / w
        return steady if math.isinf(t) else steady + (x_start - steady) * math.exp(-w * t)

    def a_at(a_start, kr_, t):
        steady = total * kr_ / (kf + kr_)
        return steady if math.isinf(t) else steady + (a_start - steady) * \
            math.exp(-(kf + kr_) * t)

    states = {
        "e_ss": lambda t: (x_at(X0, 2.0, t), a_at(a0, kr, t)),
        "e_mix": lambda t: (x_at(X0, 2.0, t), a_at(a0, kr, t)),
        # pre-equilibrated: x at (1 - b) / w, A at its steady state with kr
        "e_pre": lambda t: (x_at((1.0 - b) / w, 3.0, t),
                            a_at(total * kr / (kf + kr), kr2, t)),
    }
    x1, a1 = x_at(X0, 2.0, 1.0), a_at(a0, kr, 1.0)   # e_two at its switch, t = 1
    states["e_two"] = lambda t: ((x_at(X0, 2.0, t), a_at(a0, kr, t)) if t < 1.0 else
                                 (x_at(x1, 3.0, t - 1.0), a_at(a1, kr2, t - 1.0)))
    sims, llh = [], 0.0
    for obs, exp, t, m in MEASUREMENTS:
        x, a = states[exp](t)
        y = {"obs_x": x, "obs_a": a, "obs_b": total - a}[obs]
        sims.append(y)
        llh += -0.5 * math.log(2 * math.pi * SIGMA ** 2) - 0.5 * ((m - y) / SIGMA) ** 2
    return llh, np.array(sims)


def analytic_gradient(theta: np.ndarray) -> np.ndarray:
    """d(-llh)/d theta by central differences of the closed form."""
    grad = np.zeros_like(theta)
    for i in range(theta.size):
        h = 1e-6 * max(1.0, abs(theta[i]))
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        grad[i] = -(analytic(up)[0] - analytic(down)[0]) / (2 * h)
    return grad


@pytest.fixture(scope="module")
def problem_path(tmp_path_factory) -> Path:
    return write_problem(tmp_path_factory.mktemp("steady"))


def _ours(ev, plan) -> np.ndarray:
    g = ev.grad
    mech = [g["mech"][plan.mech_ids.index(k)] for k in ("kf", "kr", "kr2", "a0")]
    layer = g["nets"]["net1"]["layer1"]
    return np.array(mech + [layer["weight"][0, 0], layer["bias"][0]])


def test_plan_periods(problem_path):
    plan = load_problem(problem_path, backend="jax").simulator().plan
    exps = {e.id: e for e in plan.experiments}
    assert [p.steady_state for p in exps["e_pre"].periods] == [True, True]
    assert exps["e_pre"].periods[0].pre_equilibration
    assert exps["e_pre"].periods[0].start == 0.0 and exps["e_pre"].periods[1].start == 0.0
    assert exps["e_mix"].periods[0].times.tolist() == [0.5, 1.0, 2.0, math.inf]
    assert [p.steady_state for p in exps["e_two"].periods] == [False, False]


@pytest.mark.parametrize("backend, options", [
    ("jax", {"sensitivity": "forward"}),
    ("jax", {"sensitivity": "reverse"}),
    ("jax", {"sensitivity": "forward", "batch_experiments": False}),
    ("torch", {"sensitivity": "forward"}),
    ("torch", {"sensitivity": "autograd"}),
    ("torch", {"method": "kvaerno5"}),
])
@pytest.mark.slow
def test_steady_state_against_analytic(problem_path, backend, options):
    if backend == "jax":
        options = {**options, "cache": False}
    sim = load_problem(problem_path, backend=backend).simulator(rtol=1e-10, atol=1e-10,
                                                                **options)
    theta = THETA0.copy()
    w = sim.plan.w0.copy()
    for k, v in zip(("kf", "kr", "kr2", "a0"), theta[:4]):
        assert w[sim.plan.mech_ids.index(k)] == v
    ev = sim.evaluate(w)
    llh, sims = analytic(theta)
    assert ev.ok
    # steady state reached when the weighted RMS of dx/dt is below 1 at rtol = atol =
    # 1e-10: the states are then within ~1e-10 / (slowest rate 0.8) of it
    np.testing.assert_allclose(ev.simulations, sims, rtol=0, atol=1e-8)
    assert abs(ev.llh - llh) < 1e-7 * abs(llh)
    np.testing.assert_allclose(_ours(ev, sim.plan), analytic_gradient(theta), rtol=1e-6,
                               atol=1e-6)
    # elsewhere: new values of every estimated parameter, no retracing needed
    theta2 = theta * np.array([1.3, 0.8, 1.2, 0.9, 1.1, -2.0])
    w2 = w.copy()
    for k, v in zip(("kf", "kr", "kr2", "a0"), theta2[:4]):
        w2[sim.plan.mech_ids.index(k)] = v
    net = sim.plan.network("net1").arrays
    w2[[s.offset for s in net if s.array == "weight"][0]] = theta2[4]
    w2[[s.offset for s in net if s.array == "bias"][0]] = theta2[5]
    ev2 = sim.evaluate(w2)
    np.testing.assert_allclose(ev2.simulations, analytic(theta2)[1], rtol=0, atol=1e-8)
    np.testing.assert_allclose(_ours(ev2, sim.plan), analytic_gradient(theta2), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.slow
def test_never_settling_fails_cleanly(tmp_path, backend):
    """A period that cannot reach a steady state (x grows without bound when the
    network's slope is negative) ends in a failed solve: objective inf, not a hang.  The
    step budget is small so that the explicit solve and the implicit retry of the
    default solver each fail within a few hundred steps per horizon."""
    path = write_problem(tmp_path / "p")
    sim = load_problem(path, backend=backend).simulator(max_steps=200)
    w = sim.plan.w0.copy()
    net = sim.plan.network("net1").arrays
    w[[s.offset for s in net if s.array == "weight"][0]] = -0.5
    ev = sim.evaluate(w)
    assert not ev.ok and ev.value == math.inf

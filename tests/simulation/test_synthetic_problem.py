"""Simulation, likelihood and gradients on a small synthetic problem, against an
independent scipy reference; API, no-retracing, cross-process cache and load-time
failures.  (The official suite's cases are in ``test_simulation_suite.py``.)

The synthetic problem covers what the suite does not: experiments with two periods
(a bolus on a species and a parameter switch at the period start), measurement-table
placeholders (a parameter id and a number), ``log`` transformation, Laplace noise, a
noise parameter, a network in an observable, and a prior truncated to its bounds.
"""

from __future__ import annotations

import math
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libsbml")
pytest.importorskip("sympy")
pytest.importorskip("scipy")

from petab_sciml.arrays import write_array_file  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402

SBML = """<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version1/core" level="3" version="1">
  <model id="decay">
    <listOfCompartments>
      <compartment id="c" size="1" constant="true"/>
    </listOfCompartments>
    <listOfSpecies>
      <species id="A" compartment="c" initialConcentration="1" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
      <species id="B" compartment="c" initialConcentration="0" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="k1" value="0.5" constant="true"/>
      <parameter id="k2" value="0.3" constant="true"/>
    </listOfParameters>
    <listOfReactions>
      <reaction id="r1" reversible="false" fast="false">
        <listOfReactants><speciesReference species="A" stoichiometry="1" constant="true"/>
        </listOfReactants>
        <listOfProducts><speciesReference species="B" stoichiometry="1" constant="true"/>
        </listOfProducts>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML">
          <apply><times/><ci>c</ci><ci>k1</ci><ci>A</ci></apply></math></kineticLaw>
      </reaction>
      <reaction id="r2" reversible="false" fast="false">
        <listOfReactants><speciesReference species="B" stoichiometry="1" constant="true"/>
        </listOfReactants>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML">
          <apply><times/><ci>c</ci><ci>k2</ci><ci>B</ci></apply></math></kineticLaw>
      </reaction>
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

TABLES = {
    "problem.yaml": """
        format_version: 2.0.0
        model_files: {decay: {location: decay.xml, language: sbml}}
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
    "parameters.tsv": "\n".join("\t".join(row) for row in [
        ["parameterId", "lowerBound", "upperBound", "nominalValue", "estimate",
         "priorDistribution", "priorParameters"],
        ["k1", "0.01", "5", "0.5", "true", "normal", "0.5;0.2"],
        ["k2", "0.01", "5", "0.3", "true"],
        ["k2b", "0.01", "5", "0.8", "true"],
        ["scale", "0.1", "10", "1.2", "true"],
        ["sigmaB", "0.01", "2", "0.15", "true"],
        ["offset", "-1", "1", "0.05", "false"],
        ["net1_ps", "-10", "10", "array", "true"]]),
    "observables.tsv": "\n".join("\t".join(row) for row in [
        ["observableId", "observableFormula", "noiseFormula", "observableTransformation",
         "noiseDistribution", "observablePlaceholders", "noisePlaceholders"],
        ["obsA", "scaleA * A", "sdA", "log", "normal", "scaleA", "sdA"],
        ["obsB", "B + offset", "sigmaB", "lin", "laplace"],
        ["obsN", "net1_output", "0.2", "lin", "normal"]]),
    "conditions.tsv": """
        conditionId	targetId	targetValue
        c0	A	1.0
        c1	A	A + 0.5
        c1	k2	k2b
        c2	A	2.0
        """,
    "experiments.tsv": """
        experimentId	time	conditionId
        e1	0	c0
        e1	2	c1
        e2	0	c2
        """,
    "measurements.tsv": """
        observableId	experimentId	time	measurement	observableParameters	noiseParameters
        obsA	e1	0	0.9	scale	0.1
        obsA	e1	1	0.4	scale	0.1
        obsA	e1	2	0.7	scale	0.1
        obsA	e1	4	0.15	2.0	0.1
        obsB	e1	1	0.5
        obsB	e1	3	0.3
        obsN	e1	2.5	0.6
        obsN	e2	1.5	1.2
        obsA	e2	0.5	1.5	scale	0.2
        obsB	e2	3	0.8
        """,
    "mapping.tsv": """
        petabEntityId	modelEntityId
        net1_input	net1.inputs[0][0]
        net1_output	net1.outputs[0][0]
        net1_ps	net1.parameters
        """,
    "hybridization.tsv": """
        targetId	targetValue
        net1_input	A
        """,
}
W0 = {"weight": np.array([[0.7]]), "bias": np.array([0.1])}


def write_decay_problem(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "decay.xml").write_text(SBML)
    (folder / "net1.yaml").write_text(NET)
    for name, text in TABLES.items():
        (folder / name).write_text(textwrap.dedent(text).strip() + "\n")
    write_array_file(folder / "net1_ps.hdf5", parameters={"net1": {"layer1": W0}})
    return folder / "problem.yaml"


# ------------------------------------------------------------------ scipy reference
def reference(mech: np.ndarray, weight: float, bias: float):
    """(log-likelihood, log-prior, simulations) computed independently with scipy."""
    from scipy.integrate import solve_ivp
    from scipy.stats import norm

    k1, k2, k2b, scale, sigma_b = mech
    offset = 0.05

    def solve(x0, t0, t1, k2_, times):
        if t1 == t0:
            return {t: np.array(x0) for t in times}, np.array(x0)
        sol = solve_ivp(lambda t, x: [-k1 * x[0], k1 * x[0] - k2_ * x[1]], (t0, t1), x0,
                        t_eval=sorted(set(times) | {t1}), rtol=1e-12, atol=1e-12,
                        method="DOP853")
        states = {t: sol.y[:, i] for i, t in enumerate(sol.t)}
        return states, sol.y[:, -1]

    e1a, end = solve([1.0, 0.0], 0.0, 2.0, k2, [0.0, 1.0])
    e1b, _ = solve([end[0] + 0.5, end[1]], 2.0, 4.0, k2b, [2.0, 2.5, 3.0, 4.0])
    e1 = {**e1a, **e1b}
    e2, _ = solve([2.0, 0.0], 0.0, 3.0, k2, [0.5, 1.5, 3.0])
    rows = [("A", e1, 0, 0.9, scale, 0.1), ("A", e1, 1, 0.4, scale, 0.1),
            ("A", e1, 2, 0.7, scale, 0.1), ("A", e1, 4, 0.15, 2.0, 0.1),
            ("B", e1, 1, 0.5, None, None), ("B", e1, 3, 0.3, None, None),
            ("N", e1, 2.5, 0.6, None, None), ("N", e2, 1.5, 1.2, None, None),
            ("A", e2, 0.5, 1.5, scale, 0.2), ("B", e2, 3, 0.8, None, None)]
    llh, sims = 0.0, []
    for obs, states, t, m, s, sd in rows:
        a, b = states[float(t)]
        if obs == "A":
            y = s * a
            r = (math.log(m) - math.log(y)) / sd
            llh += -0.5 * math.log(2 * math.pi * sd * sd) - 0.5 * r * r - math.log(m)
        elif obs == "B":
            y = b + offset
            llh += -math.log(2 * sigma_b) - abs(m - y) / sigma_b
        else:
            y = weight * a + bias
            llh += -0.5 * math.log(2 * math.pi * 0.04) - 0.5 * ((m - y) / 0.2) ** 2
        sims.append(y)
    # prior: normal(0.5, 0.2) on k1 truncated to [0.01, 5]; implicit uniform(bounds) on
    # the other estimated parameters (the problem has a prior)
    mass = norm.cdf(5, 0.5, 0.2) - norm.cdf(0.01, 0.5, 0.2)
    logprior = norm.logpdf(k1, 0.5, 0.2) - math.log(mass)
    logprior -= math.log(5 - 0.01) * 2 + math.log(10 - 0.1) + math.log(2 - 0.01)
    logprior -= 2 * math.log(20)
    return llh, logprior, np.array(sims)


MECH0 = np.array([0.5, 0.3, 0.8, 1.2, 0.15])


@pytest.fixture(scope="module")
def decay_problem(tmp_path_factory) -> Path:
    return write_decay_problem(tmp_path_factory.mktemp("decay"))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("jaxcache")


def _simulator(path: Path, backend: str, cache_dir: Path):
    problem = load_problem(path, backend=backend)
    opts = {"cache_dir": cache_dir} if backend == "jax" else {}
    return problem, problem.simulator(**opts)


# ------------------------------------------------------------------ semantics
@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.slow
def test_decay_problem_matches_scipy_reference(decay_problem, cache_dir, backend):
    problem, _ = _simulator(decay_problem, backend, cache_dir)
    # PEtab semantics against scipy at 1e-12: our solves at 1e-10, so that their own
    # error (outputs inside steps come from dopri8's dense output, whose error exceeds
    # the tolerance: 1.4e-7 at the default 1e-8 here) stays below the 1e-7 compared
    opts = {"cache_dir": cache_dir} if backend == "jax" else {}
    sim = problem.simulator(rtol=1e-10, atol=1e-10, **opts)
    assert sim.parameter_ids == ("k1", "k2", "k2b", "scale", "sigmaB")
    p = problem.parameters()
    np.testing.assert_allclose(p["mech"], MECH0)
    ev = sim.evaluate(p)
    llh, logprior, sims = reference(MECH0, 0.7, 0.1)
    np.testing.assert_allclose(ev.simulations, sims, rtol=1e-7, atol=1e-9)
    assert ev.llh == pytest.approx(llh, rel=1e-7)
    assert ev.logprior == pytest.approx(logprior, rel=1e-9)
    assert ev.value == pytest.approx(-(llh + logprior), rel=1e-7)
    # the value alone comes from a solve without sensitivities (its own step sizes)
    assert problem.objective(p) == pytest.approx(-(llh + logprior), rel=1e-7)
    np.testing.assert_allclose(problem.simulate(p), sims, rtol=1e-6, atol=1e-9)

    # gradient against central differences of the independent reference
    def total(mech, weight, bias):
        a, b, _ = reference(mech, weight, bias)
        return -(a + b)

    h = 1e-6
    for i in range(5):
        up, down = MECH0.copy(), MECH0.copy()
        up[i] += h
        down[i] -= h
        fd = (total(up, 0.7, 0.1) - total(down, 0.7, 0.1)) / (2 * h)
        assert ev.grad["mech"][i] == pytest.approx(fd, rel=1e-5, abs=1e-6), i
    fd_w = (total(MECH0, 0.7 + h, 0.1) - total(MECH0, 0.7 - h, 0.1)) / (2 * h)
    fd_b = (total(MECH0, 0.7, 0.1 + h) - total(MECH0, 0.7, 0.1 - h)) / (2 * h)
    layer = ev.grad["nets"]["net1"]["layer1"]
    assert layer["weight"][0, 0] == pytest.approx(fd_w, rel=1e-5)
    assert layer["bias"][0] == pytest.approx(fd_b, rel=1e-5)


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.slow
def test_new_parameter_values(decay_problem, cache_dir, backend):
    problem, sim = _simulator(decay_problem, backend, cache_dir)
    mech = MECH0 * np.array([1.1, 0.9, 1.2, 0.8, 1.3])
    p = problem.parameters()
    p["mech"] = mech
    p["nets"]["net1"]["layer1"]["weight"] = np.array([[0.4]])
    llh, logprior, sims = reference(mech, 0.4, 0.1)
    value, grad = problem.value_and_grad(p)
    assert value == pytest.approx(-(llh + logprior), rel=1e-7)
    assert set(grad) == {"mech", "nets"}
    assert grad["nets"]["net1"]["layer1"]["weight"].shape == (1, 1)


@pytest.mark.slow
def test_no_retracing_with_new_values(decay_problem):
    problem = load_problem(decay_problem, backend="jax")
    sim = problem.simulator(cache=False)
    rng = np.random.default_rng(1)
    values = []
    for _ in range(3):
        p = problem.parameters()
        p["mech"] = MECH0 * rng.uniform(0.8, 1.2, 5)
        p["nets"]["net1"]["layer1"]["bias"] = rng.normal(size=1)
        values.append(sim.value_and_grad(p)[0])
        sim.simulate(p)
    assert len(set(values)) == 3
    assert sim.n_traces == 2  # once for value_and_grad, once for the value alone


@pytest.mark.slow
def test_cross_process_cache_skips_tracing(decay_problem, tmp_path):
    first = load_problem(decay_problem, backend="jax").simulator(cache_dir=tmp_path)
    a = first.evaluate()
    assert first.cache.events == ["exported"]
    # a new simulator (as in a new process) finds the exported computation
    again = load_problem(decay_problem, backend="jax").simulator(cache_dir=tmp_path)
    b = again.evaluate()
    assert again.cache.events == ["loaded"] and again.n_traces == 0
    assert b.value == a.value and np.array_equal(b.grad_flat, a.grad_flat)


@pytest.mark.slow
def test_frozen_parameters_get_no_gradient(decay_problem, tmp_path, cache_dir):
    folder = tmp_path / "frozen"
    shutil.copytree(decay_problem.parent, folder)
    table = (folder / "mapping.tsv").read_text() + "net1_bias\tnet1.parameters[layer1].bias\n"
    (folder / "mapping.tsv").write_text(table)
    params = (folder / "parameters.tsv").read_text() + "net1_bias\t-10\t10\tarray\tfalse\n"
    (folder / "parameters.tsv").write_text(params)
    for backend in ("jax", "torch"):
        problem, sim = _simulator(folder / "problem.yaml", backend, cache_dir)
        assert not sim.trainable()["nets"]["net1"]["layer1"]["bias"].any()
        _, grad = problem.value_and_grad()
        assert grad["nets"]["net1"]["layer1"]["bias"][0] == 0.0
        assert grad["nets"]["net1"]["layer1"]["weight"][0, 0] != 0.0


# ------------------------------------------------------------------ load-time errors
def test_unsupported_sbml_fails_at_load(decay_problem, tmp_path):
    from petab_sciml.sbml import UnsupportedSbmlError

    folder = tmp_path / "events"
    shutil.copytree(decay_problem.parent, folder)
    xml = (folder / "decay.xml").read_text().replace("</listOfReactions>", """</listOfReactions>
    <listOfEvents>
      <event id="bolus" useValuesFromTriggerTime="true">
        <trigger initialValue="false" persistent="true"><math
          xmlns="http://www.w3.org/1998/Math/MathML"><apply><gt/><csymbol
          encoding="text" definitionURL="http://www.sbml.org/sbml/symbols/time">t</csymbol>
          <cn>1</cn></apply></math></trigger>
        <delay><math xmlns="http://www.w3.org/1998/Math/MathML"><cn>2</cn></math></delay>
        <listOfEventAssignments><eventAssignment variable="A"><math
          xmlns="http://www.w3.org/1998/Math/MathML"><cn>1</cn></math></eventAssignment>
        </listOfEventAssignments>
      </event>
    </listOfEvents>""")
    (folder / "decay.xml").write_text(xml)
    with pytest.raises(UnsupportedSbmlError, match="event 'bolus'.*delay|delay.*event 'bolus'"):
        load_problem(folder / "problem.yaml", backend="torch")


def test_period_at_plus_infinity_fails_at_load(decay_problem, tmp_path):
    """-inf is pre-equilibration (tests/simulation/test_steady_state.py); a period cannot start at
    +inf."""
    from petab_sciml.simulation import SimulationError

    folder = tmp_path / "preeq"
    shutil.copytree(decay_problem.parent, folder)
    text = (folder / "experiments.tsv").read_text() + "e2\tinf\tc0\n"
    (folder / "experiments.tsv").write_text(text)
    with pytest.raises(SimulationError, match="cannot start at time inf"):
        load_problem(folder / "problem.yaml", backend="torch")

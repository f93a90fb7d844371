"""Plain PEtab v2 problems (no networks): the official PEtab test suite's v2 cases through
the runner, a problem without networks in every command and API, noise formulas that
use observable placeholders, models without states, SBML ``comp`` and the benchmark
models' reference log-likelihoods."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from petab_sciml import petab_suite
from petab_sciml.cli import main
from petab_sciml.problem import load_problem, validate_problem

REPO = Path(__file__).resolve().parents[2]
V2_SUITE = petab_suite.default_suite()
BENCHMARK = Path(os.environ.get("PETAB_BENCHMARK") or REPO.parent / "shared" / "petab_benchmark")
CASES = V2_SUITE / "cases" / "v2.0.0" / "sbml" if V2_SUITE else None

requires_v2_suite = pytest.mark.skipif(
    CASES is None or not CASES.is_dir(),
    reason="PEtab v2 test suite not found: set PETAB_V2_SUITE or place it at "
    "../shared/petab_v2_suite")
requires_benchmark = pytest.mark.skipif(
    not BENCHMARK.is_dir(), reason="benchmark collection not found: set PETAB_BENCHMARK or "
    "place it at ../shared/petab_benchmark")


# --------------------------------------------------------------------- the v2 suite
@requires_v2_suite
@pytest.mark.slow
def test_v2_suite_runner_both_backends():
    """Every case, event cases included, gives the expected llh, chi2 and simulations
    at its tolerances in JAX and PyTorch."""
    paths = petab_suite.discover([V2_SUITE])
    assert len(paths) >= 20
    results = petab_suite.run_all(paths, ["jax", "torch"])
    assert len(results) == 2 * len(paths)
    for r in results:
        assert r.passed, (r.case, r.backend, r.error, r.errors)
        assert {"llh", "chi2", "simulations"} <= set(r.errors), r.errors


@requires_v2_suite
def test_cli_runs_suite_cases_with_json_and_exit_code(tmp_path):
    """The CLI compares each case and exits 1 when one fails (here: a case whose
    reference llh was changed by 1)."""
    good = CASES / "0001"
    bad = tmp_path / "0001"
    shutil.copytree(good, bad)
    sol = yaml.safe_load((bad / "_0001_solution.yaml").read_text())
    sol["llh"] = float(sol["llh"]) + 1.0
    (bad / "_0001_solution.yaml").write_text(yaml.safe_dump(sol))
    ok = CliRunner().invoke(main, ["test-cases", "run", str(good), "--backend", "both",
                                   "--json"])
    assert ok.exit_code == 0, ok.output
    out = json.loads(ok.output)
    assert {r["backend"] for r in out["petab_suite"]} == {"jax", "torch"}
    assert all(r["passed"] for r in out["petab_suite"])
    failed = CliRunner().invoke(main, ["test-cases", "run", str(bad), "--backend", "torch"])
    assert failed.exit_code == 1
    assert "FAIL" in failed.output and "llh: error 1.00e+00" in failed.output


@pytest.mark.slow
@requires_v2_suite
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_model_without_states(backend):
    """Case 0024 (only parameters, truncated priors): value and gradient in every
    sensitivity mode equal the suite's llh and each other."""
    case = petab_suite.load_case(CASES / "0024")
    modes = ["forward", "reverse"] if backend == "jax" else ["forward", "autograd", "adjoint"]
    grads = []
    for mode in modes:
        sim = load_problem(case.problem, backend=backend).simulator(sensitivity=mode)
        ev = sim.evaluate(grad=True)
        assert ev.ok
        assert abs(ev.llh - float(case.solution["llh"])) <= 1e-9
        grads.append(ev.grad_flat)
    for g in grads[1:]:
        np.testing.assert_allclose(g, grads[0], rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------- no networks, every API
def _finite_difference(sim, w, h=1e-6):
    out = np.empty_like(w)
    for i in range(w.size):
        e = np.zeros_like(w)
        e[i] = h
        out[i] = (sim.objective({"mech": w + e, "nets": {}})
                  - sim.objective({"mech": w - e, "nets": {}})) / (2 * h)
    return out


@requires_v2_suite
@pytest.mark.slow
def test_problem_without_networks_in_every_api(tmp_path):
    """validate, info, load, value_and_grad (against finite differences), the native
    models, save and fit on a PEtab v2 problem without the SciML extension."""
    import equinox as eqx

    from petab_sciml.backends.jax import problem as jp

    path = CASES / "0001" / "_0001.yaml"
    assert "extensions" not in yaml.safe_load(path.read_text())
    assert validate_problem(path).ok
    for command in (["validate", str(path)], ["info", str(path)]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0, result.output
    ref_llh = float(yaml.safe_load((CASES / "0001" / "_0001_solution.yaml").read_text())["llh"])
    values = []
    for backend in ("jax", "torch"):
        problem = load_problem(path, backend=backend)
        sim = problem.simulator()
        value, grad = sim.value_and_grad(sim.parameters())
        assert grad["nets"] == {}
        assert abs(-value - ref_llh) <= 1e-6
        w = np.asarray(grad["mech"], float)
        fd = _finite_difference(sim, np.asarray(sim.parameters()["mech"], float))
        np.testing.assert_allclose(w, fd, rtol=1e-5, atol=1e-7)
        if backend == "jax":
            (native, _), g = eqx.filter_value_and_grad(jp.loss, has_aux=True)(problem.model())
            native_grad = np.asarray(g.mech)
        else:
            module = problem.model(compile=False)
            loss = module()
            loss.backward()
            native, native_grad = loss.item(), module.mech.grad.numpy()
        assert abs(float(native) - value) <= 1e-9 * abs(value)
        np.testing.assert_allclose(native_grad, w, rtol=1e-8)
        saved = problem.save(sim.parameters(), tmp_path / backend)
        assert CliRunner().invoke(main, ["validate", str(saved)]).exit_code == 0
        values.append(value)
    assert abs(values[0] - values[1]) <= 1e-8 * abs(values[0])
    fit = CliRunner().invoke(main, ["fit", str(path), "--steps", "3", "--starts", "1",
                                    "--in-process", "--no-plots", "--out",
                                    str(tmp_path / "fit")])
    assert fit.exit_code == 0, fit.output


@requires_v2_suite
def test_extension_without_networks_is_valid(tmp_path):
    shutil.copytree(CASES / "0001", tmp_path / "c")
    path = tmp_path / "c" / "_0001.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["extensions"] = {"sciml": {"version": "2.0.0", "neural_networks": {},
                                   "hybridization_files": []}}
    path.write_text(yaml.safe_dump(raw))
    report = validate_problem(path)
    assert report.ok, report.issues
    assert load_problem(path, backend="torch").simulator().evaluate().ok


# -------------------------------------------------- placeholders in noise formulas
def _placeholder_case(tmp_path: Path, noise: str, placeholders: str = "") -> Path:
    """Case 0001 with ``obs_a = observableParameter1_obs_a * A`` (override 2) and the
    noise formula ``noise``."""
    folder = tmp_path / "c"
    shutil.copytree(CASES / "0001", folder)
    (folder / "_observables.tsv").write_text(
        "observableId\tobservableFormula\tnoiseFormula\tnoiseDistribution\t"
        "observablePlaceholders\tnoisePlaceholders\n"
        f"obs_a\tobservableParameter1_obs_a * A\t{noise}\tnormal\t"
        f"observableParameter1_obs_a\t{placeholders}\n")
    rows = (folder / "_measurements.tsv").read_text().splitlines()
    header = rows[0].split("\t")
    col = header.index("observableParameters")
    out = [rows[0]]
    for line in rows[1:]:
        cells = line.split("\t")
        cells += [""] * (len(header) - len(cells))
        cells[col] = "2"
        out.append("\t".join(cells))
    (folder / "_measurements.tsv").write_text("\n".join(out) + "\n")
    return folder / "_0001.yaml"


@requires_v2_suite
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_noise_formula_uses_observable_placeholder(tmp_path, backend):
    """sigma = 0.5 * observableParameter1_obs_a = 1: the llh from the suite's reference
    simulations of A (y = 2 A)."""
    path = _placeholder_case(tmp_path, "0.5 * observableParameter1_obs_a")
    assert validate_problem(path).ok
    sim_rows = petab_suite._read_tsv(CASES / "0001" / "_simulations.tsv")
    meas_rows = petab_suite._read_tsv(tmp_path / "c" / "_measurements.tsv")
    y = 2 * np.array([float(r["simulation"]) for r in sim_rows])
    m = np.array([float(r["measurement"]) for r in meas_rows])
    expected = float(np.sum(-0.5 * math.log(2 * math.pi) - 0.5 * (m - y) ** 2))
    ev = load_problem(path, backend=backend).simulator().evaluate(grad=True)
    assert ev.ok
    np.testing.assert_allclose(ev.sigma, 1.0, rtol=1e-12)
    assert abs(ev.llh - expected) <= 1e-6


@requires_v2_suite
def test_validate_reports_placeholders_evaluation_cannot_resolve(tmp_path):
    """A noise placeholder of another observable is a symbol evaluation would not
    resolve."""
    path = _placeholder_case(tmp_path, "noiseParameter1_obs_b")
    report = validate_problem(path)
    assert not report.ok
    assert any(i.code == "OBSERVABLE_UNKNOWN_SYMBOL" and "noiseParameter1_obs_b" in i.message
               and i.column == "noiseFormula" for i in report.issues), report.issues


# ------------------------------------------------------------------------- SBML comp
COMP_MODEL = """<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version1/core" level="3" version="1"
 xmlns:comp="http://www.sbml.org/sbml/level3/version1/comp/version1" comp:required="true">
 <model id="top">
  <listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
  <comp:listOfSubmodels><comp:submodel comp:id="sub" comp:modelRef="decay"/>
  </comp:listOfSubmodels>
 </model>
 <comp:listOfModelDefinitions>
  <comp:modelDefinition id="decay">
   <listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
   <listOfSpecies><species id="A" compartment="c" initialConcentration="2"
     hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/>
   </listOfSpecies>
   <listOfParameters><parameter id="k" value="0.5" constant="true"/></listOfParameters>
   <listOfReactions><reaction id="r" reversible="false" fast="false">
     <listOfReactants><speciesReference species="A" stoichiometry="1" constant="true"/>
     </listOfReactants>
     <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML">
       <apply><times/><ci>k</ci><ci>A</ci></apply></math></kineticLaw>
   </reaction></listOfReactions>
  </comp:modelDefinition>
 </comp:listOfModelDefinitions>
</sbml>
"""


def test_sbml_comp_is_flattened():
    """The submodel's species and parameter appear with libsbml's flattened ids and
    A' = -k A."""
    from petab_sciml.sbml import load_sbml

    model = load_sbml(COMP_MODEL)
    states = list(model.state_ids)
    assert len(states) == 1 and states[0].endswith("A"), states
    assert any(p.endswith("k") for p in model.parameters), model.parameters


@pytest.mark.parametrize("package", ["qual", "foo"])
def test_other_required_sbml_package_is_refused_by_name(package):
    """A package libsbml knows (qual) and one it does not (foo), required beside comp."""
    from petab_sciml.sbml import SbmlError, load_sbml

    uri = f"http://www.sbml.org/sbml/level3/version1/{package}/version1"
    text = COMP_MODEL.replace(
        'comp:required="true">',
        f'comp:required="true" xmlns:{package}="{uri}" {package}:required="true">')
    with pytest.raises(SbmlError, match=f"[Pp]ackage '{package}'"):
        load_sbml(text)


# ------------------------------------------------------------ benchmark models
def _reference(model: str) -> float | None:
    return yaml.safe_load((BENCHMARK / "reference.yaml").read_text())[model]["llh"]


MATCHING_MODELS = ("Beer_MolBioSystems2014", "Boehm_JProteomeRes2014",
                   "Borghans_BiophysChem1997", "Brannmark_JBC2010", "Fiedler_BMCSystBiol2016",
                   "Lucarelli_CellSystems2018", "Schwen_PONE2014")
"""Benchmark models checked against ``reference.yaml`` with default settings (Bachmann
below with its solver; Crauste against an independent solution; Chen_MSB2009, ~500
states, does not finish an evaluation in minutes yet)."""


@requires_benchmark
@pytest.mark.slow
@pytest.mark.parametrize("model", MATCHING_MODELS)
def test_benchmark_model_gives_the_reference_llh_by_default(model):
    """JAX with no option given (stiff ones through the implicit fallback, Beer's
    stimulus times as jumps) matches the reference to 1e-3."""
    path = BENCHMARK / model / f"{model}.yaml"
    if not path.is_file():
        pytest.skip(f"{model} is not in {BENCHMARK}")
    assert validate_problem(path).ok
    ev = load_problem(path, backend="jax").simulator(cache=False).evaluate(grad=False)
    assert ev.ok, ev.reason
    assert abs(ev.llh - _reference(model)) <= 1e-3


@requires_benchmark
@pytest.mark.slow
def test_bachmann_implicit_solver_gives_the_reference_llh():
    """kvaerno5 in JAX with the experiments split over devices evaluates (no lineax
    structure error) and matches the reference to 1e-3."""
    path = BENCHMARK / "Bachmann_MSB2011" / "Bachmann_MSB2011.yaml"
    # the value alone: the structure error came from the sharded forward solve
    ev = load_problem(path, backend="jax").simulator(solver="kvaerno5").evaluate(grad=False)
    assert ev.ok
    assert abs(ev.llh - _reference("Bachmann_MSB2011")) <= 1e-3


@requires_benchmark
@pytest.mark.slow
def test_armistead_comp_model_loads_and_backends_agree():
    path = BENCHMARK / "Armistead_CellDeathDis2024" / "Armistead_CellDeathDis2024.yaml"
    assert validate_problem(path).ok
    llh = [load_problem(path, backend=b).simulator().evaluate().llh for b in ("jax", "torch")]
    assert all(math.isfinite(v) for v in llh)
    assert abs(llh[0] - llh[1]) <= 1e-6 * abs(llh[0])


def _scipy_llh(folder: Path, model: str) -> float:
    """The log-likelihood of a plain reaction-network model (constant compartment of size
    1, species initial concentrations, kinetic laws of species and parameters, one
    experiment, normal noise with numeric noise parameters in the measurement table) by
    SciPy's Radau at rtol = atol = 1e-12, with libsbml and sympy: independent of our
    SBML import, expression compiler and solvers."""
    import libsbml
    import pandas as pd
    import sympy
    from scipy.integrate import solve_ivp

    m = libsbml.readSBMLFromFile(str(folder / f"model_{model}.xml")).getModel()
    values = {p.getId(): p.getValue() for p in m.getListOfParameters()}
    table = pd.read_csv(folder / f"parameters_{model}.tsv", sep="\t")
    values.update(dict(zip(table.parameterId, table.nominalValue, strict=True)))
    species = [s.getId() for s in m.getListOfSpecies()]
    x = sympy.symbols(species)
    rates = []
    for reaction in m.getListOfReactions():
        law = libsbml.formulaToL3String(reaction.getKineticLaw().getMath()).replace("^", "**")
        rate = sympy.sympify(law, locals={s: v for s, v in zip(species, x, strict=True)})
        rates.append(rate.subs(values))
    stoichiometry = np.zeros((len(species), len(rates)))
    for j, reaction in enumerate(m.getListOfReactions()):
        for ref in reaction.getListOfReactants():
            stoichiometry[species.index(ref.getSpecies()), j] -= ref.getStoichiometry()
        for ref in reaction.getListOfProducts():
            stoichiometry[species.index(ref.getSpecies()), j] += ref.getStoichiometry()
    rate_fn = sympy.lambdify([x], rates, "numpy")
    x0 = [s.getInitialConcentration() for s in m.getListOfSpecies()]
    data = pd.read_csv(folder / f"measurementData_{model}.tsv", sep="\t")
    solution = solve_ivp(lambda t, y: stoichiometry @ np.array(rate_fn(y), float),
                         (0.0, data.time.max()), x0, method="Radau", rtol=1e-12,
                         atol=1e-12, dense_output=True)
    observables = pd.read_csv(folder / f"observables_{model}.tsv", sep="\t")
    state_of = dict(zip(observables.observableId, observables.observableFormula,
                        strict=True))
    llh = 0.0
    for row in data.itertuples():
        y = solution.sol(row.time)[species.index(state_of[row.observableId])]
        sigma = float(row.noiseParameters)
        llh += -0.5 * math.log(2 * math.pi * sigma**2) - (row.measurement - y) ** 2 / (
            2 * sigma**2)
    return llh


@pytest.mark.slow
@requires_benchmark
def test_crauste_llh_against_an_independent_solution():
    """Crauste_CellSystems2017 gives llh 1.24e-3 above ``reference.yaml`` at every
    tolerance down to 1e-12, in both solvers: the reference itself differs.  A SciPy
    Radau solution of the model read with libsbml agrees with ours (default tolerances)
    to 1e-6."""
    model = "Crauste_CellSystems2017"
    folder = BENCHMARK / model
    ours = load_problem(folder / f"{model}.yaml", backend="jax").simulator(
        cache=False).evaluate(grad=False)
    assert ours.ok
    assert ours.llh == pytest.approx(_scipy_llh(folder, model), abs=1e-6)

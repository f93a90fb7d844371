"""SBML -> ODE import: hand-built models with hand-derived right-hand sides, unsupported
constructs, overrides, and the suite's Lotka-Volterra model simulated in JAX and torch
against scipy."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

libsbml = pytest.importorskip("libsbml")
sympy = pytest.importorskip("sympy")

from petab_sciml.expressions import TIME  # noqa: E402
from petab_sciml.sbml import (  # noqa: E402
    OdeModel,
    SbmlError,
    UnsupportedSbmlError,
    load_sbml,
)
from tests.support.suite import SUITE, requires_suite  # noqa: E402

# --------------------------------------------------------------------------- builders


class Builder:
    """Tiny helper around libsbml to write test models."""

    def __init__(self, level: int = 3, version: int = 2):
        self.doc = libsbml.SBMLDocument(level, version)
        self.m = self.doc.createModel()
        self.m.setId("test")
        self.level = level

    def compartment(self, cid, size=1.0, constant=True):
        c = self.m.createCompartment()
        c.setId(cid)
        c.setSize(size)
        c.setConstant(constant)
        if self.level >= 3:
            c.setSpatialDimensions(3)
        return c

    def species(
        self, sid, comp, *, conc=None, amount=None, hosu=False, boundary=False, constant=False
    ):
        s = self.m.createSpecies()
        s.setId(sid)
        s.setCompartment(comp)
        if conc is not None:
            s.setInitialConcentration(conc)
        if amount is not None:
            s.setInitialAmount(amount)
        s.setHasOnlySubstanceUnits(hosu)
        s.setBoundaryCondition(boundary)
        s.setConstant(constant)
        return s

    def parameter(self, pid, value=None, constant=True):
        p = self.m.createParameter()
        p.setId(pid)
        if value is not None:
            p.setValue(value)
        p.setConstant(constant)
        return p

    def reaction(self, rid, reactants, products, formula, local=None, modifiers=()):
        r = self.m.createReaction()
        r.setId(rid)
        r.setReversible(False)
        if self.level == 3 and self.doc.getVersion() == 1:
            r.setFast(False)
        for sid, nu in reactants:
            sr = r.createReactant()
            sr.setSpecies(sid)
            sr.setStoichiometry(nu)
            if self.level >= 3:
                sr.setConstant(True)
        for sid, nu in products:
            sr = r.createProduct()
            sr.setSpecies(sid)
            sr.setStoichiometry(nu)
            if self.level >= 3:
                sr.setConstant(True)
        for sid in modifiers:
            r.createModifier().setSpecies(sid)
        kl = r.createKineticLaw()
        for lid, value in (local or {}).items():
            lp = kl.createLocalParameter() if self.level >= 3 else kl.createParameter()
            lp.setId(lid)
            lp.setValue(value)
        kl.setMath(self.formula(formula))
        return r

    def formula(self, text):
        node = libsbml.parseL3Formula(text)
        assert node is not None, libsbml.getLastParseL3Error()
        return node

    def rate_rule(self, var, formula):
        r = self.m.createRateRule()
        r.setVariable(var)
        r.setMath(self.formula(formula))

    def assignment_rule(self, var, formula):
        r = self.m.createAssignmentRule()
        r.setVariable(var)
        r.setMath(self.formula(formula))

    def initial_assignment(self, sym, formula):
        ia = self.m.createInitialAssignment()
        ia.setSymbol(sym)
        ia.setMath(self.formula(formula))

    def function(self, fid, formula):
        fd = self.m.createFunctionDefinition()
        fd.setId(fid)
        fd.setMath(self.formula(formula))

    def xml(self) -> str:
        return libsbml.writeSBMLToString(self.doc)

    def load(self) -> OdeModel:
        # through XML, as a file would be read
        return load_sbml(self.xml())


def rhs_at(model: OdeModel, x=None, p=None, t=0.0, extra=()):
    """dx/dt with the numpy backend at the initial state (default) and nominal values."""
    p = model.constant_values() if p is None else p
    groups = [list(g) for g, _ in extra]
    if x is None:
        x = model.compile_initial("numpy", extra=groups)(t, p, *[v for _, v in extra])
    return model.compile_rhs("numpy", extra=groups)(t, x, p, *[v for _, v in extra])


def x0_of(model: OdeModel, extra=()):
    groups = [list(g) for g, _ in extra]
    return model.compile_initial("numpy", extra=groups)(
        0.0, model.constant_values(), *[v for _, v in extra]
    )


# ----------------------------------------------------------------- supported subset


@pytest.fixture
def units_model():
    b = Builder()
    b.compartment("c1", 2.0)
    b.compartment("c2", 0.5)
    b.species("A", "c1", conc=3.0)  # concentration 3
    b.species("B", "c1", conc=1.5, hosu=True)  # amount = 1.5 * 2 = 3
    b.species("C", "c2", amount=1.0)  # concentration = 1 / 0.5 = 2
    b.species("D", "c1", conc=5.0, boundary=True)
    b.species("E", "c2", conc=7.0, boundary=True, constant=True)
    b.parameter("k1", 0.5)
    b.parameter("k2", 2.0)
    b.parameter("k", 100.0)  # shadowed by R2's local parameter
    b.reaction("R1", [("A", 1), ("D", 1)], [("B", 2)], "k1 * A * D * c1")  # 15
    b.reaction("R2", [("B", 1)], [("C", 1)], "k * B", local={"k": 0.25})  # 0.75
    b.reaction("R3", [("C", 3)], [("E", 1)], "k2 * C * c2")  # 2
    return b.load()


def test_species_units_compartments_boundary_and_local_parameters(units_model):
    m = units_model
    assert m.state_ids == ("A", "B", "C", "D", "E")
    assert m.species["B"].unit == "amount" and m.species["A"].unit == "concentration"
    # local parameter promoted, global of the same id untouched
    assert m.parameters == {"k1": 0.5, "k2": 2.0, "k": 100.0, "R2_k": 0.25}
    assert m.compartments == {"c1": 2.0, "c2": 0.5}
    np.testing.assert_allclose(x0_of(m), [3.0, 3.0, 2.0, 5.0, 7.0])
    # dA/dt = -15 / 2; dB/dt = 2 * 15 - 0.75 (amount); dC/dt = (0.75 - 3 * 2) / 0.5
    np.testing.assert_allclose(rhs_at(m), [-7.5, 29.25, -10.5, 0.0, 0.0])
    assert m.fluxes["R2"] == sympy.Symbol("R2_k") * sympy.Symbol("B")
    # reaction ids are available (expanded) for observables
    assert m.assignments()["R1"] == sympy.sympify("k1 * A * D * c1")


def test_changed_compartment_size_rescales_concentration_rates(units_model):
    m = units_model.with_values({"c1": 4.0, "R2_k": 0.5})
    # x0: A=3 (conc), B = 1.5 * 4 = 6 (amount); R1 = 0.5*3*5*4 = 30, R2 = 0.5*6 = 3
    np.testing.assert_allclose(x0_of(m)[:2], [3.0, 6.0])
    np.testing.assert_allclose(rhs_at(m)[:3], [-30 / 4, 60 - 3, (3 - 6) / 0.5])
    with pytest.raises(SbmlError, match="not a constant"):
        units_model.with_values({"A": 1.0})


@pytest.fixture
def rules_model():
    b = Builder()
    b.compartment("c", 1.0)
    b.species("S", "c", conc=10.0)
    b.species("T", "c", conc=0.0)
    b.species("Y", "c", conc=0.0, boundary=True)
    b.parameter("kdeg", 0.1)
    b.parameter("p1", constant=False)
    b.parameter("aux", constant=False)
    b.parameter("Z", 1.0, constant=False)
    b.parameter("k0", 3.0)
    b.parameter("kia", 0.0)
    b.function("g", "lambda(x, x^2)")
    b.function("f", "lambda(a, b, a * b + g(a))")
    # p1 is defined before the rule it depends on: substitution follows dependencies
    b.assignment_rule("p1", "2 * kdeg + aux")
    b.assignment_rule("aux", "time")
    b.assignment_rule("Y", "2 * S")
    b.rate_rule("Z", "p1 * S")
    b.initial_assignment("kia", "k0 * 2")
    b.initial_assignment("T", "S * kia / 2")
    b.reaction("R", [("S", 1)], [("T", 1)], "f(kdeg, S) + piecewise(1, time > 5, 0)")
    return b.load()


def test_rules_initial_assignments_functions_piecewise(rules_model):
    m = rules_model
    assert m.state_ids == ("S", "T", "Z")
    assert m.state_kinds == {"S": "species", "T": "species", "Z": "parameter"}
    assert m.derived.keys() == {"kia"} and "kia" not in m.parameters
    np.testing.assert_allclose(x0_of(m), [10.0, 30.0, 1.0])
    # R = kdeg*S + kdeg^2 (+1 after t=5); dZ/dt = (0.2 + t) * S
    np.testing.assert_allclose(rhs_at(m, t=0.0), [-1.01, 1.01, 2.0])
    np.testing.assert_allclose(rhs_at(m, t=6.0), [-2.01, 2.01, 62.0])
    a = m.assignments()
    assert a["Y"] == 2 * sympy.Symbol("S")
    assert a["p1"] == 2 * sympy.Symbol("kdeg") + TIME
    assert a["kia"] == 2 * sympy.Symbol("k0")
    # expressions over the model (observables) expand rules
    f = m.compile_expressions(["Y + p1", "kia * T"], "numpy")
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(f(1.0, x, m.constant_values()), [2 + 1.2, 12.0])


def test_rate_rule_compartment_dilutes_concentrations():
    b = Builder()
    b.compartment("V", 2.0, constant=False)
    b.species("A", "V", conc=1.0)
    b.species("N", "V", amount=4.0, hosu=True)
    b.parameter("kp", 1.0)
    b.rate_rule("V", "0.1 * V")
    b.reaction("prod", [], [("A", 1), ("N", 1)], "kp")
    m = b.load()
    assert m.state_ids == ("A", "N", "V") and m.state_kinds["V"] == "compartment"
    np.testing.assert_allclose(x0_of(m), [1.0, 4.0, 2.0])
    # d[A]/dt = kp / V - [A] * dV/dt / V ; amounts are not diluted
    np.testing.assert_allclose(rhs_at(m), [1 / 2 - 1.0 * 0.2 / 2, 1.0, 0.2])


def test_conversion_factor_and_level2_local_parameters():
    b = Builder(2, 4)
    b.compartment("c", 1.0)
    b.species("A", "c", conc=2.0)
    b.reaction("R", [("A", 1)], [], "k * A", local={"k": 3.0})
    m = b.load()
    assert m.parameters == {"R_k": 3.0}
    np.testing.assert_allclose(rhs_at(m), [-6.0])

    b = Builder()
    b.compartment("c", 1.0)
    b.species("A", "c", conc=2.0).setConversionFactor("cf")
    b.parameter("cf", 0.5)
    b.reaction("R", [("A", 1)], [], "A")
    np.testing.assert_allclose(rhs_at(b.load()), [-1.0])


MATH = [
    ("exp(x) + ln(x) + log10(x) + log(2, x)",
     math.exp(0.6) + math.log(0.6) + math.log10(0.6) + math.log2(0.6)),
    ("abs(-x) + floor(x * 3) + ceil(x) + sqrt(x) + root(3, x) + x^2 + pow(x, 3)",
     0.6 + 1 + 1 + math.sqrt(0.6) + 0.6 ** (1 / 3) + 0.36 + 0.216),
    ("sin(x) + cos(x) + tan(x) + sec(x) + csc(x) + cot(x)",
     math.sin(0.6) + math.cos(0.6) + math.tan(0.6) + 1 / math.cos(0.6) + 1 / math.sin(0.6)
     + 1 / math.tan(0.6)),
    ("arcsin(x) + arccos(x) + arctan(x) + sinh(x) + cosh(x) + tanh(x) + arcsinh(x)"
     " + arctanh(x) + arccosh(x + 1)",
     math.asin(0.6) + math.acos(0.6) + math.atan(0.6) + math.sinh(0.6) + math.cosh(0.6)
     + math.tanh(0.6) + math.asinh(0.6) + math.atanh(0.6) + math.acosh(1.6)),
    ("max(x, 0.2, 1) + min(x, 0.2) + piecewise(1, x > 1, 2, x < 0.5, 3)", 1 + 0.2 + 3),
    ("piecewise(5, (x > 0.5) && (x < 0.7), 0) + piecewise(1, !(x > 1) || false, 0)", 6),
    ("pi + exponentiale + quotient(7, 2) + rem(7, 2) + quotient(-7, 2)",
     math.pi + math.e + 3 + 1 - 3),
    ("piecewise(1, xor(x > 0, x > 1), 0) + piecewise(1, implies(x > 1, false), 0)", 2),
    ("avogadro / 1e23", 6.02214179),  # the value SBML Level 3 fixes
]  # fmt: skip


@pytest.mark.parametrize(("formula", "value"), MATH, ids=[f"m{i}" for i in range(len(MATH))])
def test_mathml_functions(formula, value):
    b = Builder()
    b.parameter("x", 0.6)
    b.parameter("y", 0.0, constant=False)
    b.rate_rule("y", formula)
    m = b.load()
    assert rhs_at(m)[0] == pytest.approx(value, rel=1e-7)


def test_level2_file_without_sizes_and_values():
    b = Builder(2, 4)
    c = b.m.createCompartment()
    c.setId("c")  # no size: 1.0
    b.species("A", "c")  # no initial value: NaN (PEtab must provide it)
    b.parameter("k")  # no value: NaN
    b.reaction("R", [("A", 1)], [], "k * A")
    m = b.load()
    assert m.compartments == {"c": 1.0}
    assert math.isnan(m.parameters["k"])
    assert math.isnan(x0_of(m)[0])
    m2 = m.with_values({"k": 2.0}).override({"A": 3})
    np.testing.assert_allclose(rhs_at(m2), [-6.0])


# ------------------------------------------------------------------------ overrides


def test_override_parameter_with_network_output_and_initial_value(units_model):
    m = units_model.override({"k1": "net_out * 2", "A": "pA + B"})
    assert "k1" not in m.constant_ids
    assert m.external_symbols() == ("net_out", "pA")
    extra = [(["net_out"], np.array([0.25])), (["pA"], np.array([1.0]))]
    # A(0) = pA + B(0) = 1 + 3 = 4; R1 = (0.25*2) * 4 * 5 * 2 = 20
    np.testing.assert_allclose(x0_of(m, extra)[:2], [4.0, 3.0])
    np.testing.assert_allclose(rhs_at(m, extra=extra)[:2], [-10.0, 40 - 0.75])
    # a state-dependent value for a parameter is an assignment rule (hybridization)
    m3 = units_model.override({"k1": "A / 3"})
    np.testing.assert_allclose(rhs_at(m3)[0], -(1.0 * 3 * 5 * 2) / 2)


def test_override_errors(units_model, rules_model):
    with pytest.raises(SbmlError, match="not a species, compartment or parameter"):
        units_model.override({"nope": 1})
    with pytest.raises(SbmlError, match="reaction rate"):
        units_model.override({"R1": 1})
    with pytest.raises(SbmlError, match="time-varying compartments"):
        units_model.override({"c1": "A"})
    ok = units_model.override({"c1": "k2 * 2"})
    assert "c1" not in ok.compartment_ids
    np.testing.assert_allclose(rhs_at(ok)[0], -(0.5 * 3 * 5 * 4) / 4)
    with pytest.raises(SbmlError, match="circular definition"):
        rules_model.override({"aux": "p1"}).rhs()
    with pytest.raises(Exception, match="unknown function"):
        units_model.override({"k1": "foo(1)"}, context="conditions.tsv")


def test_override_rule_target_and_derived(rules_model):
    m = rules_model.override({"aux": 0, "kia": "k0"})
    np.testing.assert_allclose(x0_of(m), [10.0, 15.0, 1.0])
    np.testing.assert_allclose(rhs_at(m, t=3.0)[2], 0.2 * 10)


# --------------------------------------------------------------------- unsupported


def _base() -> Builder:
    b = Builder()
    b.compartment("c", 1.0)
    b.species("A", "c", conc=1.0)
    b.parameter("k", 1.0)
    return b


def _assert_unsupported(b: Builder, *fragments):
    with pytest.raises(UnsupportedSbmlError) as err:
        b.load()
    for f in fragments:
        assert f in str(err.value), str(err.value)


def test_event_with_compound_trigger_is_rejected():
    b = _base()
    ev = b.m.createEvent()
    ev.setId("ev1")
    ev.setUseValuesFromTriggerTime(True)
    tr = ev.createTrigger()
    tr.setMath(b.formula("time > 1 || A > 2"))
    tr.setPersistent(True)
    tr.setInitialValue(False)
    ea = ev.createEventAssignment()
    ea.setVariable("A")
    ea.setMath(b.formula("0"))
    _assert_unsupported(b, "event 'ev1'", "not one comparison")


def test_algebraic_rule_is_rejected():
    b = _base()
    b.parameter("z", 0.0, constant=False)
    ar = b.m.createAlgebraicRule()
    ar.setMath(b.formula("z - k"))
    _assert_unsupported(b, "algebraicRule", "algebraic rules are not supported", "z - k")


def test_delay_is_rejected():
    b = _base()
    b.reaction("R1", [("A", 1)], [], "k * delay(A, 1)")
    _assert_unsupported(b, "reaction 'R1' kineticLaw", "delay() is not supported")


def test_delay_inside_function_definition_is_rejected():
    b = _base()
    b.function("lag", "lambda(u, delay(u, 2))")
    b.parameter("y", 0.0, constant=False)
    b.rate_rule("y", "lag(A)")
    _assert_unsupported(b, "rateRule 'y'", "functionDefinition 'lag'", "delay()")


def test_rate_of_is_rejected():
    b = _base()
    b.parameter("y", 0.0, constant=False)
    b.assignment_rule("y", "rateOf(A)")
    _assert_unsupported(b, "assignmentRule 'y'", "rateOf() is not supported")


def test_factorial_is_rejected():
    b = _base()
    b.initial_assignment("A", "factorial(3)")
    _assert_unsupported(b, "initialAssignment 'A'", "factorial()")


def test_fast_reaction_is_rejected():
    b = Builder(3, 1)
    b.compartment("c", 1.0)
    b.species("A", "c", conc=1.0)
    r = b.reaction("R1", [("A", 1)], [], "A")
    r.setFast(True)
    _assert_unsupported(b, "reaction 'R1'", "fast reactions are not supported")


def test_variable_stoichiometry_is_rejected():
    b = _base()
    r = b.reaction("R1", [("A", 1)], [], "k * A")
    r.getReactant(0).setId("sr1")
    r.getReactant(0).setConstant(False)
    b.parameter("s", 1.0)
    b.assignment_rule("sr1", "s * 2")
    _assert_unsupported(b, "reaction 'R1' speciesReference 'sr1'", "variable stoichiometry")


def test_stoichiometry_math_is_rejected():
    b = Builder(2, 4)
    b.compartment("c", 1.0)
    b.species("A", "c", conc=1.0)
    r = b.reaction("R1", [("A", 1)], [], "A")
    r.getReactant(0).unsetStoichiometry()
    sm = r.getReactant(0).createStoichiometryMath()
    sm.setMath(b.formula("2"))
    _assert_unsupported(b, "reaction 'R1' speciesReference 'A'", "stoichiometryMath")


def test_required_package_is_rejected():
    """(``comp`` is flattened on load instead.)"""
    ns = libsbml.SBMLNamespaces(3, 1, "qual", 1)
    doc = libsbml.SBMLDocument(ns)
    doc.setPackageRequired("qual", True)
    doc.createModel().setId("m")
    with pytest.raises(UnsupportedSbmlError, match="package 'qual'"):
        load_sbml(libsbml.writeSBMLToString(doc))


def test_stoichiometry_constant_species_reference_in_math_is_supported():
    b = _base()
    r = b.reaction("R1", [("A", 2)], [], "k")
    r.getReactant(0).setId("sr1")
    b.parameter("y", 0.0, constant=False)
    b.rate_rule("y", "sr1 * 10")
    np.testing.assert_allclose(rhs_at(b.load()), [-2.0, 20.0])


def test_inconsistent_models_are_errors():
    b = _base()
    b.parameter("y", 0.0, constant=False)
    b.rate_rule("y", "undefined_thing * 2")
    with pytest.raises(SbmlError, match="undefined symbol 'undefined_thing'") as err:
        b.load()
    assert "rateRule 'y'" in str(err.value)
    assert not isinstance(err.value, UnsupportedSbmlError)

    b = _base()
    b.parameter("time", 1.0)
    with pytest.raises(SbmlError, match="reserved"):
        b.load()

    b = _base()
    b.parameter("u", constant=False)
    b.parameter("v", constant=False)
    b.assignment_rule("u", "v + 1")
    b.assignment_rule("v", "u * 2")
    b.rate_rule("A", "u")
    with pytest.raises(SbmlError, match="circular definition in assignment rules"):
        b.load().rhs()

    with pytest.raises(SbmlError, match="not found"):
        load_sbml("/nonexistent/model.xml")
    with pytest.raises(SbmlError, match="invalid SBML"):
        load_sbml("<sbml><model></sbml>")


# ------------------------------------------------------- suite Lotka-Volterra model

CASES = SUITE / "test_cases" / "sciml_problem_import" if SUITE is not None else None


def _nominal(case: str) -> dict[str, float]:
    with open(CASES / case / "petab" / "parameters.tsv") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return {r["parameterId"]: float(r["nominalValue"]) for r in rows
            if r["nominalValue"] != "array"}  # fmt: skip


def _measurement_times(case: str) -> np.ndarray:
    with open(CASES / case / "petab" / "measurements.tsv") as fh:
        return np.array(sorted({float(r["time"]) for r in csv.DictReader(fh, delimiter="\t")}))


@requires_suite
@pytest.mark.slow
def test_suite_lv_simulation_diffrax_torchdiffeq_vs_scipy():
    case = "001"  # the network-in-RHS variant (v4 = gamma); 002's model is used below
    scipy_integrate = pytest.importorskip("scipy.integrate")
    model = load_sbml(CASES / case / "petab" / "lv.xml")
    assert model.state_ids == ("prey", "predator")
    nominal = _nominal(case)
    # gamma is the network output in the suite: here a constant passed as an extra symbol
    model = model.override({"gamma": "net_gamma"}).with_values(
        {k: v for k, v in nominal.items() if k in model.parameters}
    )
    constants = model.constant_ids
    assert "gamma" not in constants
    p = model.constant_values()
    gamma = np.array([0.8])
    ts = np.concatenate([[0.0], _measurement_times(case)])
    extra = [["net_gamma"]]

    x0 = model.compile_initial("numpy", extra=extra)(0.0, p, gamma)
    np.testing.assert_allclose(x0, [0.44249296, 4.6280594])
    f_np = model.compile_rhs("numpy", extra=extra)
    ref = scipy_integrate.solve_ivp(
        lambda t, x: f_np(t, x, p, gamma), (0.0, ts[-1]), x0, method="DOP853",
        t_eval=ts, rtol=1e-12, atol=1e-12,
    ).y.T  # fmt: skip

    jax = pytest.importorskip("jax")
    diffrax = pytest.importorskip("diffrax")
    import jax.numpy as jnp

    f_jax = model.compile_rhs("jax", extra=extra)
    with jax.enable_x64(True):

        @jax.jit
        def solve(p, gamma):
            term = diffrax.ODETerm(lambda t, y, args: f_jax(t, y, *args))
            sol = diffrax.diffeqsolve(
                term, diffrax.Tsit5(), t0=0.0, t1=float(ts[-1]), dt0=0.01,
                y0=jnp.asarray(x0), args=(p, gamma), saveat=diffrax.SaveAt(ts=jnp.asarray(ts)),
                stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-10),
                max_steps=100_000,
            )  # fmt: skip
            return sol.ys

        ys_jax = np.asarray(solve(jnp.asarray(p), jnp.asarray(gamma)))
    np.testing.assert_allclose(ys_jax, ref, rtol=1e-6)

    torch = pytest.importorskip("torch")
    torchdiffeq = pytest.importorskip("torchdiffeq")
    f_torch = model.compile_rhs("torch", extra=extra)
    pt = torch.tensor(p)
    gt = torch.tensor(gamma)
    ys_torch = torchdiffeq.odeint(
        lambda t, y: f_torch(t, y, pt, gt), torch.tensor(x0), torch.tensor(ts),
        method="dopri5", rtol=1e-10, atol=1e-10,
    )  # fmt: skip
    np.testing.assert_allclose(ys_torch.numpy(), ref, rtol=1e-6)


@requires_suite
def test_suite_hybridization_targets_on_lv():
    # case 007: the network output sets prey's initial value; case 001: gamma in the RHS
    model = load_sbml(CASES / "007" / "petab" / "lv.xml")
    m = model.override({"prey": "net1_output1"})
    assert m.external_symbols() == ("net1_output1",)
    x0 = m.compile_initial("numpy", extra=[["net1_output1"]])(0.0, m.constant_values(), [2.5])
    np.testing.assert_allclose(x0, [2.5, 4.6280594])
    m1 = load_sbml(CASES / "001" / "petab" / "lv.xml").override({"gamma": "net1_output1"})
    assert [str(e) for e in m1.rhs()] == [
        "alpha*prey - beta*predator*prey",
        "-delta*predator + net1_output1",
    ]


@requires_suite
@pytest.mark.slow
def test_suite_lv_gradients_through_solvers_match_finite_differences():
    """d(sum of states at the measurement times)/dp, x0 included, vs scipy central FD."""
    scipy_integrate = pytest.importorskip("scipy.integrate")
    torch = pytest.importorskip("torch")
    torchdiffeq = pytest.importorskip("torchdiffeq")
    jax = pytest.importorskip("jax")
    diffrax = pytest.importorskip("diffrax")
    import jax.numpy as jnp

    model = load_sbml(CASES / "002" / "petab" / "lv.xml")
    p = model.constant_values()  # alpha, beta, gamma, delta, default (compartment)
    ts = np.linspace(0.0, 5.0, 6)
    f_np, x0_np = model.compile_rhs("numpy"), model.compile_initial("numpy")

    def total(pp):
        sol = scipy_integrate.solve_ivp(
            lambda t, x: f_np(t, x, pp), (0.0, ts[-1]), x0_np(0.0, pp), method="DOP853",
            t_eval=ts, rtol=1e-13, atol=1e-13,
        )  # fmt: skip
        return sol.y.sum()

    h = 1e-6
    fd = np.array([(total(p + e) - total(p - e)) / (2 * h) for e in np.eye(len(p)) * h])
    assert abs(fd[-1]) > 1  # the compartment size enters through x0 (amount = conc * V)

    f_t, x0_t = model.compile_rhs("torch"), model.compile_initial("torch")
    pt = torch.tensor(p, requires_grad=True)
    ys = torchdiffeq.odeint(
        lambda t, y: f_t(t, y, pt), x0_t(0.0, pt), torch.tensor(ts),
        method="dopri5", rtol=1e-10, atol=1e-10,
    )  # fmt: skip
    ys.sum().backward()
    np.testing.assert_allclose(pt.grad.numpy(), fd, rtol=1e-5)

    f_j, x0_j = model.compile_rhs("jax"), model.compile_initial("jax")
    with jax.enable_x64(True):

        def loss(pp):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(lambda t, y, a: f_j(t, y, a)), diffrax.Tsit5(), t0=0.0,
                t1=float(ts[-1]), dt0=0.01, y0=x0_j(0.0, pp), args=pp,
                saveat=diffrax.SaveAt(ts=jnp.asarray(ts)),
                stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-10),
                max_steps=100_000,
            )  # fmt: skip
            return jnp.sum(sol.ys)

        g = np.asarray(jax.jit(jax.grad(loss))(jnp.asarray(p)))
    np.testing.assert_allclose(g, fd, rtol=1e-5)

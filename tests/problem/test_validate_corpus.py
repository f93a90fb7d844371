"""The invalid corpus: every mutation yields its expected issue code at its location, and
every MUST rule of the SciML specification (and our dropout rule) has a mutation."""

from __future__ import annotations

import pytest

from petab_sciml.problem import RULES, Severity, validate_problem
from tests.support.invalid_problems.mutate import apply, copy_case, load_mutations, load_twins
from tests.support.suite import SUITE, requires_suite

MUTATIONS = load_mutations()
TWINS = load_twins()

SPEC_AGREEMENT_RULES = {
    # issue 13, point 1: each rule has a failing mutation and a passing twin
    "PARAM_BOUNDS_INVALID", "PARAM_PRIOR_IMPROPER", "PARAM_ID_MODEL_ENTITY",
    "HYB_CONDITION_CONFLICT", "OBSERVABLE_UNKNOWN_SYMBOL", "EXT_VERSION_MISSING",
    "ARRAY_INPUT_GLOBAL_AND_CONDITIONS", "ARRAY_PARAMETERS_UNKNOWN_NETWORK",
    "ARRAY_INPUT_SHAPE_MISMATCH", "MAPPING_INPUT_INDEX_OUT_OF_RANGE",
    "MAPPING_OUTPUT_INDEX_OUT_OF_RANGE", "MAPPING_ALIAS_OF_VALID_ID",
}


def test_corpus_size_and_names():
    assert len(MUTATIONS) >= 40
    names = [m["name"] for m in MUTATIONS]
    assert len(names) == len(set(names))


def test_every_must_rule_has_a_mutation():
    covered = {m["expect"]["code"] for m in MUTATIONS}
    must = {r.code for r in RULES.values()
            if r.source in ("sciml", "ext") and r.severity == Severity.ERROR}
    assert must - covered == set()


@requires_suite
@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m["name"] for m in MUTATIONS])
def test_mutation_yields_expected_issue(mutation, tmp_path):
    problem = copy_case(SUITE, mutation["base"], tmp_path / "p")
    apply(problem.parent, mutation["ops"])
    report = validate_problem(problem)
    expect = mutation["expect"]
    assert not report.ok, "mutated problem should be invalid"
    matches = [i for i in report.issues if i.code == expect["code"]]
    assert matches, f"expected {expect['code']}, got " + "; ".join(map(str, report.issues))
    fields = {k: v for k, v in expect.items() if k != "code"}
    located = [i for i in matches if all(getattr(i, k) == v for k, v in fields.items())]
    assert located, (f"{expect['code']} not at {fields}: "
                     + "; ".join(map(str, matches)))
    assert all(i.code != "INTERNAL_ERROR" for i in report.issues)


def test_every_spec_agreement_rule_has_a_failing_mutation_and_a_passing_twin():
    failing = {m["expect"]["code"] for m in MUTATIONS}
    passing = {t["expect"]["twin_of"] for t in TWINS}
    assert SPEC_AGREEMENT_RULES - failing == set()
    assert SPEC_AGREEMENT_RULES - passing == set()
    assert len({t["name"] for t in TWINS}) == len(TWINS)


@requires_suite
@pytest.mark.parametrize("twin", TWINS, ids=[t["name"] for t in TWINS])
def test_passing_twin_stays_valid(twin, tmp_path):
    problem = copy_case(SUITE, twin["base"], tmp_path / "p")
    apply(problem.parent, twin["ops"])
    report = validate_problem(problem)
    assert report.ok, "; ".join(map(str, report.issues.errors))
    expect = {k: v for k, v in twin["expect"].items() if k != "twin_of"}
    if expect:
        fields = {k: v for k, v in expect.items() if k != "code"}
        assert [i for i in report.issues if i.code == expect["code"]
                and all(getattr(i, k) == v for k, v in fields.items())], \
            f"expected {expect}, got " + "; ".join(map(str, report.issues))
    if twin.get("load"):
        _load_and_evaluate(problem)


def _load_and_evaluate(problem):
    """The twin loads and its objective is finite in both backends, and they agree."""
    import numpy as np

    from petab_sciml.problem import load_problem

    values = []
    for backend in ("torch", "jax"):
        pytest.importorskip(backend)
        values.append(float(load_problem(problem, backend).objective()))
    assert all(np.isfinite(values))
    assert values[0] == pytest.approx(values[1], rel=1e-6)

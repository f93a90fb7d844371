"""The invalid corpus: every mutation yields its expected issue code at its location, and
every MUST rule of the SciML specification (and our dropout rule) has a mutation."""

from __future__ import annotations

import pytest

from petab_sciml.problem import RULES, Severity, validate_problem
from tests.conftest import SUITE, requires_suite
from tests.invalid_problems.mutate import apply, copy_case, load_mutations

MUTATIONS = load_mutations()


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

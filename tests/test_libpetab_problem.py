"""``load_problem`` takes a ``petab.v2.Problem`` read by libpetab (>= 0.10, Python >= 3.12)
and gives the same objective as the problem's files; edits made in libpetab count."""

from __future__ import annotations

import pytest

from petab_sciml.problem import load_problem
from tests.conftest import SUITE, requires_suite
from tests.invalid_problems.mutate import apply, copy_case
from tests.test_libpetab_agreement import requires_libpetab


def _read(path):
    import petab.v2 as v2

    return v2.Problem.from_yaml(str(path))


@requires_suite
@requires_libpetab
@pytest.mark.parametrize("case", ["sciml_problem_import/003", "sciml_problem_import/014",
                                  "sciml_problem_import/038"])
def test_libpetab_problem_loads_like_its_files(case):
    path = SUITE / "test_cases" / case / "petab" / "problem.yaml"
    expected = load_problem(path).objective()
    assert load_problem(_read(path)).objective() == pytest.approx(expected, rel=1e-12)


@requires_suite
@requires_libpetab
def test_edits_in_libpetab_are_loaded(tmp_path):
    path = copy_case(SUITE, "sciml_problem_import/003", tmp_path / "a")
    problem = _read(path)
    next(p for p in problem.parameters if p.id == "net1_input_pre1").nominal_value = 2.5
    edited = load_problem(problem).objective()
    twin = copy_case(SUITE, "sciml_problem_import/003", tmp_path / "b")
    apply(twin.parent, [{"set_cell": {"file": "parameters.tsv", "row": 5,
                                      "column": "nominalValue", "value": "2.5"}}])
    assert edited == pytest.approx(load_problem(twin).objective(), rel=1e-12)
    assert edited != pytest.approx(load_problem(path).objective(), rel=1e-6)


def test_other_objects_are_refused():
    with pytest.raises(TypeError, match="petab.v2.Problem, got int"):
        load_problem(3)

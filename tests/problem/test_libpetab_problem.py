"""``load_problem`` takes a ``petab.v2.Problem`` read by libpetab (>= 0.10, Python >= 3.12)
and gives the same objective as the problem's files; edits made in libpetab count."""

from __future__ import annotations

import pytest

from petab_sciml.problem import load_problem
from tests.problem.test_validate_libpetab_agreement import requires_libpetab
from tests.support.invalid_problems.mutate import apply, copy_case
from tests.support.suite import SUITE, requires_suite


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


def test_official_names_are_exported():
    import petab_sciml
    from petab_sciml import official_api

    assert petab_sciml._OFFICIAL_NAMES == set(official_api.__all__)
    assert petab_sciml.ARRAY == "array" and petab_sciml.Layers.Linear == "Linear"
    assert petab_sciml.NN_ENTITY_PATTERN.match("net1.inputs[0][1]").group("entity_type") \
        == "inputs"


@requires_suite
def test_official_api_reads_suite_files():
    from petab_sciml import ArrayDataStandard, NNModelStandard

    petab = SUITE / "test_cases" / "sciml_problem_import" / "038" / "petab"
    model = NNModelStandard.load_data(petab / "net6.yaml", nn_model_id="other")
    assert model.nn_model_id == "other" and model.layers[0].layer_type == "Linear"
    data = ArrayDataStandard.load_data(petab / "net6_input2.hdf5")
    assert set(data.inputs["net6_input2"]) == {"cond1", "cond2"}
    assert data.inputs["net6_input2"]["cond1"].shape == (3,)
    assert data.metadata.pytorch_format is True


@requires_libpetab
def test_petab_v2_imports_beside_us():
    from petab.v2.lint import default_validation_tasks, sciml_validation_tasks

    assert len(sciml_validation_tasks) == len(default_validation_tasks) + 5

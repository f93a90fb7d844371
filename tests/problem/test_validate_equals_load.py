"""What ``validate`` accepts, loading accepts: the SBML import and the simulation plan
that ``load_problem`` needs run during validation too.

Each problem here used to validate and then fail at load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("libsbml")
pytest.importorskip("sympy")

from petab_sciml.cli import main  # noqa: E402
from petab_sciml.expressions import ExpressionError  # noqa: E402
from petab_sciml.problem import load_problem, validate_problem  # noqa: E402
from petab_sciml.problem.loader import ProblemError  # noqa: E402
from petab_sciml.problem.upgrade import upgrade_problem  # noqa: E402
from petab_sciml.sbml import SbmlError, UnsupportedSbmlError  # noqa: E402
from tests.support.problems import models  # noqa: E402
from tests.support.suite import REPO  # noqa: E402

LOAD_ERRORS = {"MODEL_INVALID": SbmlError, "MODEL_UNSUPPORTED": UnsupportedSbmlError,
               "FORMULA_INVALID": ExpressionError}

EVENT = """    <listOfEvents>
      <event id="e1" useValuesFromTriggerTime="true">
        <trigger initialValue="false" persistent="true">
          <math xmlns="http://www.w3.org/1998/Math/MathML">
            <apply><gt/><csymbol encoding="text"
              definitionURL="http://www.sbml.org/sbml/symbols/time"> t </csymbol>
              <cn> 1 </cn></apply>
          </math>
        </trigger>
        <delay><math xmlns="http://www.w3.org/1998/Math/MathML"><cn> 2 </cn></math></delay>
        <listOfEventAssignments>
          <eventAssignment variable="prey">
            <math xmlns="http://www.w3.org/1998/Math/MathML"><cn> 1 </cn></math>
          </eventAssignment>
        </listOfEventAssignments>
      </event>
    </listOfEvents>
"""


@pytest.fixture
def neural_ode(tmp_path) -> Path:
    """The how_to_neural_ode-like problem, upgraded (valid, loads)."""
    return upgrade_problem(models.how_to_neural_ode().problem, tmp_path / "p").problem


def _assert_validate_and_load_agree(problem: Path, code: str, text: str) -> None:
    report = validate_problem(problem, libpetab=False)
    (issue,) = report.issues.errors
    assert issue.code == code and text in issue.message, str(issue)
    assert CliRunner().invoke(main, ["validate", str(problem)]).exit_code == 1
    with pytest.raises(LOAD_ERRORS[code]) as info:   # what the plan builder raises
        load_problem(problem, backend="torch")
    assert text in str(info.value) and issue.message in str(info.value)
    # without a simulation the networks still load
    assert load_problem(problem, backend="torch", simulation=False).plan is None


def test_invalid_sbml_of_the_official_neural_ode_example(neural_ode):
    """The official how_to_neural_ode model had a compartment without id, species
    without compartment and species references without ``constant``: libsbml rejects it
    when loading reads it, so validation does too, with libsbml's words."""
    (neural_ode.parent / "lv.xml").write_text(models.neural_ode_invalid_sbml())
    report = validate_problem(neural_ode, libpetab=False)
    (issue,) = report.issues.errors
    assert (issue.code, issue.file) == ("MODEL_INVALID", "lv.xml")
    assert "invalid SBML: line" in issue.message
    assert "The required attribute 'id' is missing" in issue.message
    assert "\n" not in issue.message                       # one line per issue
    _assert_validate_and_load_agree(neural_ode, "MODEL_INVALID", "required attribute")


def test_unsupported_sbml_construct(neural_ode):
    sbml = neural_ode.parent / "lv.xml"
    sbml.write_text(sbml.read_text().replace("  </model>", EVENT + "  </model>"))
    _assert_validate_and_load_agree(neural_ode, "MODEL_UNSUPPORTED", "event")


def test_empty_observable_formula(neural_ode):
    """Found by the formula checks (issue 16) before the plan is built, at its cell; loading
    refuses it with the same issue."""
    observables = neural_ode.parent / "observables.tsv"
    observables.write_text(observables.read_text().replace("prey_o\tprey\t", "prey_o\t\t"))
    report = validate_problem(neural_ode, libpetab=False)
    (issue,) = report.issues.errors
    assert (issue.code, issue.file, issue.row, issue.column) == (
        "EXPRESSION_INVALID", "observables.tsv", 2, "observableFormula"), str(issue)
    assert "observableFormula is empty" in issue.message
    assert CliRunner().invoke(main, ["validate", str(neural_ode)]).exit_code == 1
    with pytest.raises(ProblemError) as info:
        load_problem(neural_ode, backend="torch")
    assert issue.message in str(info.value)


def test_a_valid_problem_has_its_plan_built_once_more_at_load(neural_ode):
    report = validate_problem(neural_ode)
    assert report.ok and report.plan is not None
    problem = load_problem(neural_ode, backend="torch", simulation=True)
    assert problem.plan.state_ids == report.plan.state_ids == ("prey", "predator")


def test_info_exits_1_on_an_invalid_problem(neural_ode):
    assert CliRunner().invoke(main, ["info", str(neural_ode)]).exit_code == 0
    old = models.how_to_neural_ode().problem
    result = CliRunner().invoke(main, ["info", str(old)])
    assert result.exit_code == 1
    assert "invalid (1 error(s)" in result.output
    result = CliRunner().invoke(main, ["info", str(old), "--json"])
    assert result.exit_code == 1 and '"valid": false' in result.output


def test_without_libsbml_validate_says_what_it_did_not_check(neural_ode):
    code = ("import sys; sys.modules['libsbml'] = None; sys.modules['torch'] = None; "
            "sys.modules['jax'] = None\n"
            "from petab_sciml.problem import validate_problem\n"
            f"r = validate_problem({str(neural_ode)!r})\n"
            "assert r.ok, r.issues\n"
            "print(sorted(i.code for i in r.issues))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO)
    assert out.stdout.strip() == "['SIMULATION_NOT_CHECKED']", out.stderr

"""``validate --libpetab``: libpetab's findings beside ours, tagged, on problems our checks
accept; never deciding validity, never crashing; off by default."""

from __future__ import annotations

import sys
import types

from click.testing import CliRunner

from petab_sciml.cli_problem import validate
from petab_sciml.problem import Severity, libpetab_lint, validate_problem
from tests.problem.test_validate_libpetab_agreement import requires_libpetab
from tests.support.invalid_problems.mutate import apply, copy_case
from tests.support.suite import SUITE, requires_suite

PROBLEM = None if SUITE is None else \
    SUITE / "test_cases" / "sciml_problem_import" / "003" / "petab" / "problem.yaml"


@requires_suite
def test_off_by_default():
    assert all(i.code != "LIBPETAB" for i in validate_problem(PROBLEM).issues)


@requires_suite
@requires_libpetab
def test_findings_shown_beside_ours_and_tagged(tmp_path):
    # an experiment no measurement uses: valid for us, a warning for libpetab
    problem = copy_case(SUITE, "sciml_problem_import/003", tmp_path / "p")
    apply(problem.parent, [{"append_row": {"file": "experiments.tsv", "cells": {
        "experimentId": "e3", "time": "0.0", "conditionId": "cond1"}}}])
    result = CliRunner().invoke(validate, [str(problem), "--libpetab"])
    assert result.exit_code == 0, result.output
    assert "LIBPETAB" in result.output and "[libpetab warning (CheckUnusedExperiments)] " \
        "Experiments {'e3'} are not used" in result.output
    ok = CliRunner().invoke(validate, [str(PROBLEM), "--libpetab"])
    assert ok.exit_code == 0 and "reported 0 finding(s)" in ok.output


@requires_suite
def test_not_run_on_a_problem_our_checks_reject(tmp_path, monkeypatch):
    """On an invalid problem the second opinion would only repeat ours, at a far higher
    cost (issue 14: refused inputs validate fast): it is not run, and an info says so."""
    def must_not_run(path):
        raise AssertionError("libpetab ran on a problem with errors")

    monkeypatch.setattr(libpetab_lint, "libpetab_findings", must_not_run)
    problem = copy_case(SUITE, "sciml_problem_import/003", tmp_path / "p")
    apply(problem.parent, [{"append_row": {"file": "hybridization.tsv", "cells": {
        "targetId": "net1_input1", "targetValue": "1.0"}}}])
    result = CliRunner().invoke(validate, [str(problem), "--libpetab"])
    assert result.exit_code == 1
    assert "HYB_CONDITION_CONFLICT" in result.output
    assert "libpetab's second opinion was not run: our own checks found errors" \
        in result.output
    assert "[libpetab" not in result.output


@requires_suite
def test_libpetab_never_decides_validity(monkeypatch):
    monkeypatch.setattr(libpetab_lint, "libpetab_findings",
                        lambda path: [("error", "made-up finding", "CheckX")])
    report = validate_problem(PROBLEM, libpetab=True)
    assert report.ok
    found = [i for i in report.issues if i.code == "LIBPETAB"]
    assert found[0].severity == Severity.WARNING
    assert found[0].message == "[libpetab error (CheckX)] made-up finding"


@requires_suite
def test_libpetab_failure_is_a_finding_not_a_crash(monkeypatch):
    def broken(path):
        raise ValueError("boom\nsecond line")

    fake = types.ModuleType("petab.v2")
    fake.Problem = types.SimpleNamespace(from_yaml=broken)
    monkeypatch.setitem(sys.modules, "petab.v2", fake)
    monkeypatch.setattr(libpetab_lint, "libpetab_version", lambda: (0, 10))
    assert libpetab_lint.libpetab_findings(PROBLEM) == [
        ("critical", "cannot read the problem: ValueError: boom; second line", None)]


@requires_suite
def test_without_libpetab_010_says_so(monkeypatch):
    monkeypatch.setattr(libpetab_lint, "libpetab_version", lambda: (0, 8))
    report = validate_problem(PROBLEM, libpetab=True)
    infos = [i for i in report.issues if i.code == "LIBPETAB"]
    assert report.ok and len(infos) == 1 and infos[0].severity == Severity.INFO
    assert "libpetab >= 0.10 is needed (found: 0.8); it requires Python >= 3.12" \
        in infos[0].message

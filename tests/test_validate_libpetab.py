"""``validate --libpetab``: libpetab's findings beside ours, tagged, never deciding
validity, never crashing; off by default."""

from __future__ import annotations

import sys
import types

from click.testing import CliRunner

from petab_sciml.cli_problem import validate
from petab_sciml.problem import Severity, libpetab_lint, validate_problem
from tests.conftest import SUITE, requires_suite
from tests.invalid_problems.mutate import apply, copy_case
from tests.test_libpetab_agreement import requires_libpetab

PROBLEM = None if SUITE is None else \
    SUITE / "test_cases" / "sciml_problem_import" / "003" / "petab" / "problem.yaml"


@requires_suite
def test_off_by_default():
    assert all(i.code != "LIBPETAB" for i in validate_problem(PROBLEM).issues)


@requires_suite
@requires_libpetab
def test_findings_shown_beside_ours_and_tagged(tmp_path):
    problem = copy_case(SUITE, "sciml_problem_import/003", tmp_path / "p")
    apply(problem.parent, [{"append_row": {"file": "hybridization.tsv", "cells": {
        "targetId": "net1_input1", "targetValue": "1.0"}}}])
    result = CliRunner().invoke(validate, [str(problem), "--libpetab"])
    assert result.exit_code == 1
    assert "HYB_CONDITION_CONFLICT" in result.output
    assert "LIBPETAB" in result.output and "[libpetab error (CheckHybridizationTable)]" \
        in result.output
    ok = CliRunner().invoke(validate, [str(PROBLEM), "--libpetab"])
    assert ok.exit_code == 0 and "reported 0 finding(s)" in ok.output


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

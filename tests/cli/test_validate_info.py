"""``petab-sciml validate`` / ``info``: exit codes, JSON, locations, no code executed,
and docs/validation.md listing every rule."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from petab_sciml.cli_problem import info, validate
from petab_sciml.problem import RULES, validate_problem
from tests.support.invalid_problems.mutate import apply, copy_case
from tests.support.suite import REPO, SUITE, requires_suite

CASE = "sciml_problem_import/023"


@requires_suite
def test_valid_problem_exit_0(tmp_path):
    problem = copy_case(SUITE, CASE, tmp_path / "p")
    result = CliRunner().invoke(validate, [str(problem)])
    assert result.exit_code == 0, result.output
    assert "valid (0 error(s), 0 warning(s))" in result.output


@requires_suite
def test_invalid_problem_exit_1_and_json(tmp_path):
    problem = copy_case(SUITE, CASE, tmp_path / "p")
    apply(problem.parent, [{"set_cell": {"file": "mapping.tsv", "row": 6,
                                         "column": "modelEntityId",
                                         "value": "net1.parameters[layer7]"}}])
    result = CliRunner().invoke(validate, [str(problem), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["valid"] is False and data["errors"] >= 1
    issue = next(i for i in data["issues"] if i["code"] == "MAPPING_UNKNOWN_LAYER")
    assert issue == {"severity": "error", "code": "MAPPING_UNKNOWN_LAYER",
                     "message": issue["message"], "file": "mapping.tsv", "row": 6,
                     "column": "modelEntityId", "path": None}
    text = CliRunner().invoke(validate, [str(problem)]).output
    assert re.search(r"error\s+MAPPING_UNKNOWN_LAYER mapping.tsv, row 6, column "
                     r"modelEntityId: ", text)


def test_usage_error_exit_2(tmp_path):
    assert CliRunner().invoke(validate, [str(tmp_path / "missing.yaml")]).exit_code == 2
    assert CliRunner().invoke(validate, []).exit_code == 2


@requires_suite
def test_info_json(tmp_path):
    problem = copy_case(SUITE, CASE, tmp_path / "p")
    result = CliRunner().invoke(info, [str(problem), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    (net,) = data["networks"]
    assert net["hybridization"] == "simulation" and net["parameter_count"] == 51
    assert net["estimated"] == 36
    rows = {p["id"]: p for p in data["parameters"]}
    assert rows["net1_layer1"]["elements"] == 15 and rows["net1_layer1"]["estimate"] is False
    assert rows["net1_ps"]["effective_elements"] == 36
    assert rows["net1_ps"]["lower"] == "-inf"
    assert rows["alpha"]["targets"] == ["alpha"]
    table = CliRunner().invoke(info, [str(problem)])
    assert table.exit_code == 0 and "net1_layer1" in table.output


@requires_suite
def test_code_formats_are_not_run_without_trust(tmp_path):
    problem = copy_case(SUITE, "sciml_problem_import/001", tmp_path / "p")
    marker = tmp_path / "executed"
    (problem.parent / "net1.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n")
    apply(problem.parent, [
        {"yaml_set": {"path": "extensions.sciml.neural_networks.net1.format",
                      "value": "pytorch"}},
        {"yaml_set": {"path": "extensions.sciml.neural_networks.net1.location",
                      "value": "net1.py"}}])
    report = validate_problem(problem)
    assert not marker.exists()
    codes = {i.code for i in report.issues}
    assert codes & {"NN_CODE_NOT_RUN", "NN_FORMAT_UNKNOWN"}
    assert report.ok, [str(i) for i in report.issues]


def test_core_imports_without_torch_or_jax():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['jax'] = None\n"
            "import petab_sciml.problem, petab_sciml.problem.loader, petab_sciml.cli_problem\n"
            "from petab_sciml.problem import validate_problem, problem_info\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO)
    assert out.stdout.strip() == "ok", out.stderr


@requires_suite
def test_validate_and_info_run_without_torch_or_jax():
    problem = SUITE / "test_cases" / "sciml_problem_import" / "036" / "petab" / "problem.yaml"
    code = ("import sys; sys.modules['torch'] = None; sys.modules['jax'] = None\n"
            "from petab_sciml.problem import validate_problem, problem_info\n"
            f"r = validate_problem({str(problem)!r}); assert r.ok, r.issues\n"
            f"assert problem_info({str(problem)!r})['networks'][0]['parameter_count'] > 0\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO)
    assert out.stdout.strip() == "ok", out.stderr


def test_docs_list_every_rule_once():
    text = (REPO / "docs" / "validation.md").read_text()
    listed = re.findall(r"^\| `([A-Z_]+)` \|", text, flags=re.M)
    assert sorted(listed) == sorted(RULES)


def test_docs_exist():
    for name in ("dropout.md", "problems.md"):
        assert (Path(REPO) / "docs" / name).read_text().strip()

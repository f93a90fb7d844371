"""``--limit NAME=VALUE`` on every command that reads networks or problems, with the
meaning it has in ``convert``: a budget lowered below what the input costs refuses it,
and names the budget; the default lets it through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from petab_sciml.cli import main

REPO = Path(__file__).resolve().parents[2]
CASE = REPO / "test_cases" / "093_two_output"           # 3 -> 6 -> (2, 4): 70 parameters
EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"


def test_test_cases_run_takes_the_limit():
    pytest.importorskip("torch")
    runner = CliRunner()
    ok = runner.invoke(main, ["test-cases", "run", "--backend", "torch", "--json", str(CASE)])
    assert ok.exit_code == 0, ok.output
    low = runner.invoke(main, ["test-cases", "run", "--backend", "torch", "--json",
                               "--limit", "max_elements=10", str(CASE)])
    assert low.exit_code == 1
    (result,) = json.loads(low.stdout)["results"]
    assert "LimitError" in result["error"] and "max_elements" in result["error"]


@pytest.mark.parametrize("command", [["fit", "--steps", "0", "--in-process", "--no-plots"],
                                     ["validate"]])
def test_fit_takes_the_limit_as_validate_does(command, tmp_path):
    pytest.importorskip("jax")
    extra = ["--out", str(tmp_path / "fit")] if command[0] == "fit" else []
    run = CliRunner().invoke(main, [*command, str(EXAMPLE), *extra,
                                    "--limit", "max_elements=10"])
    assert run.exit_code == 1
    assert "max_elements" in run.output


def test_fit_workers_load_with_the_limit():
    """The workers' load (``load_cached``, in Dask workers too) applies the task's
    limits, and a load under other limits is not taken from the cache."""
    pytest.importorskip("jax")
    from petab_sciml.fit.task import load_cached
    from petab_sciml.problem.loader import ProblemError

    assert load_cached(str(EXAMPLE), "jax", False) is not None
    with pytest.raises(ProblemError, match="LIMIT_ELEMENTS.*max_elements = 10"):
        load_cached(str(EXAMPLE), "jax", False, {"max_elements": 10})

"""ONNX's own operator conformance suite (the node test cases that the installed ``onnx``
defines) through ``import_onnx`` and both backends, against the outputs the cases
store: :mod:`tests.support.onnx_conformance`.

Every case runs, in shards.  A shard fails when a case that passed in the baseline
(``tests/formats/onnx_conformance_baseline.json``) no longer passes in a backend, or when
a wrong result or a crash appears that the baseline does not list.  After an
improvement, rewrite the baseline and the docs page with
``python tests/support/onnx_conformance.py --write-baseline --write-docs``.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("jax")

from tests.support import onnx_conformance as conformance  # noqa: E402

SHARDS = 6


@pytest.fixture(scope="module")
def cases():
    return conformance.node_cases()


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_node_cases_keep_passing_and_give_no_new_wrong_result(cases, shard):
    known = json.loads(conformance.BASELINE.read_text())
    results = [conformance.run_case(c) for c in cases[shard::SHARDS]]
    found = conformance.regressions(results, known)
    assert not found, "\n".join(found)
    passed = sum(r.outcome.get("torch") == "pass" for r in results)
    assert passed >= 0.3 * len(results)   # the shard ran its cases, not a few


def test_regressions_are_found():
    """The comparison itself: a pass that turns into a refusal, and a new wrong result,
    are both reported; an unchanged refusal is not."""
    known = {"cases": {"a": {"torch": "pass", "jax": "pass"}}}
    results = [conformance.CaseResult("a", "Abs", 13, True,
                                      outcome={"torch": "refused", "jax": "pass"},
                                      reason={"torch": "NetworkError: x"}),
               conformance.CaseResult("b", "Abs", 13, True,
                                      outcome={"torch": "wrong", "jax": "refused"}),
               conformance.CaseResult("c", "Abs", 13, True,
                                      outcome={"torch": "refused", "jax": "refused"})]
    found = conformance.regressions(results, known)
    assert [line.split(" ")[0] for line in found] == ["a", "b"]

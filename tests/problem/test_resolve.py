"""Mapping grammar and parameter resolution (precedence, bounds, priors, dropout) on a
small network built in memory; values checked against hand-computed expectations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from petab_sciml.network import Network
from petab_sciml.problem import EntityError, IssueList, check_entity, parse_entity
from petab_sciml.problem.resolve import ARRAY, ParameterRow, Prior, resolve_network


@pytest.fixture(scope="module")
def net() -> Network:
    layers = [
        {"layer_id": "l1", "layer_type": "Linear", "args": {"in_features": 3, "out_features": 4}},
        {"layer_id": "l2", "layer_type": "Linear", "args": {"in_features": 4, "out_features": 2}},
    ]
    nodes = [
        {"name": "x", "op": "placeholder", "target": "x"},
        {"name": "y", "op": "placeholder", "target": "y"},
        {"name": "h", "op": "call_module", "target": "l1", "args": ["x"]},
        {"name": "o", "op": "call_module", "target": "l2", "args": ["h"]},
        {"name": "output", "op": "output", "target": "output", "args": [["o", "y"]]},
    ]
    return Network.build("nn", ["x", "y"], layers, nodes)


@pytest.mark.parametrize("text, expect", [
    ("nn.parameters", ("parameters", None, None, None, None)),
    ("nn.parameters[l1]", ("parameters", "l1", None, None, None)),
    ("nn.parameters[ l1 ].weight", ("parameters", "l1", "weight", None, None)),
    ("nn.parameters[l1].weight[1, 2]", ("parameters", "l1", "weight", None, (1, 2))),
    ("nn.inputs[1]", ("inputs", None, None, 1, None)),
    ("nn.inputs[0][2]", ("inputs", None, None, 0, (2,))),
    ("nn.outputs[1][0, 3]", ("outputs", None, None, 1, (0, 3))),
])
def test_grammar_parses(text, expect):
    ref = parse_entity(text, {"nn"})
    assert (ref.kind, ref.layer, ref.array, ref.arg, ref.index) == expect


@pytest.mark.parametrize("text, code", [
    ("nn.parameters.weight", "MAPPING_SYNTAX"),
    ("nn.parameters[l1]weight", "MAPPING_SYNTAX"),
    ("nn.inputs[a]", "MAPPING_SYNTAX"),
    ("nn.parameters[l1].weight[1;2]", "MAPPING_SYNTAX"),
    ("nn", "MAPPING_SYNTAX"),
    ("other.parameters", "MAPPING_UNKNOWN_NETWORK"),
])
def test_grammar_rejects(text, code):
    with pytest.raises(EntityError) as info:
        parse_entity(text, {"nn"})
    assert info.value.code == code


def test_plain_model_ids_are_not_network_entities():
    assert parse_entity("gamma", {"nn"}) is None
    assert parse_entity("compartment.size", {"nn"}) is None


@pytest.mark.parametrize("text, code", [
    ("nn.parameters[l3]", "MAPPING_UNKNOWN_LAYER"),
    ("nn.parameters[l1].gamma", "MAPPING_UNKNOWN_ARRAY"),
    ("nn.parameters[l1].weight[4, 0]", "MAPPING_INDEX_OUT_OF_RANGE"),
    ("nn.parameters[l1].weight[0, 3]", "MAPPING_INDEX_OUT_OF_RANGE"),
    ("nn.parameters[l1].bias[0, 0]", "MAPPING_INDEX_OUT_OF_RANGE"),
    ("nn.parameters[l1].bias[-1]", "MAPPING_INDEX_OUT_OF_RANGE"),
    ("nn.inputs[2]", "MAPPING_INPUT_ARG_OUT_OF_RANGE"),
    ("nn.outputs[2][0]", "MAPPING_OUTPUT_ARG_OUT_OF_RANGE"),
    ("nn.inputs", "MAPPING_SYNTAX"),
])
def test_checked_against_ir(net, text, code):
    with pytest.raises(EntityError) as info:
        check_entity(parse_entity(text, {"nn"}), net)
    assert info.value.code == code


def _row(pid, text, nominal=ARRAY, estimate=True, line=2, **kw):
    return ParameterRow(pid, parse_entity(text, {"nn"}), line, nominal, estimate, **kw)


def _files(net):
    rng = np.random.default_rng(0)
    return {lay: {arr: rng.normal(size=info.shape) for arr, info in arrays.items()}
            for lay, arrays in net.parameter_arrays().items()}


def test_precedence_values_masks_bounds(net):
    files = _files(net)
    rows = [
        _row("el", "nn.parameters[l1].weight[1, 2]", 7.0, True, 5, lower=-1.0, upper=8.0),
        _row("all", "nn.parameters", ARRAY, True, 2, prior=Prior("normal", (0.0, 1.0))),
        _row("arr", "nn.parameters[l1].weight", 0.5, False, 4),
        _row("lay", "nn.parameters[l2]", None, True, 3, lower=-2.0, upper=2.0),
    ]
    issues = IssueList()
    r = resolve_network(net, rows, files, issues=issues)
    assert not issues   # numbers on some arrays override a file that is used elsewhere
    w = r.values["l1"]["weight"]
    expected = np.full((4, 3), 0.5)
    expected[1, 2] = 7.0
    assert np.array_equal(w, expected)
    assert np.array_equal(r.values["l1"]["bias"], files["l1"]["bias"])
    assert np.array_equal(r.values["l2"]["weight"], files["l2"]["weight"])   # empty -> file
    mask = r.trainable["l1"]["weight"]
    assert mask.sum() == 1 and mask[1, 2]
    assert r.trainable["l2"]["bias"].all()
    assert r.lower["l1"]["weight"][1, 2] == -1.0 and r.upper["l1"]["weight"][1, 2] == 8.0
    assert r.lower["l2"]["weight"].max() == -2.0
    assert math.isinf(r.lower["l1"]["bias"][0])
    assert r.prior_of("l1", "bias", (0,)) == Prior("normal", (0.0, 1.0))
    assert r.prior_of("l2", "bias", (0,)) is None            # the layer row has no prior
    summary = {s.row.id: (s.elements, s.effective) for s in r.summaries}
    assert summary == {"all": (12 + 4 + 8 + 2, 4), "lay": (10, 10), "arr": (12, 11),
                       "el": (1, 1)}
    assert r.n_trainable == 1 + 4 + 10


def test_ambiguous_rows_and_uncovered(net):
    issues = IssueList()
    rows = [_row("a", "nn.parameters[l1]", 1.0), _row("b", "nn.parameters[l1].weight", 2.0),
            _row("c", "nn.parameters[l1].weight", 3.0, line=7)]
    resolve_network(net, rows, {}, issues=issues, table_file="parameters.tsv")
    codes = [(i.code, i.row) for i in issues]
    assert ("PARAM_NN_AMBIGUOUS", 7) in codes
    assert "PARAM_NN_UNCOVERED" in {c for c, _ in codes}       # l2 not covered


def test_array_values_missing_and_backend_defaults(net):
    issues = IssueList()
    rows = [_row("all", "nn.parameters", None), _row("l2", "nn.parameters[l2]", ARRAY, line=3)]
    r = resolve_network(net, rows, {"l1": {"weight": np.ones((4, 3))}}, issues=issues)
    assert [i.code for i in issues] == ["PARAM_ARRAY_VALUES_MISSING"] * 2
    assert set(r.from_backend) == {"l1", "l2"} and "weight" not in r.from_backend["l1"]
    assert np.isnan(r.values["l1"]["bias"]).all()


def test_dropout_most_specific_whole_array_row(net):
    rows = [_row("all", "nn.parameters", dropout=0.5), _row("l2", "nn.parameters[l2]", line=3),
            _row("w", "nn.parameters[l1].weight", line=4, dropout=0.2),
            _row("e", "nn.parameters[l1].bias[0]", 1.0, line=5)]
    r = resolve_network(net, rows, _files(net))
    assert r.dropout == {"l1": {"weight": 0.2, "bias": 0.5}}


def test_number_for_every_parameter_beside_an_array_file_warns(net):
    """The spec lets a number win over the array file; when numbers hide every value of
    a file, the file is ignored and a warning says so (a layer overridden beside a file
    that is used elsewhere is deliberate and is not reported, see above)."""
    issues = IssueList()
    rows = [_row("all", "nn.parameters", 0.0, True, 3)]
    r = resolve_network(net, rows, _files(net), issues=issues, table_file="parameters.tsv")
    (issue,) = issues
    assert (issue.code, issue.row, issue.file) == ("PARAM_ARRAY_FILE_IGNORED", 3,
                                                   "parameters.tsv")
    assert "holds 26 parameter(s)" in issue.message and "'all' (nominalValue 0)" in \
        issue.message
    assert all(not v.any() for arrays in r.values.values() for v in arrays.values())

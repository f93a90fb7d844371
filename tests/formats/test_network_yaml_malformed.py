"""Malformed network YAML files: each gives its own NetworkError naming file and entry."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from petab_sciml.errors import NetworkError
from petab_sciml.formats import yaml as yaml_format

VALID: dict[str, Any] = {
    "nn_model_id": "net0",
    "inputs": [{"input_id": "input0"}],
    "layers": [
        {"layer_id": "layer1", "layer_type": "Linear",
         "args": {"in_features": 2, "out_features": 5, "bias": True}},
        {"layer_id": "layer2", "layer_type": "Linear",
         "args": {"in_features": 5, "out_features": 1}},
    ],
    "forward": [
        {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {}},
        {"name": "layer1", "op": "call_module", "target": "layer1", "args": ["x"],
         "kwargs": {}},
        {"name": "tanh", "op": "call_method", "target": "tanh", "args": ["layer1"],
         "kwargs": {}},
        {"name": "layer2", "op": "call_module", "target": "layer2", "args": ["tanh"],
         "kwargs": {}},
        {"name": "output", "op": "output", "target": "output", "args": ["layer2"],
         "kwargs": {}},
    ],
}


def _mutate(fn):
    data = copy.deepcopy(VALID)
    fn(data)
    return data


def _set(path: list, value: Any):
    def apply(data):
        obj = data
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
    return apply


def _delete(path: list):
    def apply(data):
        obj = data
        for key in path[:-1]:
            obj = obj[key]
        del obj[path[-1]]
    return apply


def _append(path: list, value: Any):
    def apply(data):
        obj = data
        for key in path:
            obj = obj[key]
        obj.append(value)
    return apply


L1, L2 = ["layers", 0], ["layers", 1]
F = ["forward"]
CASES = [
    # (id, mutation, expected message regex, expected entry text)
    ("unknown-layer-type", _set(L1 + ["layer_type"], "Linearr"),
     r"unknown layer type 'Linearr'; did you mean Linear", "layer 'layer1'"),
    ("unknown-arg", _set(L1 + ["args", "in_feature"], 2),
     r"unknown argument 'in_feature' for layer type Linear", "layer 'layer1'"),
    ("missing-arg", _delete(L1 + ["args", "in_features"]),
     r"missing required argument 'in_features' for layer type Linear", "layer 'layer1'"),
    ("ill-typed-int", _set(L1 + ["args", "in_features"], "two"),
     r"argument 'in_features' of layer type Linear must be an integer, got 'two'",
     "layer 'layer1'"),
    ("ill-typed-bool", _set(L1 + ["args", "bias"], 1),
     r"argument 'bias' of layer type Linear must be true or false, got 1", "layer 'layer1'"),
    ("duplicate-layer", _set(L2 + ["layer_id"], "layer1"),
     r"duplicate layer id 'layer1'", "layer 'layer1'"),
    ("bad-layer-id", _set(L1 + ["layer_id"], "1layer"),
     r"layer id must be a valid PEtab id, got '1layer'", "layers[0]"),
    ("missing-layer-type", _delete(L1 + ["layer_type"]), r"missing layer_type",
     "layer 'layer1'"),
    ("layer-not-mapping", _set(["layers", 0], "Linear"),
     r"a layer must be a mapping with layer_id, layer_type and args", "layers[0]"),
    ("unknown-function", _set(F + [2, "target"], "tanhh"),
     r"unknown method 'tanhh'; did you mean tanh", "forward node 'tanh'"),
    ("unknown-op", _set(F + [2, "op"], "call_thing"),
     r"op must be one of placeholder, call_module", "forward node 'tanh'"),
    ("undefined-name", _set(F + [3, "args"], ["tanh_1"]),
     r"uses undefined name 'tanh_1'", "forward node 'layer2'"),
    ("cycle", _set(F + [1, "args"], ["layer2"]),
     r"the forward graph has a cycle: layer1 -> tanh -> layer2 -> layer1",
     "forward node 'layer1'"),
    ("no-output", _delete(F + [4]), r"the forward graph has no output node", "forward"),
    ("two-outputs", _append(F, {"name": "output2", "op": "output", "target": "output",
                                "args": ["layer1"], "kwargs": {}}),
     r"the forward graph has 2 output nodes \(output, output2\); expected one", "forward"),
    ("module-arity", _set(F + [1, "args"], ["x", "x"]),
     r"layer 'layer1' \(Linear\) takes 1 input\(s\), got 2", "forward node 'layer1'"),
    ("function-arity", _set(F + [2, "args"], ["layer1", 1, 2]),
     r"function tanh takes at most 1 positional arguments \(input\), got 3",
     "forward node 'tanh'"),
    ("unknown-kwarg", _set(F + [2, "kwargs"], {"alpha": 1.0}),
     r"unknown keyword argument 'alpha' for function tanh", "forward node 'tanh'"),
    ("ill-typed-kwarg", _set(F + [2], {"name": "tanh", "op": "call_function",
                                       "target": "leaky_relu", "args": ["layer1"],
                                       "kwargs": {"negative_slope": "small"}}),
     r"argument 'negative_slope' of function leaky_relu must be a number, got 'small'",
     "forward node 'tanh'"),
    ("call-module-unknown-layer", _set(F + [1, "target"], "layer9"),
     r"call_module target 'layer9' is not a layer id \(layers: layer1, layer2\)",
     "forward node 'layer1'"),
    ("duplicate-node", _set(F + [2, "name"], "layer1"), r"duplicate node name 'layer1'",
     "forward node 'layer1'"),
    ("placeholder-count", _set(["inputs"], [{"input_id": "a"}, {"input_id": "b"}]),
     r"the forward graph has 1 placeholder node\(s\) but the network declares 2 input\(s\)",
     "forward"),
    ("missing-forward", _delete(["forward"]), r"missing required key 'forward'", "forward"),
    ("unknown-top-key", _set(["layer"], []), r"unknown top-level key 'layer'", "layer"),
    ("bad-network-id", _set(["nn_model_id"], "net-0"),
     r"network id must be a valid PEtab id", "nn_model_id"),
    ("get-attr-unknown", _set(F + [2], {"name": "tanh", "op": "get_attr",
                                        "target": "layer1.scale", "args": [], "kwargs": {}}),
     r"get_attr target 'layer1.scale' is neither a free parameter nor a layer array",
     "forward node 'tanh'"),
    ("conv-groups", _set(["layers", 0], {"layer_id": "layer1", "layer_type": "Conv1d",
                                         "args": {"in_channels": 3, "out_channels": 4,
                                                  "kernel_size": 2, "groups": 2}}),
     r"must be divisible by groups \(2\)", "layer 'layer1'"),
    ("kernel-size-length", _set(["layers", 0], {"layer_id": "layer1", "layer_type": "Conv2d",
                                                "args": {"in_channels": 3, "out_channels": 4,
                                                         "kernel_size": [2, 2, 2]}}),
     r"argument 'kernel_size' of layer type Conv2d must be an integer or a list of 2 integers",
     "layer 'layer1'"),
    ("dropout-p", _set(["layers", 0], {"layer_id": "layer1", "layer_type": "Dropout",
                                       "args": {"p": 1.5}}),
     r"dropout probability p must be in \[0, 1\], got 1.5", "layer 'layer1'"),
    ("norm-bias-without-affine", _set(["layers", 0], {
        "layer_id": "layer1", "layer_type": "BatchNorm1d",
        "args": {"num_features": 3, "affine": False, "bias": True}}),
     r"bias \(True\) must equal affine \(False\)", "layer 'layer1'"),
    ("output-uses-nothing", _set(F + [4, "args"], []),
     r"output args must name one or more nodes", "forward node 'output'"),
    ("free-parameter-bad-id", _set(["free_parameters"], [{"id": "w", "shape": [2]}]),
     r"free parameter id must read 'group.array'", "free_parameters[0]"),
    ("free-parameter-bad-shape", _set(["free_parameters"], [{"id": "p.w", "shape": [-1]}]),
     r"shape must be a list of non-negative integers", "free parameter 'p.w'"),
]


@pytest.mark.parametrize("case_id, mutation, message, entry", CASES,
                         ids=[c[0] for c in CASES])
def test_malformed_network_file(tmp_path: Path, case_id: str, mutation, message: str,
                                entry: str) -> None:
    path = tmp_path / f"{case_id}.yaml"
    path.write_text(yaml.safe_dump(_mutate(mutation), sort_keys=False))
    with pytest.raises(NetworkError, match=message) as info:
        yaml_format.read(path)
    err = info.value
    assert err.file == str(path)
    assert err.entry == entry
    assert str(path) in str(err) and entry in str(err)


def test_messages_are_distinct() -> None:
    assert len({c[2] for c in CASES}) == len(CASES)


def test_invalid_yaml_syntax_names_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("nn_model_id: net0\nlayers: [\n  - {layer_id: a\n")
    with pytest.raises(NetworkError, match=r"invalid YAML") as info:
        yaml_format.read(path)
    assert info.value.entry and info.value.entry.startswith("line ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(NetworkError, match="file not found"):
        yaml_format.read(tmp_path / "absent.yaml")


def test_valid_network_builds() -> None:
    network = yaml_format.network_from_dict(VALID)
    assert network.order == ("x", "layer1", "tanh", "layer2", "output")
    assert network.parameter_count() == 2 * 5 + 5 + 5 * 1 + 1

"""Malformed PEtab SciML array files: each raises ArrayFileError with a specific message
that names the file and the offending entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from petab_sciml.arrays import load_parameters, read_array_file
from petab_sciml.errors import ArrayFileError
from petab_sciml.network import Network

FLAG = {"metadata/pytorch_format": np.uint8(1)}
W = np.zeros((3, 2))
B = np.zeros(3)
GOOD_PARAMS = {"parameters/net0/layer1/weight": W, "parameters/net0/layer1/bias": B}


def h5(entries: dict[str, object], groups: tuple[str, ...] = ()) -> Callable[[Path], None]:
    """A builder writing ``entries`` ({dataset path: value}) and empty ``groups``."""
    def build(path: Path) -> None:
        with h5py.File(path, "w") as f:
            for name in groups:
                f.create_group(name)
            for name, value in entries.items():
                if isinstance(value, h5py.SoftLink):
                    f[name] = value
                else:
                    f.create_dataset(name, data=value)
    return build


def text_file(path: Path) -> None:
    path.write_text("metadata,pytorch_format\n1\n")


def nothing(path: Path) -> None:
    """Leave the file absent."""


def directory(path: Path) -> None:
    path.mkdir()


def network() -> Network:
    """Linear(2->3) followed by Flatten (a layer without parameters)."""
    return Network.build(
        "net0", ["input0"],
        [{"layer_id": "layer1", "layer_type": "Linear",
          "args": {"in_features": 2, "out_features": 3}},
         {"layer_id": "flat", "layer_type": "Flatten", "args": {}}],
        [{"name": "x", "op": "placeholder", "target": "x"},
         {"name": "l1", "op": "call_module", "target": "layer1", "args": ["x"]},
         {"name": "f", "op": "call_module", "target": "flat", "args": ["l1"]},
         {"name": "output", "op": "output", "target": "output", "args": ["f"]}])


# (id, builder, expected message regex, expected entry or None)
STRUCTURE_CASES = [
    ("missing_file", nothing, "file not found; expected a PEtab SciML HDF5 array file", None),
    ("directory", directory, "is a folder, not a regular file", None),
    ("not_hdf5", text_file, r"not an HDF5 file \(no HDF5 signature\)", None),
    ("no_metadata", h5(GOOD_PARAMS), "missing metadata/pytorch_format; expected a boolean "
     "scalar", "metadata/pytorch_format"),
    ("metadata_without_flag", h5({**GOOD_PARAMS, "metadata/other": 1}),
     "missing metadata/pytorch_format", "metadata/pytorch_format"),
    ("flag_two", h5({"metadata/pytorch_format": np.uint8(2)}), "is 2, expected a boolean",
     "metadata/pytorch_format"),
    ("flag_string", h5({"metadata/pytorch_format": "true"}),
     r"must be a boolean \(or integer 0/1\) scalar, got dtype object",
     "metadata/pytorch_format"),
    ("flag_array", h5({"metadata/pytorch_format": np.ones(2, np.uint8)}),
     r"scalar, got dtype uint8 and shape \(2,\)", "metadata/pytorch_format"),
    ("flag_is_group", h5({}, groups=("metadata/pytorch_format",)),
     "expected a dataset, found a group", "metadata/pytorch_format"),
    ("legacy_perm_column", h5({"metadata/perm": "column"}),
     "is 'column'; only row-major files", "metadata/perm"),
    ("metadata_is_dataset", h5({"metadata": np.uint8(1)}), "expected a group, found a dataset",
     "metadata"),
    ("parameters_is_dataset", h5({**FLAG, "parameters": W}), "expected a group, found a "
     "dataset", "parameters"),
    ("array_one_level_too_high", h5({**FLAG, "parameters/net0/layer1": W}),
     r"expected a group, found a dataset \(layout parameters/<netId>/<layerId>/<arrayId>\)",
     "parameters/net0/layer1"),
    ("array_one_level_too_deep", h5({**FLAG, "parameters/net0/layer1/weight/0": W}),
     "expected a dataset, found a group: nested too deep", "parameters/net0/layer1/weight"),
    ("empty_layer_group", h5(FLAG, groups=("parameters/net0/layer1",)),
     "group holds no arrays", "parameters/net0/layer1"),
    ("bad_layer_id", h5({**FLAG, "parameters/net0/1layer/weight": W}),
     "invalid layer id '1layer'; expected a PEtab id", "parameters/net0/1layer"),
    ("string_parameter", h5({**FLAG, "parameters/net0/layer1/weight": np.bytes_(b"abc")}),
     r"expected a numeric array \(bool, integer or float\), got dtype \|S3",
     "parameters/net0/layer1/weight"),
    ("null_dataspace", h5({**FLAG, "parameters/net0/layer1/weight": h5py.Empty("f8")}),
     r"null dataspace \(no shape\)", "parameters/net0/layer1/weight"),
    ("broken_link", h5({**FLAG, "parameters/net0/layer1/bias": B,
                        "parameters/net0/layer1/weight": h5py.SoftLink("/nowhere")}),
     r"cannot open entry \(broken link\?\)", "parameters/net0/layer1/weight"),
    ("input_is_dataset", h5({**FLAG, "inputs/input0": B}),
     r"expected a group, found a dataset \(layout inputs/<id>/<key>\)", "inputs/input0"),
    ("input_too_deep", h5({**FLAG, "inputs/input0/0/x": B}),
     "expected a dataset, found a group: nested too deep", "inputs/input0/0"),
    ("empty_input", h5(FLAG, groups=("inputs/input0",)), "group holds no arrays",
     "inputs/input0"),
    ("bad_input_key", h5({**FLAG, "inputs/input0/cond 1": B}),
     "invalid key 'cond 1'; expected '0' \\(all conditions\\), 'data', or condition ids",
     "inputs/input0/cond 1"),
    ("global_and_condition_keys", h5({**FLAG, "inputs/input0/0": B, "inputs/input0/c1": B}),
     "holds both a global dataset '0' \\(all conditions\\) and 'c1'", "inputs/input0/c1"),
    ("condition_twice", h5({**FLAG, "inputs/input0/c1;c2": B, "inputs/input0/c2": B}),
     "condition 'c2' appears under two keys \\('c1;c2' and 'c2'\\)", "inputs/input0/c2"),
    ("bad_input_id", h5({**FLAG, "inputs/in-put/0": B}),
     "invalid input id 'in-put'", "inputs/in-put"),
    ("output_is_dataset", h5({**FLAG, "outputs/output0": B}),
     "expected a group, found a dataset", "outputs/output0"),
]


@pytest.mark.parametrize("build, match, entry", [c[1:] for c in STRUCTURE_CASES],
                         ids=[c[0] for c in STRUCTURE_CASES])
def test_malformed_structure(tmp_path, build, match, entry):
    path = tmp_path / "arrays.hdf5"
    build(path)
    with pytest.raises(ArrayFileError, match=match) as info:
        read_array_file(path)
    _assert_location(info.value, path, entry)


def test_truncated_hdf5(tmp_path):
    path = tmp_path / "arrays.hdf5"
    h5({**FLAG, **GOOD_PARAMS})(path)
    path.write_bytes(path.read_bytes()[:600])
    with pytest.raises(ArrayFileError, match="cannot read HDF5 file") as info:
        read_array_file(path)
    _assert_location(info.value, path, None)


@pytest.mark.parametrize("flag", [np.uint8(0), np.bool_(False)])
def test_pytorch_format_false_is_read(tmp_path, flag):
    """The schema's pytorch_format is a boolean; false is allowed (spec, array data)."""
    path = tmp_path / "arrays.hdf5"
    h5({"metadata/pytorch_format": flag, **GOOD_PARAMS})(path)
    content = read_array_file(path)
    assert content.pytorch_format is False
    assert set(content.parameters["net0"]["layer1"]) == {"weight", "bias"}


def test_extra_top_level_group_is_ignored(tmp_path):
    """The schema allows other top-level properties: they are listed, not read."""
    path = tmp_path / "arrays.hdf5"
    h5({**FLAG, **GOOD_PARAMS, "params/net0/layer1/weight": W})(path)
    content = read_array_file(path)
    assert content.ignored_groups == ("params",)
    assert content.pytorch_format is True and "net0" in content.parameters


def test_flag_not_required(tmp_path):
    path = tmp_path / "arrays.hdf5"
    h5(GOOD_PARAMS)(path)
    assert read_array_file(path, require_pytorch_format=False).parameters["net0"]


# (id, datasets besides the flag, expected message regex, expected entry)
NETWORK_CASES = [
    ("shape_mismatch", {**GOOD_PARAMS, "parameters/net0/layer1/weight": np.zeros((2, 3))},
     r"shape mismatch: got \(2, 3\), expected \(3, 2\) for layer1\.weight of layer 'layer1' "
     r"\(Linear\)", "parameters/net0/layer1/weight"),
    ("unknown_layer", {**GOOD_PARAMS, "parameters/net0/layer9/weight": W},
     "unknown layer 'layer9': network 'net0' has no such layer; layers with parameters: "
     "layer1", "parameters/net0/layer9"),
    ("layer_without_parameters", {**GOOD_PARAMS, "parameters/net0/flat/weight": W},
     r"layer 'flat' \(Flatten\) has no parameters", "parameters/net0/flat"),
    ("unknown_array", {**GOOD_PARAMS, "parameters/net0/layer1/gamma": B},
     r"unknown array 'gamma' of layer 'layer1' \(Linear\); expected weight, bias",
     "parameters/net0/layer1/gamma"),
    ("missing_trainable", {"parameters/net0/layer1/weight": W},
     r"missing trainable array layer1\.bias of layer 'layer1' \(Linear\), expected shape "
     r"\(3,\)", "parameters/net0/layer1/bias"),
    ("other_network_id", {"parameters/net7/layer1/weight": W, "parameters/net7/layer1/bias": B},
     "holds parameters for network\\(s\\) 'net7' but not for network 'net0'",
     "parameters/net7"),
    ("two_other_networks", {"parameters/a/layer1/weight": W, "parameters/b/layer1/weight": W},
     "network\\(s\\) 'a', 'b' but not for network 'net0'; expected group parameters/net0",
     "parameters"),
    ("frozen_gradient_shape", {**GOOD_PARAMS, "parameters/net0/layer1/weight": np.zeros(0)},
     r"shape mismatch: got \(0,\), expected \(3, 2\)", "parameters/net0/layer1/weight"),
]


@pytest.mark.parametrize("entries, match, entry", [c[1:] for c in NETWORK_CASES],
                         ids=[c[0] for c in NETWORK_CASES])
def test_parameters_not_matching_network(tmp_path, entries, match, entry):
    path = tmp_path / "arrays.hdf5"
    h5({**FLAG, **entries})(path)
    with pytest.raises(ArrayFileError, match=match) as info:
        load_parameters(path, network())
    _assert_location(info.value, path, entry)


def _assert_location(error: ArrayFileError, path: Path, entry: str | None) -> None:
    """The message starts with the file, then the entry (when there is one)."""
    text = str(error)
    assert error.file == str(path)
    assert text.startswith(f"{path}: ")
    if entry is not None:
        assert error.entry == entry
        assert text.startswith(f"{path}: {entry}: ")

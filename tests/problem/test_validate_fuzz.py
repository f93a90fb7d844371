"""Property-based: mutating table cells, YAML keys and HDF5 datasets never makes the
validator end in an unhandled exception (or an INTERNAL_ERROR issue)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from petab_sciml.problem import validate_problem
from tests.support.invalid_problems.mutate import _read_tsv, _write_tsv, copy_case
from tests.support.suite import SUITE, requires_suite

BASES = ["sciml_problem_import/001", "sciml_problem_import/023", "sciml_problem_import/038",
         "sciml_problem_import/032", "initialization/003"]
TABLES = ["parameters.tsv", "mapping.tsv", "hybridization.tsv", "experiments.tsv",
          "observables.tsv", "measurements.tsv"]
CELLS = st.one_of(
    st.sampled_from(["", "array", "inf", "-inf", "nan", "true", "false", "0", "1.5", "-1",
                     "net1", "net1.parameters", "net1.parameters[layer1]",
                     "net1.parameters[layer1].weight[9, 9]", "net1.inputs[7]",
                     "net1.outputs[0][0]", "prey", "gamma", "normal", "0;1", "cond1",
                     "net1.parameters[", "[]", "a.b.c", "time"]),
    st.text(max_size=12),
)
YAML_KEYS = ["format_version", "extensions", "extensions.sciml",
             "extensions.sciml.neural_networks", "extensions.sciml.array_files",
             "extensions.sciml.hybridization_files", "parameter_files", "mapping_files",
             "model_files", "extensions.sciml.neural_networks.net1",
             "extensions.sciml.neural_networks.net1.format",
             "extensions.sciml.neural_networks.net1.location"]
YAML_VALUES = st.one_of(st.none(), st.integers(), st.text(max_size=8),
                        st.lists(st.text(max_size=6), max_size=2),
                        st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
H5_DATASETS = ["metadata/pytorch_format", "parameters/net1/layer1/weight",
               "parameters/net1/layer1/bias", "parameters/net1", "parameters/net1/x/y",
               "inputs/net1_input1/0", "metadata", "zzz"]

mutation = st.one_of(
    st.tuples(st.just("cell"), st.sampled_from(TABLES), st.integers(0, 12),
              st.integers(0, 8), CELLS),
    st.tuples(st.just("yaml_set"), st.sampled_from(YAML_KEYS), YAML_VALUES),
    st.tuples(st.just("yaml_del"), st.sampled_from(YAML_KEYS)),
    st.tuples(st.just("h5_del"), st.sampled_from(H5_DATASETS)),
    st.tuples(st.just("h5_set"), st.sampled_from(H5_DATASETS),
              st.sampled_from(["scalar", "vector", "matrix", "string", "group"])),
)

_CACHE: dict[str, Path] = {}


def _base(name: str) -> Path:
    if name not in _CACHE:
        _CACHE[name] = copy_case(SUITE, name, Path(tempfile.mkdtemp()) / "p").parent
    return _CACHE[name]


def _apply(folder: Path, m: tuple) -> None:
    kind = m[0]
    if kind == "cell":
        _, name, r, c, value = m
        f = folder / name
        if not f.exists():
            return
        rows = _read_tsv(f)
        r = r % len(rows)
        c = c % max(len(rows[r]), 1)
        if rows[r]:
            rows[r][c] = value.replace("\n", " ").replace("\r", " ")
        _write_tsv(f, rows)
    elif kind in ("yaml_set", "yaml_del"):
        f = folder / "problem.yaml"
        data = yaml.safe_load(f.read_text())
        keys = m[1].split(".")
        node = data
        for k in keys[:-1]:
            if not isinstance(node, dict) or k not in node:
                return
            node = node[k]
        if not isinstance(node, dict):
            return
        if kind == "yaml_set":
            node[keys[-1]] = m[2]
        else:
            node.pop(keys[-1], None)
        f.write_text(yaml.safe_dump(data))
    else:
        files = sorted(folder.glob("*.hdf5"))
        if not files:
            return
        with h5py.File(files[0], "a") as h5:
            name = m[1]
            # An earlier mutation may have turned a parent group into a dataset.
            parts = name.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent in h5 and not isinstance(h5[parent], h5py.Group):
                    del h5[parent]
            if name in h5:
                del h5[name]
            if kind == "h5_set":
                value = {"scalar": np.float64(3.0), "vector": np.arange(3.0),
                         "matrix": np.ones((2, 7)), "string": np.bytes_("row")}.get(m[2])
                try:
                    if value is None:
                        h5.create_group(name)
                    else:
                        h5.create_dataset(name, data=value)
                except (ValueError, KeyError):
                    pass


@requires_suite
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(BASES), mutations=st.lists(mutation, min_size=1, max_size=3))
# found by this test: a boolean observable formula crashed the plan builder
@example(base="sciml_problem_import/001",
         mutations=[("cell", "observables.tsv", 1, 1, "true")])
# and a file name holding a NUL character (Path.resolve raised ValueError)
@example(base="sciml_problem_import/001",
         mutations=[("yaml_set", "extensions.sciml.array_files", "\x00")])
def test_validation_never_crashes(base, mutations):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "p"
        shutil.copytree(_base(base), folder)
        for m in mutations:
            _apply(folder, m)
        report = validate_problem(folder / "problem.yaml")
        internal = [str(i) for i in report.issues if i.code == "INTERNAL_ERROR"]
        assert not internal, internal
        report.to_json()


NUL_FILE_FIELDS = {
    "extensions.sciml.array_files": ("YAML_FIELD_INVALID", "extensions.sciml.array_files"),
    "extensions.sciml.hybridization_files": ("YAML_FIELD_INVALID",
                                             "extensions.sciml.hybridization_files"),
    "measurement_files": ("YAML_FIELD_INVALID", "measurement_files"),
    "model_files.lv.location": ("YAML_FIELD_INVALID", "model_files.lv"),
    "extensions.sciml.neural_networks.net1.location": (
        "NN_LOCATION_MISSING", "extensions.sciml.neural_networks.net1.location"),
}


@requires_suite
@pytest.mark.parametrize("field", sorted(NUL_FILE_FIELDS))
def test_file_name_with_nul_character_is_a_located_error(tmp_path, field):
    """Every file-name field of problem.yaml: a name with a NUL character is reported at
    its field, not as an internal error."""
    folder = tmp_path / "p"
    shutil.copytree(_base("sciml_problem_import/001"), folder)
    _apply(folder, ("yaml_set", field, "net1\x00.hdf5"))
    report = validate_problem(folder / "problem.yaml")
    assert not [i for i in report.issues if i.code == "INTERNAL_ERROR"]
    code, path = NUL_FILE_FIELDS[field]
    assert any(i.code == code and i.path == path for i in report.issues), \
        [str(i) for i in report.issues]

"""PEtab SciML HDF5 array files: round trips, atomic writes, lazy reads, the official suite."""

from __future__ import annotations

import os
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from petab_sciml import arrays
from petab_sciml.arrays import (
    ArrayFile,
    LazyArray,
    check_parameters,
    condition_ids,
    load_parameters,
    read_array_file,
    save_parameters,
    write_array_file,
)
from petab_sciml.errors import ArrayFileError
from petab_sciml.network import Network


# ----------------------------------------------------------------------------- helpers
def _suite_root() -> Path | None:
    """The official test suite: $PETAB_SCIML_TESTSUITE, else <repo>/../shared/..."""
    env = os.environ.get("PETAB_SCIML_TESTSUITE")
    root = Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / \
        "petab_sciml_testsuite"
    return root if (root / "test_cases").is_dir() else None


SUITE = _suite_root()
needs_suite = pytest.mark.skipif(
    SUITE is None, reason="PEtab SciML test suite not found (set PETAB_SCIML_TESTSUITE or "
    "place it at <repo>/../shared/petab_sciml_testsuite)")


def _suite_files() -> list[Path]:
    return sorted((SUITE / "test_cases").rglob("*.hdf5")) if SUITE else []


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(SUITE / "test_cases")) for p in paths] if SUITE else []


def _suite_pairs() -> list[tuple[Path, Path]]:
    """(network YAML, parameter-like HDF5 file) pairs of the suite."""
    if SUITE is None:
        return []
    cases = SUITE / "test_cases"
    pairs = [(ps.parent / "net.yaml", ps)
             for ps in sorted(cases.glob("ml_model_import/*/net_ps_*.hdf5"))]
    others = sorted([*cases.glob("*/*/petab/net*_ps.hdf5"), *cases.glob("*/*/grad_net*.hdf5"),
                     *cases.glob("initialization/*/net*_ref.hdf5")])
    for ps in others:
        n = re.search(r"net(\d+)", ps.name).group(1)
        petab = ps.parent if ps.parent.name == "petab" else ps.parent / "petab"
        if (petab / f"net{n}.yaml").exists():  # 029/grad_net1.hdf5 is an orphan
            pairs.append((petab / f"net{n}.yaml", ps))
    return pairs


def small_network() -> Network:
    """Linear(2->3), BatchNorm1d(3) with buffers, Flatten (no parameters)."""
    return Network.build(
        "net0", ["input0"],
        [{"layer_id": "layer1", "layer_type": "Linear",
          "args": {"in_features": 2, "out_features": 3}},
         {"layer_id": "norm", "layer_type": "BatchNorm1d", "args": {"num_features": 3}},
         {"layer_id": "flat", "layer_type": "Flatten", "args": {}}],
        [{"name": "x", "op": "placeholder", "target": "x"},
         {"name": "l1", "op": "call_module", "target": "layer1", "args": ["x"]},
         {"name": "n", "op": "call_module", "target": "norm", "args": ["l1"]},
         {"name": "f", "op": "call_module", "target": "flat", "args": ["n"]},
         {"name": "output", "op": "output", "target": "output", "args": ["f"]}])


def small_params(dtype=np.float64) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return {"layer1": {"weight": rng.normal(size=(3, 2)).astype(dtype),
                       "bias": rng.normal(size=3).astype(dtype)},
            "norm": {"weight": np.ones(3, dtype), "bias": np.zeros(3, dtype)}}


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (4,), (2, 3, 4)])
def test_round_trip_values_dtypes_shapes(tmp_path, dtype, shape):
    value = (np.arange(int(np.prod(shape))).reshape(shape) % 3).astype(dtype)
    path = tmp_path / "a.hdf5"
    write_array_file(path, parameters={"net0": {"layer1": {"weight": value}}},
                     inputs={"input0": {"0": value}}, outputs={"output0": {"data": value}})
    f = read_array_file(path)
    for lazy in (f.parameters["net0"]["layer1"]["weight"], f.inputs["input0"]["0"],
                 f.outputs["output0"]["data"]):
        assert lazy.shape == shape and lazy.dtype == np.dtype(dtype)
        got = lazy.read()
        assert isinstance(got, np.ndarray) and got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, value)


def test_round_trip_condition_keys_and_structure(tmp_path):
    path = tmp_path / "in.hdf5"
    inputs = {"a": {"cond1;cond2": [1.0, 2.0], "cond3": [3.0, 4.0]}, "b": {"0": 5.0}}
    write_array_file(path, inputs=inputs)
    f = read_array_file(path)
    assert isinstance(f, ArrayFile) and f.path == path
    assert f.parameters == {} and f.outputs == {}
    assert {k: sorted(v) for k, v in f.inputs.items()} == {"a": ["cond1;cond2", "cond3"],
                                                          "b": ["0"]}
    np.testing.assert_array_equal(np.asarray(f.inputs["a"]["cond1;cond2"]), [1.0, 2.0])
    assert np.asarray(f.inputs["b"]["0"]).shape == ()


def test_written_flag_is_uint8_scalar_one(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path)
    with h5py.File(path, "r") as h5:
        flag = h5["metadata/pytorch_format"]
        assert flag.shape == () and flag.dtype == np.uint8 and flag[()] == 1
        assert sorted(h5) == ["metadata"]


def test_write_accepts_array_likes(tmp_path):
    class FakeTensor:  # torch-like: requires detach().cpu().numpy()
        def detach(self):
            return self

        def cpu(self):
            return self

        def numpy(self):
            return np.full((2, 2), 7.0, np.float32)

    src = tmp_path / "src.hdf5"
    write_array_file(src, inputs={"x": {"0": np.arange(3.0)}})
    lazy = read_array_file(src).inputs["x"]["0"]
    dst = tmp_path / "dst.hdf5"
    write_array_file(dst, parameters={"n": {"l": {"t": FakeTensor(), "lazy": lazy,
                                                   "lst": [[1, 2], [3, 4]]}}})
    f = read_array_file(dst).parameters["n"]["l"]
    assert f["t"].dtype == np.float32 and f["t"].read()[0, 0] == 7.0
    np.testing.assert_array_equal(f["lazy"].read(), [0.0, 1.0, 2.0])
    assert f["lst"].shape == (2, 2)


def test_overwrite_replaces_content(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": [1.0]}})
    write_array_file(path, inputs={"y": {"0": [2.0]}})
    assert list(read_array_file(path).inputs) == ["y"]


def test_lazy_array_protocol(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": np.arange(6.0).reshape(2, 3)}})
    lazy = read_array_file(path).inputs["x"]["0"]
    assert lazy.dataset == "inputs/x/0" and lazy.path == path
    assert lazy.ndim == 2 and lazy.size == 6
    assert np.asarray(lazy, dtype=np.float32).dtype == np.float32
    assert np.array(lazy).sum() == 15.0
    assert "inputs/x/0" in repr(lazy)


def test_lazy_array_reports_vanished_file(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": [1.0]}})
    lazy = read_array_file(path).inputs["x"]["0"]
    path.unlink()
    with pytest.raises(ArrayFileError, match="cannot read dataset") as info:
        lazy.read()
    assert str(path) in str(info.value) and "inputs/x/0" in str(info.value)


def test_lazy_array_reports_changed_shape(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": [1.0]}})
    lazy = read_array_file(path).inputs["x"]["0"]
    write_array_file(path, inputs={"x": {"0": [1.0, 2.0]}})
    with pytest.raises(ArrayFileError, match=r"shape \(2,\), expected \(1,\)"):
        lazy.read()


def test_condition_ids():
    assert condition_ids("0") is None and condition_ids("data") is None
    assert condition_ids("c1") == ("c1",)
    assert condition_ids("c1; c2") == ("c1", "c2")
    with pytest.raises(ArrayFileError, match="invalid key"):
        condition_ids("c1;;c2")


# ----------------------------------------------------------------------------- atomicity
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_failing_write_keeps_existing_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": [1.0, 2.0]}})
    before = _snapshot(tmp_path)
    real = h5py.Group.create_dataset
    calls = []

    def failing(self, name, *args, **kwargs):
        calls.append(name)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    params = {"net0": {"l": {"a": [1.0], "b": [2.0], "c": [3.0]}}}
    with pytest.raises(ArrayFileError, match="cannot write file: disk full") as info:
        write_array_file(path, parameters=params)
    assert str(path) in str(info.value)
    assert len(calls) == 3  # the failure happened mid-write
    assert _snapshot(tmp_path) == before


def test_interrupted_write_propagates_and_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": [1.0]}})
    before = _snapshot(tmp_path)

    def interrupted(self, name, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(h5py.Group, "create_dataset", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_array_file(path, inputs={"y": {"0": [2.0]}})
    assert _snapshot(tmp_path) == before


def test_invalid_value_is_rejected_before_writing(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": [1.0]}})
    before = _snapshot(tmp_path)
    with pytest.raises(ArrayFileError, match="expected a numeric array") as info:
        write_array_file(path, inputs={"x": {"0": [1.0]}, "y": {"0": np.array(["a", "b"])}})
    assert "inputs/y/0" in str(info.value)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("kwargs, match, entry", [
    ({"inputs": {"x": {"c 1": [1.0]}}}, "invalid key 'c 1'", "inputs/x/c 1"),
    ({"inputs": {"x": {"c1;c2": [1.0], "c2": [1.0]}}}, "condition 'c2' appears under two keys",
     "inputs/x/c2"),
    ({"inputs": {"x": [1.0]}}, "expected a mapping", "inputs/x"),
    ({"inputs": {"1x": {"0": [1.0]}}}, "invalid input id '1x'", "inputs/1x"),
    ({"parameters": {"net0": {"l": {"w": [1.0, [2.0]]}}}}, "cannot convert value",
     "parameters/net0/l/w"),
    ({"parameters": {"net0": {"l": {"a/b": [1.0]}}}}, "invalid name 'a/b'", "parameters/net0/l"),
    ({"outputs": {"o": {"data": {"x": 1}}}}, "numeric array", "outputs/o/data"),
])
def test_write_rejects_bad_names_and_values(tmp_path, kwargs, match, entry):
    path = tmp_path / "p.hdf5"
    with pytest.raises(ArrayFileError, match=re.escape(match)) as info:
        write_array_file(path, **kwargs)
    assert str(path) in str(info.value) and entry in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_write_into_missing_folder(tmp_path):
    from petab_sciml.errors import OutputError

    path = tmp_path / "missing" / "p.hdf5"
    with pytest.raises(OutputError, match="does not exist"):
        write_array_file(path)


# ----------------------------------------------------------------------------- laziness
def test_reading_structure_reads_no_data(tmp_path, monkeypatch):
    path = tmp_path / "p.hdf5"
    big = np.zeros((50, 40))
    write_array_file(path, parameters={"net0": {"l": {"w": big, "b": big[0]}}},
                     inputs={"x": {"0": big}}, outputs={"y": {"data": big}})
    lazy_reads, dataset_reads = [], []
    real_read, real_getitem = LazyArray.read, h5py.Dataset.__getitem__

    def counting_read(self):
        lazy_reads.append(self.dataset)
        return real_read(self)

    def counting_getitem(self, key):
        dataset_reads.append(self.name)
        return real_getitem(self, key)

    monkeypatch.setattr(LazyArray, "read", counting_read)
    monkeypatch.setattr(h5py.Dataset, "__getitem__", counting_getitem)
    f = read_array_file(path)
    assert lazy_reads == []
    assert dataset_reads == ["/metadata/pytorch_format"]  # only the flag is read
    dataset_reads.clear()
    np.asarray(f.parameters["net0"]["l"]["w"])
    assert lazy_reads == ["parameters/net0/l/w"] and dataset_reads == ["/parameters/net0/l/w"]


def test_load_parameters_reads_each_array_once(tmp_path, monkeypatch):
    net = small_network()
    path = tmp_path / "p.hdf5"
    save_parameters(path, net, small_params())
    reads = []
    real_read = LazyArray.read
    monkeypatch.setattr(LazyArray, "read", lambda self: reads.append(self.dataset)
                        or real_read(self))
    load_parameters(path, net)
    assert sorted(reads) == sorted(f"parameters/net0/{g}/{a}" for g, arrs in
                                   small_params().items() for a in arrs)


# ----------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_save_and_load_parameters(tmp_path, dtype):
    net = small_network()
    path = tmp_path / "p.hdf5"
    params = small_params(dtype)
    params["norm"]["running_mean"] = np.zeros(3, dtype)
    params["norm"]["num_batches_tracked"] = np.int64(4)
    save_parameters(path, net, params)
    loaded = load_parameters(path, net)
    assert loaded.keys() == params.keys()
    for group, arrays_ in params.items():
        assert loaded[group].keys() == arrays_.keys()
        for name, value in arrays_.items():
            assert loaded[group][name].dtype == np.asarray(value).dtype
            np.testing.assert_array_equal(loaded[group][name], value)


def test_buffers_are_optional_and_strict_requires_trainables():
    net = small_network()
    check_parameters(net, small_params())  # no running statistics: fine
    partial = {"layer1": small_params()["layer1"]}
    check_parameters(net, partial, strict=False)
    with pytest.raises(ArrayFileError, match=r"missing trainable array norm\.weight .*\(3,\)"):
        check_parameters(net, partial, file="f.hdf5")


def test_check_parameters_accepts_shapes_of_any_array_like():
    class Shaped:
        def __init__(self, *shape):
            self.shape = shape

    net = small_network()
    check_parameters(net, {"layer1": {"weight": Shaped(3, 2), "bias": [0.0, 0.0, 0.0]},
                           "norm": {"weight": Shaped(3), "bias": Shaped(3)}})


def test_check_parameters_net_id_names_entries():
    with pytest.raises(ArrayFileError) as info:
        check_parameters(small_network(), {"layer1": {"weight": np.zeros((2, 3))}},
                         file="x.hdf5", net_id="other")
    assert str(info.value).startswith("x.hdf5: parameters/other/layer1/weight: shape mismatch")


def test_save_parameters_rejects_bad_shape_without_writing(tmp_path):
    params = small_params()
    params["layer1"]["weight"] = np.zeros((2, 3))
    with pytest.raises(ArrayFileError, match=r"got \(2, 3\), expected \(3, 2\)"):
        save_parameters(tmp_path / "p.hdf5", small_network(), params)
    assert list(tmp_path.iterdir()) == []


def test_load_parameters_other_network_id(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path, parameters={"netX": small_params()})
    with pytest.raises(ArrayFileError, match="'netX' but not for network 'net0'") as info:
        load_parameters(path, small_network())
    assert "parameters/netX" in str(info.value)


def test_load_parameters_without_parameters_group(tmp_path):
    path = tmp_path / "p.hdf5"
    write_array_file(path, inputs={"x": {"0": [1.0]}})
    assert load_parameters(path, small_network(), strict=False) == {}
    with pytest.raises(ArrayFileError, match="missing trainable array layer1.weight"):
        load_parameters(path, small_network())


# ----------------------------------------------------------------------------- suite
@needs_suite
@pytest.mark.parametrize("path", _suite_files(), ids=_ids(_suite_files()))
def test_reads_every_suite_file(path):
    f = read_array_file(path)
    leaves = [a for g in f.inputs.values() for a in g.values()]
    leaves += [a for g in f.outputs.values() for a in g.values()]
    leaves += [a for n in f.parameters.values() for g in n.values() for a in g.values()]
    assert leaves, "every suite file holds parameters, inputs or outputs"
    with h5py.File(path, "r") as h5:
        for lazy in leaves:
            np.testing.assert_array_equal(lazy.read(), h5[lazy.dataset][()])
            assert lazy.dtype == h5[lazy.dataset].dtype


@needs_suite
def test_suite_file_kinds():
    cases = SUITE / "test_cases"
    out = read_array_file(cases / "ml_model_import/001/net_output_1.hdf5")
    assert list(out.outputs) == ["output0"] and list(out.outputs["output0"]) == ["data"]
    inp = read_array_file(cases / "ml_model_import/001/net_input_1.hdf5")
    assert list(inp.inputs["input0"]) == ["data"]
    cond = read_array_file(cases / "sciml_problem_import/038/petab/net6_input2.hdf5")
    assert sorted(cond.inputs["net6_input2"]) == ["cond1", "cond2"]
    legacy = cases / "sciml_problem_import/029/grad_net1.hdf5"  # metadata/perm = "row"
    assert read_array_file(legacy).parameters["net1"]["layer1"]["weight"].shape == (5, 2)


@needs_suite
@pytest.mark.parametrize("yaml_path, path", _suite_pairs(),
                         ids=_ids([p for _, p in _suite_pairs()]))
def test_load_parameters_on_suite_networks(yaml_path, path):
    formats_yaml = pytest.importorskip("petab_sciml.formats.yaml")
    net = formats_yaml.read(yaml_path)
    frozen = [a for g in read_array_file(path).parameters[net.id].values()
              for a in g.values() if a.shape == (0,)]
    if frozen:  # gradient files hold (0,)-shaped arrays for frozen layers
        with pytest.raises(ArrayFileError, match=r"shape mismatch: got \(0,\)"):
            load_parameters(path, net)
        return
    loaded = load_parameters(path, net)
    expected = net.parameter_arrays()
    for group, values in loaded.items():
        for name, value in values.items():
            assert value.shape == expected[group][name].shape


def test_module_imports_no_framework():
    source = Path(arrays.__file__).read_text()
    assert not re.search(r"^\s*(import|from)\s+(torch|jax)\b", source, re.M)

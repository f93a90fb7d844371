"""Safe writes (petab_sciml.safe_write) and the writers built on them: refused targets,
interrupted writes, folder swaps, NNEF archives; plus the budgets' flag parsing."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from petab_sciml.errors import LimitError, NetworkError, OutputError
from petab_sciml.limits import current, parse_limit, use_limits
from petab_sciml.safe_write import check_output, staged_output, write_bytes, write_text
from tests.support.hostile import make_problem, network_parameters


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------- refusals
def test_refuses_device_fifo_symlink_and_kind_mismatch(tmp_path):
    with pytest.raises(OutputError, match="character device"):
        check_output("/dev/null", overwrite=True)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OutputError, match="FIFO"):
        check_output(tmp_path / "fifo", overwrite=True)
    (tmp_path / "target.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target.txt")
    with pytest.raises(OutputError, match="symbolic link"):
        check_output(tmp_path / "link", overwrite=True)
    (tmp_path / "dir").mkdir()
    with pytest.raises(OutputError, match="is a folder"):
        check_output(tmp_path / "dir", overwrite=True)
    with pytest.raises(OutputError, match="is a file"):
        check_output(tmp_path / "target.txt", overwrite=True, folder=True)
    with pytest.raises(OutputError, match="does not exist"):
        check_output(tmp_path / "missing" / "x.txt")
    with pytest.raises(OutputError, match="exists; pass --force"):
        check_output(tmp_path / "target.txt")
    assert check_output(tmp_path / "target.txt", overwrite=True) == tmp_path / "target.txt"


def test_refuses_inputs_however_named(tmp_path):
    source = tmp_path / "in.yaml"
    source.write_text("x")
    os.link(source, tmp_path / "hard.yaml")
    (tmp_path / "soft.yaml").symlink_to(source)
    for out in (source, tmp_path / "hard.yaml", tmp_path / "." / "in.yaml"):
        with pytest.raises(OutputError, match="is the input"):
            check_output(out, overwrite=True, inputs=[source])
    with pytest.raises(OutputError, match="is the input"):
        check_output(source, overwrite=True, inputs=[tmp_path / "soft.yaml"])
    with pytest.raises(OutputError, match="holds the input"):
        check_output(tmp_path, overwrite=True, inputs=[source], folder=True)


# ----------------------------------------------------------------------- staging
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_failed_or_interrupted_write_keeps_the_old_file(tmp_path, error):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(error), staged_output(target, overwrite=True) as tmp:
        tmp.write_bytes(b"half")
        raise error()
    assert _listing(tmp_path) == {"out.bin": b"old"}


def test_staged_file_replaces_and_folder_swaps(tmp_path):
    write_text(tmp_path / "a.txt", "one")
    write_bytes(tmp_path / "a.txt", b"two")
    assert (tmp_path / "a.txt").read_bytes() == b"two"
    folder = tmp_path / "model"
    with staged_output(folder, folder=True) as tmp:
        tmp.mkdir()
        (tmp / "v1").write_text("1")
    with staged_output(folder, folder=True, overwrite=True) as tmp:
        tmp.mkdir()
        (tmp / "v2").write_text("2")
    assert _listing(tmp_path) == {"a.txt": b"two", "model/v2": b"2"}


def test_writers_never_follow_a_planted_temporary_symlink(tmp_path):
    from petab_sciml.arrays import write_array_file

    victim = tmp_path / "victim"
    victim.write_text("keep")
    for name in ("out.hdf5", "out.yaml"):
        (tmp_path / f".{name}.tmp").symlink_to(victim)
    write_array_file(tmp_path / "out.hdf5", inputs={"x": {"0": [1.0]}})
    write_text(tmp_path / "out.yaml", "a: 1\n")
    assert victim.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".out.hdf5.tmp", ".out.yaml.tmp", "out.hdf5", "out.yaml", "victim"]


# ----------------------------------------------------------------------- NNEF output
@pytest.fixture
def network(tmp_path):
    pytest.importorskip("nnef")
    from petab_sciml.formats.yaml import read

    return read(make_problem(tmp_path / "base").parent / "net1.yaml")


@pytest.mark.parametrize("name", ["model", "model.tgz"])
def test_interrupted_nnef_write_keeps_the_old_model(tmp_path, network, monkeypatch, name):
    import nnef

    from petab_sciml.formats import nnef as nnef_format

    out = tmp_path / "out" / name
    out.parent.mkdir()
    nnef_format.write(network, out, params=network_parameters())
    before = _listing(out.parent)
    calls = []
    real = nnef.write_tensor

    def interrupted(handle, data, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(handle, data, *args, **kwargs)

    monkeypatch.setattr(nnef, "write_tensor", interrupted)
    changed = {g: {a: v + 1 for a, v in arrays.items()}
               for g, arrays in network_parameters().items()}
    with pytest.raises(KeyboardInterrupt):
        nnef_format.write(network, out, params=changed, overwrite=True)
    assert len(calls) == 3
    assert _listing(out.parent) == before   # old model intact, no temporary leftovers


def test_interrupted_first_tgz_write_leaves_nothing(tmp_path, network, monkeypatch):
    import nnef

    from petab_sciml.formats import nnef as nnef_format

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(nnef, "write_tensor", interrupted)
    with pytest.raises(KeyboardInterrupt):
        nnef_format.write(network, tmp_path / "m.tgz", params=network_parameters())
    assert list(tmp_path.iterdir()) == [tmp_path / "base"]


def test_nnef_folder_with_foreign_files_is_not_replaced(tmp_path, network):
    from petab_sciml.formats import nnef as nnef_format

    out = tmp_path / "model"
    nnef_format.write(network, out, params=network_parameters())
    (out / "notes.dat").write_text("mine")
    before = _listing(out)
    with pytest.raises(NetworkError, match="notes.dat"):
        nnef_format.write(network, out, params=network_parameters(), overwrite=True)
    assert _listing(out) == before
    (out / "notes.dat").unlink()
    nnef_format.write(network, out, params=network_parameters(), overwrite=True)


def test_archive_member_paths_are_checked_as_paths(tmp_path):
    """A member that escapes to a sibling whose name starts with the target's name
    (``startswith`` without a separator accepted it)."""
    pytest.importorskip("nnef")
    from petab_sciml.formats.nnef import _extract

    target = tmp_path / "extract"
    target.mkdir()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("../extract_evil/graph.nnef")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    archive = tmp_path / "a.tgz"
    archive.write_bytes(raw.getvalue())
    with pytest.raises(NetworkError, match="points outside the archive"):
        _extract(archive, target)
    assert not (tmp_path / "extract_evil").exists()


# ----------------------------------------------------------------------- array files
def test_save_parameters_keeps_what_it_does_not_own(tmp_path):
    import h5py

    from petab_sciml.arrays import read_array_file, save_parameters, write_array_file
    from petab_sciml.formats.yaml import read

    net = read(make_problem(tmp_path / "base").parent / "net1.yaml")
    path = tmp_path / "arrays.hdf5"
    write_array_file(path, inputs={"x": {"c1": np.arange(2.0)}},
                     outputs={"y": {"data": np.ones(3)}},
                     parameters={"net1": {"old": {"w": np.zeros(1)}},
                                 "other": {"l": {"w": np.full(2, 7.0)}}})
    with h5py.File(path, "a") as h5:
        h5["inputs"].attrs["note"] = "kept"
    save_parameters(path, net, network_parameters())
    data = read_array_file(path)
    assert np.array_equal(data.inputs["x"]["c1"].read(), np.arange(2.0))
    assert np.array_equal(data.outputs["y"]["data"].read(), np.ones(3))
    assert np.array_equal(data.parameters["other"]["l"]["w"].read(), np.full(2, 7.0))
    assert set(data.parameters["net1"]) == {"layer1", "layer2"}   # replaced, not merged
    with h5py.File(path) as h5:
        assert h5["inputs"].attrs["note"] == "kept"
    with pytest.raises(OutputError, match="exists"):
        save_parameters(path, net, network_parameters(), overwrite=False)


# ----------------------------------------------------------------------- budgets
def test_limit_flags_parse_and_apply():
    assert parse_limit("max_elements=1e9") == ("max_elements", 10**9)
    assert parse_limit("yaml-bytes=64MiB") == ("max_yaml_bytes", 64 * 2**20)
    for bad in ("max_elements", "nonsense=3", "max_elements=-1", "max_elements=x"):
        with pytest.raises(ValueError):
            parse_limit(bad)
    default = current().max_elements
    with use_limits(max_elements=5):
        from petab_sciml.formats.yaml import network_from_dict

        with pytest.raises(LimitError, match="max_elements = 5") as info:
            network_from_dict({"nn_model_id": "n", "inputs": [{"input_id": "x"}],
                               "layers": [{"layer_id": "l", "layer_type": "Linear",
                                           "args": {"in_features": 2, "out_features": 2}}],
                               "forward": [{"name": "x", "op": "placeholder"},
                                           {"name": "l", "op": "call_module", "target": "l",
                                            "args": ["x"]},
                                           {"name": "output", "op": "output",
                                            "args": ["l"]}]})
        assert info.value.code == "LIMIT_ELEMENTS" and info.value.entry == "layer 'l'"
    assert current().max_elements == default

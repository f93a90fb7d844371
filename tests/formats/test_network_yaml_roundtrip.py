"""YAML -> IR -> YAML gives equal data for every network file of the official suite."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from petab_sciml.formats import yaml as yaml_format
from tests.support.suite import all_suite_network_files, requires_suite

FILES = all_suite_network_files()


@requires_suite
def test_suite_has_network_files() -> None:
    assert len(FILES) >= 46


@requires_suite
@pytest.mark.parametrize("path", FILES, ids=lambda p: "/".join(Path(p).parts[-3:]))
def test_yaml_ir_yaml_is_lossless(path: Path) -> None:
    original = yaml.safe_load(path.read_text())
    network = yaml_format.read(path)
    assert yaml_format.network_to_dict(network) == original
    # and the written text parses back to the same data
    assert yaml.safe_load(yaml_format.dumps(network)) == original


def test_write_is_atomic_and_roundtrips(tmp_path: Path) -> None:
    data = {
        "nn_model_id": "net",
        "inputs": [{"input_id": "x"}],
        "layers": [{"layer_id": "fc", "layer_type": "Linear",
                    "args": {"in_features": 3, "out_features": 2}}],
        "forward": [
            {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {}},
            {"name": "fc", "op": "call_module", "target": "fc", "args": ["x"], "kwargs": {}},
            {"name": "out", "op": "output", "target": "output", "args": ["fc"], "kwargs": {}},
        ],
    }
    network = yaml_format.network_from_dict(data)
    target = tmp_path / "net.yaml"
    yaml_format.write(network, target)
    assert [p.name for p in tmp_path.iterdir()] == ["net.yaml"]
    assert yaml.safe_load(target.read_text()) == data

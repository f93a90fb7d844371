"""Reading a fit's outputs with h5py and csv alone (no code of ours), for tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def saved_values(problem_yaml: Path) -> dict[str, np.ndarray]:
    """What ``problem.save`` wrote, by name, read with h5py and csv alone: estimated
    mechanistic parameters' nominal values, and every array of the trained parameters
    file as ``net.parameters[layer].array``."""
    import csv

    import h5py
    import yaml

    config = yaml.safe_load(problem_yaml.read_text())
    values = {}
    for table in config["parameter_files"]:
        with open(problem_yaml.parent / table, newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                if row.get("estimate", "").lower() == "true" and row["nominalValue"] != "array":
                    values[row["parameterId"]] = np.float64(row["nominalValue"])
    with h5py.File(problem_yaml.parent / "parameters_trained.hdf5", "r") as h5:
        for net, layers in h5["parameters"].items():
            for layer, arrays in layers.items():
                for array, data in arrays.items():
                    values[f"{net}.parameters[{layer}].{array}"] = data[()]
    return values

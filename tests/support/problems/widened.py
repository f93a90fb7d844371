"""Suite case 001 (or the bundled example, which has the same network files) with its
2-5-5-1 tanh network widened to 2-W-W-1: used by ``benchmarks/bench_width.py`` and
``tests/backends/jax/test_large_networks.py``.

The original network sits in the first five hidden units, whose weights see only each
other; the other units are drawn like PyTorch's default initialization and reach the
output through weights scaled by :data:`PERTURBATION`, so the dynamics (and the solver's
steps) stay close to the original's at every width.  Deterministic (seeded).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

PERTURBATION = 0.05
"""Scale of the extra hidden units' contribution to the network output."""

Arrays = dict[str, dict[str, np.ndarray]]
"""Network arrays: layer -> array name -> values (PyTorch layout)."""


def widened_arrays(source: Arrays, width: int, seed: int = 0) -> Arrays:
    """The 2-5-5-1 network's arrays ``source`` embedded in a 2-``width``-``width``-1
    network."""
    rng = np.random.default_rng(seed)
    k = source["layer1"]["weight"].shape[0]

    def uniform(shape, fan_in):
        b = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-b, b, shape)

    w1, b1 = uniform((width, 2), 2), uniform((width,), 2)
    w2, b2 = uniform((width, width), width), uniform((width,), width)
    w3, b3 = PERTURBATION * uniform((1, width), width), source["layer3"]["bias"].copy()
    w1[:k], b1[:k] = source["layer1"]["weight"], source["layer1"]["bias"]
    w2[:k, :k], b2[:k] = source["layer2"]["weight"], source["layer2"]["bias"]
    w2[:k, k:] = 0.0   # the original units see only themselves
    w3[:, :k] = source["layer3"]["weight"]
    return {"layer1": {"weight": w1, "bias": b1}, "layer2": {"weight": w2, "bias": b2},
            "layer3": {"weight": w3, "bias": b3}}


def read_arrays(path: Path) -> Arrays:
    """The arrays of network ``net1`` in the PEtab SciML HDF5 array file ``path``."""
    import h5py

    with h5py.File(path, "r") as f:
        group = f["parameters"]["net1"]
        return {layer: {name: np.asarray(group[layer][name]) for name in group[layer]}
                for layer in group}


def write_widened_problem(width: int, directory: Path, source: Path) -> Arrays:
    """Copy the problem folder ``source`` (suite case 001's ``petab`` folder or
    ``examples/lotka_volterra_ude``: a 2-5-5-1 network ``net1`` in ``net1.yaml`` and
    ``net1_ps.hdf5``) to ``directory`` with hidden width ``width``; returns the network's
    arrays."""
    import h5py

    source = Path(source)
    shutil.copytree(source, directory, dirs_exist_ok=True)
    arrays = widened_arrays(read_arrays(source / "net1_ps.hdf5"), width)
    text = (source / "net1.yaml").read_text()
    text = text.replace("in_features: 2\n    out_features: 5",
                        f"in_features: 2\n    out_features: {width}")
    text = text.replace("in_features: 5\n    out_features: 5",
                        f"in_features: {width}\n    out_features: {width}")
    text = text.replace("in_features: 5\n    out_features: 1",
                        f"in_features: {width}\n    out_features: 1")
    if text.count(f"out_features: {width}") < 2 and width != 5:
        raise ValueError(f"{source / 'net1.yaml'} is not the 2-5-5-1 network")
    (directory / "net1.yaml").write_text(text)
    with h5py.File(directory / "net1_ps.hdf5", "w") as f:
        f.create_dataset("metadata/pytorch_format", data=np.uint8(1))
        for layer, named in arrays.items():
            for name, value in named.items():
                f.create_dataset(f"parameters/net1/{layer}/{name}", data=value)
    return arrays

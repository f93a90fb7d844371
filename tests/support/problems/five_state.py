"""A 5-state UDE with a 10k-parameter network, scaled to many experiments: used by
``benchmarks/bench_five_state.py`` (issue 17 point 3).

The model is a linear chain ``x1 -> x2 -> x3 -> x4 -> x5 ->`` (mass action, rates
``k1..k5``, estimated) fed by an inflow into ``x1`` whose rate is a network of all five
states: ``u = net1(x1, ..., x5)``, an MLP 5-96-96-1 with tanh (9,985 parameters,
estimated).  Experiment ``e`` starts from its own ``x1``, ``x2`` (a condition per
experiment) and measures ``x1`` and ``x5`` on its own time grid (three grids of 6-8
points, as ``scaled_lv.py``).  Measurements are seeded numbers of the right magnitude: the
benchmark measures cost, not fit.  Deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SIZES = [5, 96, 96, 1]
RATES = {"k1": 0.8, "k2": 0.6, "k3": 0.5, "k4": 0.4, "k5": 0.3}
NOISE_SD = 0.1


def initial_condition(e: int) -> tuple[float, float]:
    """(x1, x2) at t = 0 of experiment ``e``; x3..x5 start at 0.1."""
    rng = np.random.default_rng(5000 + e)
    return float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.0, 1.0))


def time_grid(e: int) -> np.ndarray:
    """Measurement times of experiment ``e``."""
    if e % 3 == 0:
        return np.linspace(0.5, 4.0, 8)
    if e % 3 == 1:
        return np.linspace(0.25, 3.75, 8)
    return np.linspace(0.5, 3.0, 6)


def network_arrays(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """The network's nominal arrays (PyTorch layout): small weights, so the inflow stays
    a smooth function of the states of order 0.1."""
    from tests.support.problems.models import linear

    rng = np.random.default_rng(seed)
    layers = {}
    for k in range(len(SIZES) - 1):
        scale = 0.3 / np.sqrt(SIZES[k])
        layers[f"layer{k + 1}"] = linear(rng, SIZES[k], SIZES[k + 1], scale)
    layers[f"layer{len(SIZES) - 1}"]["bias"] += 0.2
    return layers


def write_five_state(folder: Path, n_experiments: int, seed: int = 0) -> Path:
    """Write the problem into ``folder``; returns the problem YAML's path."""
    from petab_sciml.arrays import write_array_file
    from tests.support.problems.models import lv_sbml, mlp_yaml

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    species = {f"x{i}": 0.1 for i in range(1, 6)}
    reactions = [(f"r{i}", [f"x{i}"], [f"x{i + 1}"] if i < 5 else [], f"k{i} * x{i}")
                 for i in range(1, 6)]
    reactions.append(("inflow", [], ["x1"], "u"))
    (folder / "model.xml").write_text(lv_sbml("five_state", species, {**RATES, "u": 0.0},
                                              reactions))
    (folder / "net1.yaml").write_text(mlp_yaml("net1", SIZES, "tanh"))
    write_array_file(folder / "net1_ps.hdf5", parameters={"net1": network_arrays(seed)})
    lines = {
        "hybridization.tsv": ["targetId\ttargetValue"]
        + [f"net1_x{i}\tx{i}" for i in range(1, 6)] + ["u\tnet1_u"],
        "mapping.tsv": ["petabEntityId\tmodelEntityId"]
        + [f"net1_x{i}\tnet1.inputs[0][{i - 1}]" for i in range(1, 6)]
        + ["net1_u\tnet1.outputs[0][0]", "net1_ps\tnet1.parameters"],
        "observables.tsv": ["observableId\tobservableFormula\tnoiseFormula\t"
                            "observableTransformation\tnoiseDistribution",
                            f"x1_obs\tx1\t{NOISE_SD}\tlin\tnormal",
                            f"x5_obs\tx5\t{NOISE_SD}\tlin\tnormal"],
        "parameters.tsv": ["parameterId\tparameterScale\tlowerBound\tupperBound\t"
                           "nominalValue\testimate"]
        + [f"{k}\tlin\t0.01\t10.0\t{v}\ttrue" for k, v in RATES.items()]
        + ["net1_ps\tlin\t-inf\tinf\tarray\ttrue"],
    }
    rng = np.random.default_rng(seed)
    exps = ["experimentId\ttime\tconditionId"]
    conds = ["conditionId\ttargetId\ttargetValue"]
    meas = ["observableId\texperimentId\tmeasurement\ttime"]
    for e in range(n_experiments):
        x1, x2 = initial_condition(e)
        exps.append(f"e{e}\t0\tc{e}")
        conds += [f"c{e}\tx1\t{x1!r}", f"c{e}\tx2\t{x2!r}"]
        for obs, level in (("x1_obs", x1), ("x5_obs", 0.3)):
            for t in time_grid(e):
                value = float(level * np.exp(-0.3 * t) + rng.normal(0, NOISE_SD))
                meas.append(f"{obs}\te{e}\t{value!r}\t{float(t)!r}")
    lines["experiments.tsv"], lines["conditions.tsv"] = exps, conds
    lines["measurements.tsv"] = meas
    for name, rows in lines.items():
        (folder / name).write_text("\n".join(rows) + "\n")
    (folder / "problem.yaml").write_text("""format_version: "2.0.0"
model_files:
  five_state:
    location: "model.xml"
    language: "sbml"
measurement_files: ["measurements.tsv"]
observable_files: ["observables.tsv"]
experiment_files: ["experiments.tsv"]
condition_files: ["conditions.tsv"]
parameter_files: ["parameters.tsv"]
mapping_files: ["mapping.tsv"]
extensions:
  sciml:
    version: "0.1.0"
    required: true
    array_files: ["net1_ps.hdf5"]
    hybridization_files: ["hybridization.tsv"]
    neural_networks:
      net1:
        location: "net1.yaml"
        format: "YAML"
        pre_initialization: false
""")
    return folder / "problem.yaml"

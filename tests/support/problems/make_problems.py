"""Write the problems of :mod:`tests.support.problems.models` (deterministic; needs libsbml and
scipy).  Run ``python tests/support/problems/make_problems.py`` from the repository root to
rewrite ``tests/support/problems/benchmark_like/``; the four older drafts are written on first
use into a temporary folder (:func:`tests.support.problems.models.older_drafts`, which calls
:func:`write_older_drafts`).

Measurements are the reference model's simulations plus seeded Gaussian noise; values
are written with ``repr`` so they read back exactly.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from petab_sciml.arrays import write_array_file  # noqa: E402
from tests.support.problems import models as m  # noqa: E402


def tsv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    lines = ["\t".join(header)] + ["\t".join(str(c) for c in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def measurements(example: m.Example, keys: dict[str, str], observables: list[str],
                 times: list[float], seed: int, noise: float, header: list[str],
                 layout: str = "old") -> list[list[object]]:
    """Rows for every key (condition or experiment) x observable x time."""
    rng = np.random.default_rng(seed)
    rows = []
    for key, label in keys.items():
        states = example.simulate(key)
        for obs in observables:
            for t in times:
                value = example.observe(obs, states[t]) + rng.normal(0.0, noise)
                cells = {"observableId": obs, "simulationConditionId": label,
                         "experimentId": label, "measurement": repr(float(value)),
                         "time": repr(float(t))}
                rows.append([cells[c] for c in header])
    return rows


OLD_YAML = """problems:
  - model_files:
      {model_id}:
        location: "lv.xml"
        language: "sbml"
    measurement_files:
      - "measurements.tsv"
    observable_files:
      - "observables.tsv"
    condition_files:
      - "conditions.tsv"
    mapping_files:
      - "mapping.tsv"
format_version: 2.0.0
extensions:
  sciml:
    array_files:
{arrays}
    hybridization_files:
      - "hybridization.tsv"
    {nets_key}:
      {net}:
        location: "{net}.yaml"
        static: {static}
        format: "YAML"
parameter_file: "parameters.tsv"
"""

OLD_MEASUREMENT_HEADER = ["observableId", "simulationConditionId", "measurement", "time"]
V1_PARAMETER_HEADER = ["parameterId", "parameterScale", "lowerBound", "upperBound",
                       "nominalValue", "estimate"]
V2_PARAMETER_HEADER = ["parameterId", "lowerBound", "upperBound", "nominalValue", "estimate"]
OBSERVABLE_HEADER = ["observableId", "observableFormula", "noiseFormula",
                     "observableTransformation", "noiseDistribution"]


def _old_yaml(folder: Path, *, net: str, static: bool, arrays: list[str],
              nets_key: str = "neural_nets", model_id: str = "lv") -> None:
    listed = "\n".join(f'      - "{a}"' for a in arrays)
    (folder / "problem.yaml").write_text(OLD_YAML.format(
        model_id=model_id, arrays=listed, nets_key=nets_key, net=net,
        static=str(static).lower()), encoding="utf-8")


def _fresh(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def write_getting_started() -> None:
    ex = m.getting_started()
    f = _fresh(ex.folder)
    _old_yaml(f, net="net1", static=False, arrays=["net1_ps.hdf5"])
    (f / "lv.xml").write_text(m.lv_sbml(
        "getting_started", {"prey": 0.1, "predator": 0.1},
        {"alpha": 1.3, "delta": 1.8, "beta": 0.0, "gamma": 0.0},
        [("growth", ["prey"], ["prey", "prey"], "alpha * prey"),
         ("loss", ["prey"], [], "beta"), ("gain", [], ["predator"], "gamma"),
         ("death", ["predator"], [], "delta * predator")]))
    (f / "net1.yaml").write_text(m.mlp_yaml("net1", [2, 4, 2], "tanh"))
    write_array_file(f / "net1_ps.hdf5", parameters=ex.networks)
    tsv(f / "conditions.tsv", ["conditionId", "conditionName", "prey", "predator"],
        [["cond1", "initial state", 0.44, 4.6]])
    tsv(f / "hybridization.tsv", ["targetId", "targetValue"],
        [["net1_input1", "prey"], ["net1_input2", "predator"], ["beta", "net1_output1"],
         ["gamma", "net1_output2"]])
    tsv(f / "mapping.tsv", ["petabEntityId", "modelEntityId"],
        [["net1_input1", "net1.inputs[0][0]"], ["net1_input2", "net1.inputs[0][1]"],
         ["net1_output1", "net1.outputs[0][0]"], ["net1_output2", "net1.outputs[0][1]"],
         ["net1_ps", "net1.parameters"]])
    tsv(f / "parameters.tsv", V1_PARAMETER_HEADER,
        [["alpha", "lin", 0.0, 15.0, 1.3, 1], ["delta", "lin", 0.0, 15.0, 1.8, 1],
         ["net1_ps", "lin", "-inf", "inf", "array", 1]])
    tsv(f / "observables.tsv", OBSERVABLE_HEADER,
        [["prey_o", "prey", 0.05, "lin", "normal"],
         ["predator_o", "predator", 0.05, "lin", "normal"]])
    tsv(f / "measurements.tsv", OLD_MEASUREMENT_HEADER,
        measurements(ex, {"cond1": "cond1"}, ["prey_o", "predator_o"], m.SHORT_TIMES, 1,
                     0.05, OLD_MEASUREMENT_HEADER))


def write_how_to_dmms() -> None:
    ex = m.how_to_dmms()
    f = _fresh(ex.folder)
    _old_yaml(f, net="net3", static=True, arrays=["net3_ps.hdf5", "net3_input2.hdf5"],
              nets_key="neural_networks")
    (f / "lv.xml").write_text(m.lv_sbml(
        "how_to_dmms", {"prey": 0.1, "predator": 0.1},
        {"alpha": 1.3, "beta": 0.9, "gamma": 0.0, "delta": 1.8}, m.LV_FULL))
    (f / "net3.yaml").write_text(DMMS_NET)
    write_array_file(f / "net3_ps.hdf5", parameters=ex.networks)
    write_array_file(f / "net3_input2.hdf5", inputs={"net3_input": m.DMMS_IMAGES})
    tsv(f / "conditions.tsv", ["conditionId", "prey", "predator"],
        [[c, *x0] for c, x0 in m.DMMS_X0.items()])
    tsv(f / "hybridization.tsv", ["targetId", "targetValue"],
        [["net3_input", "array"], ["gamma", "net3_output1"]])
    tsv(f / "mapping.tsv", ["petabEntityId", "modelEntityId"],
        [["net3_input", "net3.inputs[0]"], ["net3_output1", "net3.outputs[0][0]"],
         ["net3_ps", "net3.parameters"]])
    tsv(f / "parameters.tsv", V2_PARAMETER_HEADER,
        [["alpha", 0.0, 15.0, 1.3, "true"], ["delta", 0.0, 15.0, 1.8, "true"],
         ["beta", 0.0, 15.0, 0.9, "true"], ["net3_ps", "-inf", "inf", "array", "true"]])
    tsv(f / "observables.tsv", OBSERVABLE_HEADER[:3] + ["noiseDistribution"],
        [["prey_o", "prey", 0.05, "normal"], ["predator_o", "predator", 0.05, "normal"]])
    tsv(f / "measurements.tsv", OLD_MEASUREMENT_HEADER,
        measurements(ex, {"cond1": "cond1", "cond2": "cond2"}, ["prey_o", "predator_o"],
                     m.LV_TIMES, 2, 0.05, OLD_MEASUREMENT_HEADER))


DMMS_NET = """nn_model_id: net3
inputs:
- input_id: input0
layers:
- layer_id: layer1
  layer_type: Conv2d
  args:
    stride: [1, 1]
    padding: [0, 0]
    dilation: [1, 1]
    groups: 1
    padding_mode: zeros
    in_channels: 2
    out_channels: 1
    kernel_size: [3, 3]
    bias: true
- layer_id: layer2
  layer_type: Flatten
  args:
    start_dim: 1
    end_dim: -1
- layer_id: layer3
  layer_type: Linear
  args:
    in_features: 9
    out_features: 1
    bias: true
forward:
- {name: net_input, op: placeholder, target: net_input, args: [], kwargs: {}}
- {name: layer1, op: call_module, target: layer1, args: [net_input], kwargs: {}}
- {name: layer2, op: call_module, target: layer2, args: [layer1], kwargs: {}}
- {name: layer3, op: call_module, target: layer3, args: [layer2], kwargs: {}}
- {name: relu, op: call_function, target: relu, args: [layer3], kwargs: {inplace: false}}
- {name: output, op: output, target: output, args: [relu], kwargs: {}}
"""


def _lv_io_tables(f: Path, outputs: list[tuple[str, str]]) -> None:
    tsv(f / "mapping.tsv", ["petabEntityId", "modelEntityId"],
        [["net1_input1", "net1.inputs[0][0]"], ["net1_input2", "net1.inputs[0][1]"],
         *[[pid, f"net1.outputs[0][{k}]"] for k, (pid, _) in enumerate(outputs)],
         ["net1_ps", "net1.parameters"]])
    tsv(f / "hybridization.tsv", ["targetId", "targetValue"],
        [["net1_input1", "prey"], ["net1_input2", "predator"],
         *[[target, pid] for pid, target in outputs if target]])


def write_how_to_neural_ode() -> None:
    ex = m.how_to_neural_ode()
    f = _fresh(ex.folder)
    _old_yaml(f, net="net1", static=False, arrays=["net1_ps.hdf5"], model_id="model")
    (f / "lv.xml").write_text(m.lv_sbml(
        "neural_ode", {"prey": 0.1, "predator": 0.1}, {"alpha": 1.3, "delta": 1.8},
        [("r1", [], ["prey"], "alpha"), ("r2", [], ["predator"], "delta")]))
    (f / "net1.yaml").write_text(m.mlp_yaml("net1", [2, 5, 2], "tanh"))
    write_array_file(f / "net1_ps.hdf5", parameters=ex.networks)
    tsv(f / "conditions.tsv", ["conditionId", "targetId", "targetValue"],
        [["cond1", "prey", 0.5], ["cond1", "predator", 1.0]])
    _lv_io_tables(f, [("net1_output1", "alpha"), ("net1_output2", "delta")])
    tsv(f / "parameters.tsv", V1_PARAMETER_HEADER,
        [["net1_ps", "lin", "-inf", "inf", "", 1]])
    tsv(f / "observables.tsv", OBSERVABLE_HEADER,
        [["prey_o", "prey", 0.05, "lin", "normal"],
         ["predator_o", "predator", 0.05, "lin", "normal"]])
    tsv(f / "measurements.tsv", OLD_MEASUREMENT_HEADER,
        measurements(ex, {"cond1": "cond1"}, ["prey_o", "predator_o"], m.SHORT_TIMES, 3,
                     0.05, OLD_MEASUREMENT_HEADER))
    # the shape of the official model before it was fixed, for validate == load
    (f.parent / "neural_ode_invalid_sbml.xml").write_text(m.neural_ode_invalid_sbml())


def write_how_to_observable() -> None:
    ex = m.how_to_observable()
    f = _fresh(ex.folder)
    _old_yaml(f, net="net1", static=False, arrays=["net1_ps.hdf5"])
    (f / "lv.xml").write_text(m.lv_sbml(
        "how_to_observable", {"prey": 0.1, "predator": 0.1},
        {"alpha": 1.3, "beta": 0.9, "gamma": 0.8, "delta": 1.8}, m.LV_FULL))
    (f / "net1.yaml").write_text(m.mlp_yaml("net1", [2, 4, 1], "tanh"))
    write_array_file(f / "net1_ps.hdf5", parameters=ex.networks)
    tsv(f / "conditions.tsv", ["conditionId", "targetId", "targetValue"],
        [["cond1", "prey", 0.44], ["cond1", "predator", 4.6]])
    _lv_io_tables(f, [("net1_output1", "")])
    tsv(f / "parameters.tsv", V1_PARAMETER_HEADER,
        [[p, "lin", 0.0, 15.0, v, 1] for p, v in
         (("alpha", 1.3), ("beta", 0.9), ("gamma", 0.8), ("delta", 1.8))]
        + [["net1_ps", "lin", "-inf", "inf", "array", 1]])
    tsv(f / "observables.tsv", OBSERVABLE_HEADER,
        [["prey_o", "net1_output1", 0.05, "lin", "normal"],
         ["predator_o", "predator", 0.05, "lin", "normal"]])
    tsv(f / "measurements.tsv", OLD_MEASUREMENT_HEADER,
        measurements(ex, {"cond1": "cond1"}, ["prey_o", "predator_o"], m.LV_TIMES, 4,
                     0.05, OLD_MEASUREMENT_HEADER))


BENCHMARK_YAML = """format_version: 2.0.0
parameter_files:
  - parameters.tsv
model_files:
  model:
    location: model.xml
    language: sbml
measurement_files:
  - measurements.tsv
observable_files:
  - observables.tsv
mapping_files:
  - mapping.tsv
extensions:
  sciml:
    version: 0.1.0
    required: true
    neural_nets:
      net1:
        location: net1.yaml
        format: yaml
        pre_initialization: false
    hybridization_files:
      - hybridization.tsv
    array_files:
      - {array_file}
"""
BENCHMARK_MEASUREMENT_HEADER = ["time", "measurement", "observableId", "experimentId"]


def write_ko_pendulum() -> None:
    ex = m.ko_pendulum()
    f = _fresh(ex.folder)
    (f / "problem.yaml").write_text(BENCHMARK_YAML.format(array_file="ps_net1.hdf5"))
    rules = [("theta1", "omega1"), ("theta2", "omega2"), ("omega1", "acceleration1"),
             ("omega2", "acceleration2")]
    (f / "model.xml").write_text(
        m.SBML_HEAD.format(v=2, id="ko_pendulum") + "    <listOfParameters>\n"
        + m._parameters(m.KO_X0, constant=False)
        + m._parameters({"acceleration1": None, "acceleration2": None})
        + "    </listOfParameters>\n    <listOfRules>\n"
        + "".join(m._rate_rule(v, rate) for v, rate in rules)
        + "    </listOfRules>\n" + m.SBML_TAIL)
    (f / "net1.yaml").write_text(m.mlp_yaml("net1", [4, 8, 8, 2], "gelu", method=False,
                                            kwargs="{inplace: false}"))
    write_array_file(f / "ps_net1.hdf5", parameters=ex.networks)
    tsv(f / "mapping.tsv", ["petabEntityId", "modelEntityId"],
        [*[[f"net1_input{k + 1}", f"net1.inputs[0][{k}]"] for k in range(4)],
         ["net1_output1", "net1.outputs[0][0]"], ["net1_output2", "net1.outputs[0][1]"],
         ["net1_ps", "net1.parameters"]])
    tsv(f / "hybridization.tsv", ["targetId", "targetValue"],
        [*[[f"net1_input{k + 1}", s] for k, s in enumerate(m.KO_X0)],
         ["acceleration1", "net1_output1"], ["acceleration2", "net1_output2"]])
    tsv(f / "parameters.tsv", V2_PARAMETER_HEADER, [["net1_ps", "-Inf", "Inf", "array", "true"]])
    observables = [f"obs_{s}" for s in m.KO_X0]
    tsv(f / "observables.tsv", ["observableId", "observableFormula", "noiseFormula",
                                "noiseDistribution"],
        [[o, o.removeprefix("obs_"), 1, "normal"] for o in observables])
    tsv(f / "measurements.tsv", BENCHMARK_MEASUREMENT_HEADER,
        measurements(ex, {"": ""}, observables, m.KO_TIMES, 5, 0.01,
                     BENCHMARK_MEASUREMENT_HEADER))


def write_dandekar_sir() -> None:
    ex = m.dandekar_sir()
    authors = m.dandekar_sir(network_parameters_zero=False)
    f = _fresh(ex.folder)
    (f / "problem.yaml").write_text(BENCHMARK_YAML.format(array_file="net1_ps.hdf5"))
    infection = "beta * S * I / N"
    rules = [("S", f"-({infection})"),
             ("I", f"{infection} - gamma * I - quarantine_rate * I"),
             ("R", "gamma * I + delta * T"), ("T", "quarantine_rate * I - delta * T")]
    (f / "model.xml").write_text(
        m.SBML_HEAD.format(v=2, id="dandekar_sir")
        + '    <listOfCompartments>\n      <compartment id="population" '
          'spatialDimensions="0" size="1" constant="true"/>\n    </listOfCompartments>\n'
        + "    <listOfSpecies>\n" + m._species(m.SIR_X0, "population")
        + "    </listOfSpecies>\n    <listOfParameters>\n"
        + m._parameters({"N": m.SIR_N, "beta": None, "gamma": None, "delta": None,
                         "quarantine_rate": None})
        + "    </listOfParameters>\n    <listOfRules>\n"
        + "".join(m._rate_rule(v, rate) for v, rate in rules)
        + "    </listOfRules>\n" + m.SBML_TAIL)
    (f / "net1.yaml").write_text(m.mlp_yaml("net1", [3, 5, 1], "silu", method=False,
                                            kwargs="{inplace: false}"))
    write_array_file(f / "net1_ps.hdf5", parameters=ex.networks)
    tsv(f / "mapping.tsv", ["petabEntityId", "modelEntityId"],
        [*[[f"net1_input{k + 1}", f"net1.inputs[0][{k}]"] for k in range(3)],
         ["net1_output1", "net1.outputs[0][0]"], ["net1_ps", "net1.parameters"]])
    tsv(f / "hybridization.tsv", ["targetId", "targetValue"],
        [["net1_input1", "S/N"], ["net1_input2", "I/N"], ["net1_input3", "R/N"],
         ["quarantine_rate", "net1_output1"]])
    tsv(f / "parameters.tsv", V2_PARAMETER_HEADER,
        [[p, 0.0, 10.0, v, "true"] for p, v in m.SIR_RATES.items()]
        + [["net1_ps", "-Inf", "Inf", 0.0, "true"]])
    tsv(f / "observables.tsv", ["observableId", "observableFormula", "noiseFormula",
                                "noiseDistribution"],
        [["obs_infected", "log(abs(I + T))", 1, "normal"],
         ["obs_recovered", "log(abs(R))", 1, "normal"]])
    # the data follow the array file's network (what the authors may have meant)
    tsv(f / "measurements.tsv", BENCHMARK_MEASUREMENT_HEADER,
        measurements(authors, {"": ""}, ["obs_infected", "obs_recovered"], m.SIR_TIMES, 6,
                     0.05, BENCHMARK_MEASUREMENT_HEADER))


def write_older_drafts() -> None:
    """The four older-draft problems, into :func:`tests.support.problems.models.older_drafts`."""
    write_getting_started()
    write_how_to_dmms()
    write_how_to_neural_ode()
    write_how_to_observable()


def main() -> None:
    write_ko_pendulum()
    write_dandekar_sir()


if __name__ == "__main__":
    main()

"""Validate-and-load time and peak memory for a generated PEtab SciML problem with a
~10M-parameter network and 1,000 conditions (target: validate under 3 s).

    python benchmarks/bench_problem.py [--params 10_000_000] [--conditions 1000]
                                       [--backend torch] [--keep DIR]

Each phase runs in a fresh subprocess so its peak resident memory (ru_maxrss) is its own.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

SBML = """<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" level="3" version="2">
  <model id="bench">
    <listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="x" compartment="c" initialConcentration="1" hasOnlySubstanceUnits="true"
               boundaryCondition="false" constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="k" value="1" constant="true"/>
      <parameter id="theta" value="1" constant="true"/>
    </listOfParameters>
  </model>
</sbml>
"""


def generate(folder: Path, n_params: int, n_conditions: int) -> Path:
    """Write the problem; the network is 2 -> h -> h -> 1 Linear layers with h chosen so
    that it has about ``n_params`` parameters."""
    from petab_sciml.arrays import write_array_file

    h = int((-(2 + 1 + 1 + 1) + math.sqrt(25 + 4 * (n_params - 1))) / 2)
    sizes = [(2, h), (h, h), (h, 1)]
    layers, forward = [], [{"name": "x", "op": "placeholder", "target": "x", "args": [],
                            "kwargs": {}}]
    prev = "x"
    for i, (a, b) in enumerate(sizes, 1):
        layers.append({"layer_id": f"layer{i}", "layer_type": "Linear",
                       "args": {"in_features": a, "out_features": b, "bias": True}})
        forward.append({"name": f"layer{i}", "op": "call_module", "target": f"layer{i}",
                        "args": [prev], "kwargs": {}})
        prev = f"layer{i}"
        if i < len(sizes):
            forward.append({"name": f"act{i}", "op": "call_function", "target": "tanh",
                            "args": [prev], "kwargs": {}})
            prev = f"act{i}"
    forward.append({"name": "output", "op": "output", "target": "output", "args": [prev],
                    "kwargs": {}})
    (folder / "net.yaml").write_text(yaml.safe_dump(
        {"nn_model_id": "net", "inputs": [{"input_id": "x"}], "layers": layers,
         "forward": forward}, sort_keys=False))
    rng = np.random.default_rng(0)
    params = {f"layer{i}": {"weight": rng.normal(0, 0.01, (b, a)),
                            "bias": rng.normal(0, 0.01, b)}
              for i, (a, b) in enumerate(sizes, 1)}
    write_array_file(folder / "net_ps.hdf5", parameters={"net": params})
    (folder / "model.xml").write_text(SBML)
    tsv = lambda rows: "\n".join("\t".join(map(str, r)) for r in rows) + "\n"  # noqa: E731
    (folder / "parameters.tsv").write_text(tsv([
        ["parameterId", "parameterScale", "lowerBound", "upperBound", "nominalValue",
         "estimate", "dropout"],
        ["k", "lin", 0.01, 100, 1, "true", ""],
        ["net_ps", "lin", "-inf", "inf", "array", "true", ""],
        ["net_l2", "lin", "-inf", "inf", "array", "false", "0.1"],
        ["net_l1_w0", "lin", -1, 1, 0.0, "true", ""]]))
    (folder / "mapping.tsv").write_text(tsv([
        ["petabEntityId", "modelEntityId"], ["net_in0", "net.inputs[0][0]"],
        ["net_in1", "net.inputs[0][1]"], ["net_out", "net.outputs[0][0]"],
        ["net_ps", "net.parameters"], ["net_l2", "net.parameters[layer2]"],
        ["net_l1_w0", "net.parameters[layer1].weight[0, 1]"]]))
    (folder / "hybridization.tsv").write_text(tsv([["targetId", "targetValue"],
                                                   ["theta", "net_out"]]))
    cond = [["conditionId", "targetId", "targetValue"]]
    exps = [["experimentId", "time", "conditionId"]]
    meas = [["observableId", "experimentId", "time", "measurement"]]
    for i in range(n_conditions):
        cond += [[f"c{i}", "net_in0", f"{i / n_conditions:.6f}"], [f"c{i}", "net_in1", "1.0"]]
        exps.append([f"e{i}", 0, f"c{i}"])
        meas += [["obs_x", f"e{i}", t, 1.0] for t in (1, 2, 5)]
    (folder / "conditions.tsv").write_text(tsv(cond))
    (folder / "experiments.tsv").write_text(tsv(exps))
    (folder / "measurements.tsv").write_text(tsv(meas))
    (folder / "observables.tsv").write_text(tsv([
        ["observableId", "observableFormula", "noiseFormula", "noiseDistribution"],
        ["obs_x", "x * theta", "0.1", "normal"]]))
    problem = {
        "format_version": "2.0.0",
        "model_files": {"bench": {"location": "model.xml", "language": "sbml"}},
        "parameter_files": ["parameters.tsv"], "mapping_files": ["mapping.tsv"],
        "condition_files": ["conditions.tsv"], "experiment_files": ["experiments.tsv"],
        "measurement_files": ["measurements.tsv"], "observable_files": ["observables.tsv"],
        "extensions": {"sciml": {
            "version": "0.1.0", "required": True, "array_files": ["net_ps.hdf5"],
            "hybridization_files": ["hybridization.tsv"],
            "neural_networks": {"net": {"location": "net.yaml", "format": "YAML",
                                        "pre_initialization": True}}}},
    }
    path = folder / "problem.yaml"
    path.write_text(yaml.safe_dump(problem, sort_keys=False))
    return path


def child(phase: str, path: str, backend: str) -> None:
    t0 = time.perf_counter()
    if phase == "import":
        import petab_sciml.problem  # noqa: F401
        result = {}
    elif phase == "validate":
        from petab_sciml.problem import validate_problem

        report = validate_problem(path)
        result = {"errors": [str(i) for i in report.issues.errors], "ok": report.ok}
    elif phase == "validate+libpetab":
        from petab_sciml.problem import validate_problem

        report = validate_problem(path, libpetab=True)
        result = {"errors": [str(i) for i in report.issues.errors], "ok": report.ok}
    else:
        from petab_sciml.problem import load_problem

        problem = load_problem(path, backend=backend)
        result = {"trainable": problem.parameters["net"].n_trainable,
                  "params": problem.networks["net"].parameter_count()}
    result["seconds"] = time.perf_counter() - t0
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=10_000_000)
    ap.add_argument("--conditions", type=int, default=1000)
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--child", nargs=3, metavar=("PHASE", "PATH", "BACKEND"))
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        path = generate(folder, args.params, args.conditions)
        print(f"generated {path} in {time.perf_counter() - t0:.1f} s "
              f"({args.params:,} parameters requested, {args.conditions} conditions)")
        results = {}
        for phase in ("import", "validate", "validate+libpetab", "load"):
            out = subprocess.run([sys.executable, __file__, "--child", phase, str(path),
                                  args.backend], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{phase}: failed\n{out.stderr[-2000:]}")
                sys.exit(1)
            results[phase] = json.loads(out.stdout.strip().splitlines()[-1])
        v = results["validate"]
        if not v["ok"]:
            print("generated problem is invalid:", v["errors"][:5])
            sys.exit(1)
        print(f"{'phase':<20}{'seconds':>10}{'peak RSS MiB':>15}")
        for phase, r in results.items():
            print(f"{phase:<20}{r['seconds']:>10.2f}{r['peak_rss_mib']:>15.0f}")
        load = results["load"]
        print(f"network parameters: {load['params']:,} ({load['trainable']:,} estimated); "
              f"backend {args.backend}")
        target = "met" if v["seconds"] < 3 else "MISSED"
        print(f"validate target (< 3 s): {target} ({v['seconds']:.2f} s, in-process, "
              "after imports)")


if __name__ == "__main__":
    main()

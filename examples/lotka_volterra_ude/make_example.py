"""Write the bundled example problem: a Lotka-Volterra universal differential equation.

The predation rate constant ``gamma`` of the predator-growth reaction is replaced by a
2-5-5-1 tanh network of (prey, predator) with a softplus output (a rate is positive, and
a network at its PyTorch default initialisation then gives a gamma of the right order,
so that random starts of a multi-start fit simulate sensibly); ``alpha``, ``beta``,
``delta`` and the network are estimated from synthetic measurements of both species,
generated here with scipy from the true model (gamma = 0.8) plus Gaussian noise (sd
0.05). Deterministic; run
``python examples/lotka_volterra_ude/make_example.py`` to rewrite the files beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# libsbml, scipy and torch are imported where used: report.py reads TRUE from here in an
# environment with JAX only.

HERE = Path(__file__).resolve().parent
TRUE = {"alpha": 1.3, "beta": 0.9, "gamma": 0.8, "delta": 1.8}
X0 = {"prey": 0.44, "predator": 4.6}
TIMES = np.linspace(1.0, 10.0, 10)
NOISE_SD = 0.05


def write_sbml(path: Path) -> None:
    import libsbml

    doc = libsbml.SBMLDocument(3, 2)
    model = doc.createModel()
    model.setId("lotka_volterra")
    comp = model.createCompartment()
    comp.setId("default")
    comp.setSize(1.0)
    comp.setConstant(True)
    for sid, value in X0.items():
        s = model.createSpecies()
        s.setId(sid)
        s.setCompartment("default")
        s.setInitialConcentration(value)
        s.setHasOnlySubstanceUnits(False)
        s.setBoundaryCondition(False)
        s.setConstant(False)
    for pid, value in TRUE.items():
        p = model.createParameter()
        p.setId(pid)
        p.setValue(value)
        p.setConstant(True)
    # prey -> 2 prey (alpha), predator -> (delta), prey + predator -> predator (beta),
    # prey + predator -> prey + 2 predator (gamma: replaced by the network)
    reactions = [
        ("growth", {"prey": 1}, {"prey": 2}, "alpha * prey"),
        ("death", {"predator": 1}, {}, "delta * predator"),
        ("predation", {"prey": 1, "predator": 1}, {"predator": 1}, "beta * prey * predator"),
        ("predator_growth", {"prey": 1, "predator": 1}, {"prey": 1, "predator": 2},
         "gamma * prey * predator"),
    ]
    for rid, reactants, products, law in reactions:
        r = model.createReaction()
        r.setId(rid)
        r.setReversible(False)
        for sid, n in reactants.items():
            ref = r.createReactant()
            ref.setSpecies(sid)
            ref.setStoichiometry(n)
            ref.setConstant(True)
        for sid, n in products.items():
            ref = r.createProduct()
            ref.setSpecies(sid)
            ref.setStoichiometry(n)
            ref.setConstant(True)
        r.createKineticLaw().setMath(libsbml.parseL3Formula(law))
    libsbml.writeSBMLToFile(doc, str(path))


def simulate_truth() -> np.ndarray:
    from scipy.integrate import solve_ivp

    a, b, g, d = TRUE["alpha"], TRUE["beta"], TRUE["gamma"], TRUE["delta"]

    def rhs(t, x):
        prey, pred = x
        return [a * prey - b * prey * pred, g * prey * pred - d * pred]

    sol = solve_ivp(rhs, (0, TIMES[-1]), list(X0.values()), t_eval=TIMES, rtol=1e-10,
                    atol=1e-10)
    return sol.y.T


def write_tables(folder: Path) -> None:
    rng = np.random.default_rng(2026)
    truth = simulate_truth()
    rows = ["observableId\texperimentId\tmeasurement\ttime"]
    for k, obs in enumerate(["prey_obs", "predator_obs"]):
        for t, value in zip(TIMES, truth[:, k]):
            rows.append(f"{obs}\tlv_experiment\t{value + rng.normal(0, NOISE_SD):.10g}\t{t:g}")
    files = {
        "measurements.tsv": "\n".join(rows),
        "observables.tsv": "observableId\tobservableFormula\tnoiseFormula\t"
                           "observableTransformation\tnoiseDistribution\n"
                           f"prey_obs\tprey\t{NOISE_SD}\tlin\tnormal\n"
                           f"predator_obs\tpredator\t{NOISE_SD}\tlin\tnormal",
        "experiments.tsv": "experimentId\ttime\tconditionId\nlv_experiment\t0.0\t",
        "parameters.tsv": "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\t"
                          "estimate\n"
                          "alpha\tlin\t0.5\t3.0\t1.1\ttrue\n"
                          "beta\tlin\t0.5\t3.0\t0.7\ttrue\n"
                          "delta\tlin\t0.5\t3.0\t1.5\ttrue\n"
                          "net1_ps\tlin\t-inf\tinf\tarray\ttrue",
        "mapping.tsv": "petabEntityId\tmodelEntityId\n"
                       "net1_prey\tnet1.inputs[0][0]\n"
                       "net1_predator\tnet1.inputs[0][1]\n"
                       "net1_gamma\tnet1.outputs[0][0]\n"
                       "net1_ps\tnet1.parameters",
        "hybridization.tsv": "targetId\ttargetValue\n"
                             "net1_prey\tprey\n"
                             "net1_predator\tpredator\n"
                             "gamma\tnet1_gamma",
        "problem.yaml": """format_version: "2.0.0"
model_files:
  lotka_volterra:
    location: "lv.xml"
    language: "sbml"
measurement_files: ["measurements.tsv"]
observable_files: ["observables.tsv"]
experiment_files: ["experiments.tsv"]
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
""",
    }
    for name, text in files.items():
        (folder / name).write_text(text.rstrip("\n") + "\n")


def write_network(folder: Path) -> None:
    import torch

    from petab_sciml.arrays import save_parameters
    from petab_sciml.formats import yaml as nn_yaml
    from petab_sciml.formats.torch_fx import network_from_module, parameters_from_module

    class Net1(torch.nn.Module):
        """The network that replaces gamma: 2 inputs (prey, predator), 1 output."""

        def __init__(self) -> None:
            super().__init__()
            self.layer1 = torch.nn.Linear(2, 5)
            self.layer2 = torch.nn.Linear(5, 5)
            self.layer3 = torch.nn.Linear(5, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.softplus(
                self.layer3(torch.tanh(self.layer2(torch.tanh(self.layer1(x))))))

    torch.manual_seed(0)
    module = Net1()
    network = network_from_module(module, "net1", input_ids=["input0"])
    nn_yaml.write(network, folder / "net1.yaml")
    params = parameters_from_module(module, network)
    # Small weights and an output bias of 0 so that the untrained network starts near a
    # constant gamma of softplus(0) = 0.69; training learns the rest.
    for arrays in params.values():
        for key in arrays:
            arrays[key] = (arrays[key] * 0.1).astype(np.float64)
    params["layer3"]["bias"][:] = 0.0
    save_parameters(folder / "net1_ps.hdf5", network, params)


def main() -> None:
    write_sbml(HERE / "lv.xml")
    write_tables(HERE)
    write_network(HERE)
    print(f"wrote the example problem to {HERE}")


if __name__ == "__main__":
    main()

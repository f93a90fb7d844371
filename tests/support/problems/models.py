"""Six real-world-shaped problems, written by us, and their independent references.

Four are built like the official PEtab SciML documentation examples in their older draft
(a ``problems:`` list, ``parameter_file``, ``simulationConditionId``, ``neural_nets`` and
``static``): ``getting_started`` (a UDE whose network replaces two terms of Lotka-Volterra;
per-target condition columns), ``how_to_dmms`` (a pre-initialization Conv2d network on
condition-specific images from an array file), ``how_to_neural_ode`` (the whole right-hand
side is a network; no mechanistic parameter) and ``how_to_observable`` (a network in an
observable formula).  Two are built like the PEtab SciML benchmark collection's problems:
``ko_pendulum`` (a second-order neural ODE of a double pendulum: states are SBML
parameters with rate rules, gelu written with ``inplace``, no condition, experiment, species
or compartment, and no constant parameter) and ``dandekar_sir`` (an SIR UDE whose network
reads ``S/N``, ``I/N``, ``R/N``, with ``nominalValue 0.0`` for all network parameters beside
an array file that holds other values).

Our own small networks, weights and data (seeded).  The references here use numpy and
scipy only: the networks are evaluated from the weights below (never read back through
petab_sciml), the ODEs are solved with ``scipy.integrate.solve_ivp`` at tight tolerances,
and the measurements are read from the measurement table with the ``csv`` module.
``make_problems.py`` writes the files: the two benchmark-like problems into
``tests/support/problems/benchmark_like/`` (committed), the four older drafts on first use into
a temporary folder of the process (:func:`older_drafts`; generated, not committed:
several of their small tables are byte for byte tables of the official suite).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCHMARK_LIKE = HERE / "benchmark_like"

_older_drafts: Path | None = None


def older_drafts() -> Path:
    """The folder of the four older-draft problems, written (about a second) by
    ``make_problems.write_older_drafts`` into a temporary folder on the first call in a
    process and removed when the process ends."""
    global _older_drafts
    if _older_drafts is None:
        import atexit
        import shutil
        import tempfile

        _older_drafts = Path(tempfile.mkdtemp(prefix="petab_sciml_older_drafts_"))
        atexit.register(shutil.rmtree, _older_drafts, True)
        from tests.support.problems import make_problems

        # the writers build the examples, whose folders are here: set before writing
        make_problems.write_older_drafts()
    return _older_drafts


# ----------------------------------------------------------------------------- networks
def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def linear(rng: np.random.Generator, n_in: int, n_out: int, scale: float,
           bias: float = 0.0) -> dict[str, np.ndarray]:
    return {"weight": rng.normal(0.0, scale, (n_out, n_in)),
            "bias": bias + rng.normal(0.0, scale, (n_out,))}


def mlp_yaml(net_id: str, sizes: list[int], activation: str, *, method: bool = True,
             kwargs: str = "{}") -> str:
    """A PEtab SciML YAML for Linear layers with ``activation`` between them, written the
    way torch.fx exports it (``call_method`` for ``tanh``, ``call_function`` otherwise)."""
    lines = [f"nn_model_id: {net_id}", "inputs:", "- input_id: input0", "layers:"]
    for k in range(len(sizes) - 1):
        lines += [f"- layer_id: layer{k + 1}", "  layer_type: Linear", "  args:",
                  f"    in_features: {sizes[k]}", f"    out_features: {sizes[k + 1]}",
                  "    bias: true"]
    lines += ["forward:", "- name: net_input", "  op: placeholder", "  target: net_input",
              "  args: []", "  kwargs: {}"]
    prev = "net_input"
    for k in range(len(sizes) - 1):
        lines += [f"- name: layer{k + 1}", "  op: call_module", f"  target: layer{k + 1}",
                  "  args:", f"  - {prev}", "  kwargs: {}"]
        prev = f"layer{k + 1}"
        if k < len(sizes) - 2:
            op = "call_method" if method else "call_function"
            lines += [f"- name: {activation}_{k}", f"  op: {op}", f"  target: {activation}",
                      "  args:", f"  - {prev}", f"  kwargs: {kwargs}"]
            prev = f"{activation}_{k}"
    lines += ["- name: output", "  op: output", "  target: output", "  args:", f"  - {prev}",
              "  kwargs: {}"]
    return "\n".join(lines) + "\n"


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


def mlp_forward(layers: dict[str, dict[str, np.ndarray]], activation: str,
                x: np.ndarray) -> np.ndarray:
    """PyTorch's Linear (``x @ W.T + b``) with ``activation`` between layers."""
    names = sorted(layers, key=lambda n: int(n.removeprefix("layer")))
    for k, name in enumerate(names):
        x = x @ layers[name]["weight"].T + layers[name]["bias"]
        if k < len(names) - 1:
            x = ACTIVATIONS[activation](x)
    return x


# ----------------------------------------------------------------------------- data
def read_measurements(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def solve(rhs: Callable, x0: list[float], times: list[float]) -> dict[float, np.ndarray]:
    """States at ``times`` (simulation from t = 0), scipy DOP853 at 1e-12."""
    from scipy.integrate import solve_ivp

    t_eval = sorted(set(times))
    t_end = max(t_eval)
    if t_end == 0.0:
        return {0.0: np.asarray(x0, float)}
    sol = solve_ivp(rhs, (0.0, t_end), x0, t_eval=t_eval, rtol=1e-12, atol=1e-12,
                    method="DOP853")
    assert sol.success, sol.message
    return {t: sol.y[:, i] for i, t in enumerate(sol.t)}


def normal_nll(measured: float, simulated: float, sigma: float) -> float:
    return 0.5 * math.log(2.0 * math.pi * sigma * sigma) + 0.5 * ((measured - simulated)
                                                                  / sigma) ** 2


@dataclass
class Example:
    """One problem: where it lives, its weights, and its reference objective."""

    name: str
    folder: Path
    networks: dict[str, dict[str, dict[str, np.ndarray]]]
    """The weights the array files hold: ``{net: {layer: {array: ndarray}}}``."""
    simulate: Callable[[str], dict[float, np.ndarray]]
    """experiment or condition key -> states at the measurement times (reference)."""
    observe: Callable[[str, np.ndarray], float]
    """observable id, states -> simulated value (reference)."""
    sigma: float
    condition_column: str
    """Measurement column naming the condition (older draft) or experiment."""

    @property
    def problem(self) -> Path:
        return self.folder / "problem.yaml"

    def nll(self, measurement_file: Path | None = None) -> float:
        """Negative log-likelihood of the measurements at the nominal parameters."""
        rows = read_measurements(measurement_file or self.folder / "measurements.tsv")
        by_key: dict[str, list[dict[str, str]]] = {}
        for row in rows:
            by_key.setdefault(row.get(self.condition_column, ""), []).append(row)
        total = 0.0
        for key, group in by_key.items():
            states = self.simulate(key)
            for row in group:
                y = self.observe(row["observableId"], states[float(row["time"])])
                total += normal_nll(float(row["measurement"]), y, self.sigma)
        return total


# ----------------------------------------------------------------------------- SBML
SBML_HEAD = """<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version{v}/core" level="3" version="{v}">
  <model id="{id}">
"""
SBML_TAIL = """  </model>
</sbml>
"""


def _species(ids_values: dict[str, float], compartment: str = "default") -> str:
    return "".join(
        f'      <species id="{s}" compartment="{compartment}" initialAmount="{v}" '
        'hasOnlySubstanceUnits="true" boundaryCondition="false" constant="false"/>\n'
        for s, v in ids_values.items())


def _parameters(ids_values: dict[str, float | None], constant: bool = True) -> str:
    out = ""
    for p, v in ids_values.items():
        value = "" if v is None else f' value="{v}"'
        out += f'      <parameter id="{p}"{value} constant="{str(constant).lower()}"/>\n'
    return out


def _math(formula: str) -> str:
    """MathML for the few formula shapes used below (products, sums, differences)."""
    import libsbml

    ast = libsbml.parseL3Formula(formula)
    assert ast is not None, formula
    return libsbml.writeMathMLToString(ast).replace('<?xml version="1.0" encoding="UTF-8"?>',
                                                   "").strip()


def _reaction(rid: str, reactants: list[str], products: list[str], law: str) -> str:
    def refs(kind: str, species: list[str]) -> str:
        if not species:
            return ""
        inner = "".join(f'<speciesReference species="{s}" stoichiometry="1" '
                        'constant="true"/>' for s in species)
        return f"<listOf{kind}>{inner}</listOf{kind}>"

    return (f'      <reaction id="{rid}" reversible="false" fast="false">'
            f'{refs("Reactants", reactants)}{refs("Products", products)}'
            f"<kineticLaw>{_math(law)}</kineticLaw></reaction>\n")


def _rate_rule(variable: str, formula: str) -> str:
    return f'      <rateRule variable="{variable}">{_math(formula)}</rateRule>\n'


def lv_sbml(model_id: str, x0: dict[str, float], params: dict[str, float],
            reactions: list[tuple[str, list[str], list[str], str]], version: int = 1) -> str:
    return (SBML_HEAD.format(v=version, id=model_id)
            + '    <listOfCompartments>\n      <compartment id="default" '
              'spatialDimensions="3" size="1" constant="true"/>\n    </listOfCompartments>\n'
            + "    <listOfSpecies>\n" + _species(x0) + "    </listOfSpecies>\n"
            + "    <listOfParameters>\n" + _parameters(params) + "    </listOfParameters>\n"
            + "    <listOfReactions>\n" + "".join(_reaction(*r) for r in reactions)
            + "    </listOfReactions>\n" + SBML_TAIL)


LV_FULL = [("growth", ["prey"], ["prey", "prey"], "alpha * prey"),
           ("predation", ["prey", "predator"], ["predator"], "beta * prey * predator"),
           ("birth", ["prey", "predator"], ["prey", "predator", "predator"],
            "gamma * prey * predator"),
           ("death", ["predator"], [], "delta * predator")]


def neural_ode_invalid_sbml() -> str:
    """The shape of the official how_to_neural_ode model before it was fixed: a
    compartment without id, species without compartment, species references without the
    ``constant`` attribute SBML L3V1 requires."""
    return (SBML_HEAD.format(v=1, id="neural_ode").replace('<model id="neural_ode">',
                                                           "<model>")
            + '    <listOfCompartments>\n      <compartment size="1" constant="true"/>\n'
              "    </listOfCompartments>\n    <listOfSpecies>\n"
              '      <species id="prey" initialAmount="0.5" hasOnlySubstanceUnits="true" '
              'boundaryCondition="false" constant="false"/>\n'
              '      <species id="predator" initialAmount="0.5" hasOnlySubstanceUnits="true" '
              'boundaryCondition="false" constant="false"/>\n'
              "    </listOfSpecies>\n    <listOfParameters>\n"
            + _parameters({"alpha": 1.3, "delta": 1.8}) + "    </listOfParameters>\n"
            + "    <listOfReactions>\n"
              '      <reaction id="r1" reversible="false"><listOfProducts>'
              '<speciesReference species="prey"/></listOfProducts><kineticLaw>'
            + _math("alpha") + "</kineticLaw></reaction>\n"
              '      <reaction id="r2" reversible="false"><listOfProducts>'
              '<speciesReference species="predator"/></listOfProducts><kineticLaw>'
            + _math("delta") + "</kineticLaw></reaction>\n"
            + "    </listOfReactions>\n" + SBML_TAIL)


# ----------------------------------------------------------------------------- examples
LV_TIMES = [1.0, 2.0, 3.0, 4.0, 5.0]
SHORT_TIMES = [0.5, 1.0, 1.5, 2.0, 2.5]


def getting_started() -> Example:
    rng = _rng(11)
    net = {"layer1": linear(rng, 2, 4, 0.5), "layer2": linear(rng, 4, 2, 0.5)}
    alpha, delta = 1.3, 1.8
    x0 = [0.44, 4.6]

    def rhs(t, x):
        o = mlp_forward(net, "tanh", np.asarray(x))
        return [alpha * x[0] - o[0], o[1] - delta * x[1]]

    return Example("getting_started", older_drafts() / "getting_started", {"net1": net},
                   lambda key: solve(rhs, x0, SHORT_TIMES),
                   lambda obs, x: float(x[0] if obs == "prey_o" else x[1]), 0.05,
                   "simulationConditionId")


DMMS_IMAGES = {c: _rng(20 + k).uniform(0.0, 1.0, (2, 5, 5)) for k, c in
               enumerate(("cond1", "cond2"))}
DMMS_X0 = {"cond1": [0.44, 4.6], "cond2": [0.5, 4.0]}


def conv2d(weight: np.ndarray, bias: np.ndarray, image: np.ndarray) -> np.ndarray:
    """PyTorch Conv2d (cross-correlation, stride 1, no padding) of an unbatched image."""
    c_out, c_in, kh, kw = weight.shape
    h, w = image.shape[1] - kh + 1, image.shape[2] - kw + 1
    out = np.empty((c_out, h, w))
    for o in range(c_out):
        for i in range(h):
            for j in range(w):
                out[o, i, j] = bias[o] + np.sum(weight[o] * image[:, i:i + kh, j:j + kw])
    return out


def how_to_dmms() -> Example:
    rng = _rng(12)
    net = {"layer1": {"weight": rng.normal(0.0, 0.2, (1, 2, 3, 3)),
                      "bias": rng.normal(0.0, 0.2, (1,))},
           "layer3": {"weight": rng.normal(0.0, 0.05, (1, 9)), "bias": np.array([0.8])}}
    alpha, beta, delta = 1.3, 0.9, 1.8

    def gamma(cond: str) -> float:
        features = conv2d(net["layer1"]["weight"], net["layer1"]["bias"], DMMS_IMAGES[cond])
        flat = features.reshape(1, -1)                       # Flatten(start_dim=1)
        out = flat @ net["layer3"]["weight"].T + net["layer3"]["bias"]
        return float(np.maximum(out, 0.0)[0, 0])             # relu

    def simulate(cond: str):
        g = gamma(cond)

        def rhs(t, x):
            return [alpha * x[0] - beta * x[0] * x[1], g * x[0] * x[1] - delta * x[1]]
        return solve(rhs, DMMS_X0[cond], LV_TIMES)

    return Example("how_to_dmms", older_drafts() / "how_to_dmms", {"net3": net}, simulate,
                   lambda obs, x: float(x[0] if obs == "prey_o" else x[1]), 0.05,
                   "simulationConditionId")


def how_to_neural_ode() -> Example:
    rng = _rng(13)
    net = {"layer1": linear(rng, 2, 5, 0.5), "layer2": linear(rng, 5, 2, 0.5)}
    x0 = [0.5, 1.0]

    def rhs(t, x):
        return list(mlp_forward(net, "tanh", np.asarray(x)))

    return Example("how_to_neural_ode", older_drafts() / "how_to_neural_ode", {"net1": net},
                   lambda key: solve(rhs, x0, SHORT_TIMES),
                   lambda obs, x: float(x[0] if obs == "prey_o" else x[1]), 0.05,
                   "simulationConditionId")


def how_to_observable() -> Example:
    rng = _rng(14)
    net = {"layer1": linear(rng, 2, 4, 0.5), "layer2": linear(rng, 4, 1, 0.5)}
    alpha, beta, gamma, delta = 1.3, 0.9, 0.8, 1.8
    x0 = [0.44, 4.6]

    def rhs(t, x):
        return [alpha * x[0] - beta * x[0] * x[1], gamma * x[0] * x[1] - delta * x[1]]

    def observe(obs: str, x: np.ndarray) -> float:
        if obs == "prey_o":
            return float(mlp_forward(net, "tanh", np.asarray(x))[0])
        return float(x[1])

    return Example("how_to_observable", older_drafts() / "how_to_observable", {"net1": net},
                   lambda key: solve(rhs, x0, LV_TIMES), observe, 0.05,
                   "simulationConditionId")


KO_X0 = {"theta1": -1.0, "theta2": -1.2, "omega1": -0.5, "omega2": -2.0}
KO_TIMES = [round(0.05 * k, 2) for k in range(11)]


def ko_pendulum() -> Example:
    rng = _rng(15)
    net = {"layer1": linear(rng, 4, 8, 0.4), "layer2": linear(rng, 8, 8, 0.4),
           "layer3": linear(rng, 8, 2, 0.4)}
    order = list(KO_X0)

    def rhs(t, x):
        acc = mlp_forward(net, "gelu", np.asarray(x))
        return [x[2], x[3], acc[0], acc[1]]

    return Example("ko_pendulum", BENCHMARK_LIKE / "ko_pendulum", {"net1": net},
                   lambda key: solve(rhs, list(KO_X0.values()), KO_TIMES),
                   lambda obs, x: float(x[order.index(obs.removeprefix("obs_"))]), 1.0,
                   "experimentId")


SIR_N = 1.0e5
SIR_X0 = {"S": 99000.0, "I": 800.0, "R": 100.0, "T": 100.0}
SIR_RATES = {"beta": 0.25, "gamma": 0.05, "delta": 0.02}
SIR_TIMES = [float(2 * k) for k in range(11)]


def dandekar_sir(*, network_parameters_zero: bool = True) -> Example:
    """With ``network_parameters_zero`` (the specification: the numeric nominal value
    wins over the array file), the network's output is 0; otherwise it uses the array
    file's weights (what the file's authors may have meant)."""
    rng = _rng(16)
    net = {"layer1": linear(rng, 3, 5, 0.5), "layer2": linear(rng, 5, 1, 0.5, bias=0.3)}
    used = {lay: {k: np.zeros_like(v) for k, v in arrays.items()} for lay, arrays in
            net.items()} if network_parameters_zero else net
    b, g, d = SIR_RATES["beta"], SIR_RATES["gamma"], SIR_RATES["delta"]

    def rhs(t, x):
        s, i, r, q = x
        rate = float(mlp_forward(used, "silu", np.array([s, i, r]) / SIR_N)[0])
        infection = b * s * i / SIR_N
        return [-infection, infection - g * i - rate * i, g * i + d * q, rate * i - d * q]

    def observe(obs: str, x: np.ndarray) -> float:
        return float(math.log(abs(x[1] + x[3])) if obs == "obs_infected"
                     else math.log(abs(x[2])))

    return Example("dandekar_sir", BENCHMARK_LIKE / "dandekar_sir", {"net1": net},
                   lambda key: solve(rhs, list(SIR_X0.values()), SIR_TIMES), observe, 1.0,
                   "experimentId")


OLDER_DRAFT_EXAMPLES = (getting_started, how_to_dmms, how_to_neural_ode, how_to_observable)
BENCHMARK_EXAMPLES = (ko_pendulum, dandekar_sir)


def write_petab_v2_problem(folder: Path, sbml: str, tables: dict[str, str]) -> Path:
    """A plain PEtab v2 problem in ``folder``: the SBML text ``sbml`` as ``model.xml`` and
    the ``tables`` ``{kind: tsv text}`` (kinds ``parameters``, ``observables``,
    ``measurements``, optional ``conditions`` and ``experiments``) as ``{kind}.tsv``;
    returns its ``problem.yaml``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.xml").write_text(sbml)
    for kind, text in tables.items():
        (folder / f"{kind}.tsv").write_text(text)

    def files(kind: str) -> str:
        return f"[{kind}.tsv]" if kind in tables else "[]"

    (folder / "problem.yaml").write_text(
        "format_version: 2.0.0\nparameter_files: [parameters.tsv]\n"
        "model_files:\n  model_0:\n    language: sbml\n    location: model.xml\n"
        "measurement_files: [measurements.tsv]\nobservable_files: [observables.tsv]\n"
        f"condition_files: {files('conditions')}\n"
        f"experiment_files: {files('experiments')}\n")
    return folder / "problem.yaml"


def write_one_observable_problem(folder: Path, sbml: str, state: str, times: list[float],
                                 measured: list[float], sigma: float,
                                 parameters: dict[str, tuple[float, float, float]]
                                 ) -> Path:
    """A plain PEtab v2 problem in ``folder``: the SBML text ``sbml``, one observable
    ``obs`` of ``state`` with normal noise ``sigma``, its measurements at ``times``, and
    the estimated ``parameters`` ``{id: (lower, upper, nominal)}``; returns its
    ``problem.yaml``."""
    return write_petab_v2_problem(folder, sbml, {
        "observables": "observableId\tobservableFormula\tnoiseFormula\tnoiseDistribution\n"
                       f"obs\t{state}\t{sigma}\tnormal\n",
        "measurements": "observableId\ttime\tmeasurement\n"
                        + "".join(f"obs\t{t}\t{m}\n"
                                  for t, m in zip(times, measured, strict=True)),
        "parameters": "parameterId\tlowerBound\tupperBound\tnominalValue\testimate\n"
                      + "".join(f"{k}\t{lo}\t{hi}\t{v}\ttrue\n"
                                for k, (lo, hi, v) in parameters.items()),
    })

"""The hostile-input corpus (issues 14 and 16), generated at test time.

Every case builds its input under a fresh root folder from :func:`make_problem` (a small,
valid PEtab SciML problem written here, so the corpus depends on nothing else in the
repository), and says what must happen when a command runs on it: the exit status, the
issue code and the location that the output must name, and which paths may change.
``tests/security/test_hostile_inputs.py`` runs each command in a subprocess and
checks that, plus no traceback, CPU time within a ratio of a benign run, 500 MB peak
memory, and that nothing outside the allowed paths changed.

A case is a function ``build(root) -> [Run, ...]`` registered with :func:`case`.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

CLI = [sys.executable, "-m", "petab_sciml.cli"]
LOAD = [sys.executable, str(Path(__file__).with_name("hostile_load.py"))]


@dataclass
class Run:
    """One command on a hostile input and what it must do."""

    argv: list[str]
    exit: int
    expect: list[str] = field(default_factory=list)
    """Substrings of the output: the issue code and the location (file, row, entry)."""
    changes: list[str] = field(default_factory=list)
    """Paths (relative to the root) that may change; everything else must not."""
    check: Callable[[Path], None] | None = None
    """More assertions on the root after the run."""
    cpu_s: float | None = None
    """None: the CPU time (user + system) is held to ``CPU_RATIO`` times that of the same
    command on the valid problem (``tests/support/measure.py``).  A number (30 s or more:
    a ceiling against a blow-up, not a speed check): for commands without a benign twin
    (an evaluation, a fit)."""
    wall_s: float | None = None
    """Wall time after which the command counts as hung (None: ``HANG_SECONDS``)."""
    peak_mb: float = 500.0
    """Peak memory budget (with the CPU wheel of torch; see ``test_hostile_inputs``)."""


CASES: dict[str, tuple[str, Callable[[Path], list[Run]]]] = {}


def case(name: str, bullet: str):
    """Register ``build(root) -> [Run]`` as case ``name`` for the issue bullet quoted."""
    def register(fn):
        CASES[name] = (bullet, fn)
        return fn
    return register


# ----------------------------------------------------------------------- the base problem
SBML = """<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" level="3" version="2">
  <model id="lv">
    <listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="prey" compartment="c" initialConcentration="0.44"
        hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/>
      <species id="predator" compartment="c" initialConcentration="4.6"
        hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="alpha" value="1.3" constant="true"/>
      <parameter id="delta" value="1.8" constant="true"/>
      <parameter id="gamma" value="0.8" constant="true"/>
    </listOfParameters>
    <listOfReactions>
      <reaction id="growth" reversible="false">
        <listOfProducts><speciesReference species="prey" stoichiometry="1"
          constant="true"/></listOfProducts>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML"><apply><times/>
          <ci>alpha</ci><ci>prey</ci></apply></math></kineticLaw>
      </reaction>
      <reaction id="death" reversible="false">
        <listOfReactants><speciesReference species="predator" stoichiometry="1"
          constant="true"/></listOfReactants>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML"><apply><times/>
          <ci>delta</ci><ci>predator</ci></apply></math></kineticLaw>
      </reaction>
      <reaction id="predation" reversible="false">
        <listOfReactants><speciesReference species="prey" stoichiometry="1"
          constant="true"/></listOfReactants>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML"><apply><times/>
          <ci>gamma</ci><ci>prey</ci><ci>predator</ci></apply></math></kineticLaw>
      </reaction>
    </listOfReactions>
  </model>
</sbml>
"""

PROBLEM_YAML = """format_version: 2.0.0
model_files:
  lv:
    location: lv.xml
    language: sbml
measurement_files: [measurements.tsv]
observable_files: [observables.tsv]
experiment_files: [experiments.tsv]
parameter_files: [parameters.tsv]
mapping_files: [mapping.tsv]
extensions:
  sciml:
    version: 0.1.0
    array_files: [net1_ps.hdf5]
    hybridization_files: [hybridization.tsv]
    neural_networks:
      net1:
        location: net1.yaml
        format: YAML
        pre_initialization: false
"""

NETWORK_YAML = """nn_model_id: net1
inputs:
- input_id: input0
layers:
- layer_id: layer1
  layer_type: Linear
  args: {in_features: 2, out_features: 4, bias: true}
- layer_id: layer2
  layer_type: Linear
  args: {in_features: 4, out_features: 1, bias: true}
forward:
- {name: x, op: placeholder, target: x, args: [], kwargs: {}}
- {name: layer1, op: call_module, target: layer1, args: [x], kwargs: {}}
- {name: tanh, op: call_function, target: tanh, args: [layer1], kwargs: {}}
- {name: layer2, op: call_module, target: layer2, args: [tanh], kwargs: {}}
- {name: output, op: output, target: output, args: [layer2], kwargs: {}}
"""

TABLES = {
    "experiments.tsv": "experimentId\ttime\tconditionId\nexp1\t0.0\t\n",
    "hybridization.tsv": "targetId\ttargetValue\nnet1_prey\tprey\nnet1_predator\tpredator\n"
                         "gamma\tnet1_gamma\n",
    "mapping.tsv": "petabEntityId\tmodelEntityId\nnet1_prey\tnet1.inputs[0][0]\n"
                   "net1_predator\tnet1.inputs[0][1]\nnet1_gamma\tnet1.outputs[0][0]\n"
                   "net1_ps\tnet1.parameters\n",
    "observables.tsv": "observableId\tobservableFormula\tnoiseFormula\tobservableTransformation"
                       "\tnoiseDistribution\nprey_obs\tprey\t0.05\tlin\tnormal\n"
                       "predator_obs\tpredator\t0.05\tlin\tnormal\n",
    "measurements.tsv": "observableId\texperimentId\tmeasurement\ttime\n"
                        "prey_obs\texp1\t0.5\t1\nprey_obs\texp1\t0.9\t2\n"
                        "predator_obs\texp1\t3.1\t1\npredator_obs\texp1\t2.2\t2\n",
    "parameters.tsv": "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue"
                      "\testimate\nalpha\tlin\t0.0\t15.0\t1.1\ttrue\n"
                      "delta\tlin\t0.0\t15.0\t1.5\ttrue\n"
                      "net1_ps\tlin\t-inf\tinf\tarray\ttrue\n",
}


def network_parameters() -> dict:
    rng = np.random.default_rng(0)
    return {"layer1": {"weight": rng.normal(0, 0.3, (4, 2)), "bias": rng.normal(0, 0.3, 4)},
            "layer2": {"weight": rng.normal(0, 0.3, (1, 4)), "bias": np.zeros(1)}}


def make_problem(root: Path) -> Path:
    """The valid base problem in ``root/problem``; returns its YAML path."""
    from petab_sciml.arrays import write_array_file

    folder = root / "problem"
    folder.mkdir(parents=True)
    (folder / "problem.yaml").write_text(PROBLEM_YAML)
    (folder / "lv.xml").write_text(SBML)
    (folder / "net1.yaml").write_text(NETWORK_YAML)
    for name, text in TABLES.items():
        (folder / name).write_text(text)
    write_array_file(folder / "net1_ps.hdf5", parameters={"net1": network_parameters()})
    return folder / "problem.yaml"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (old, path)
    path.write_text(text.replace(old, new))


def both(problem: Path, expect: list[str], *, exit: int = 1, load_exit: int | None = None
         ) -> list[Run]:
    """``validate`` and ``load_problem`` on ``problem``: the same exit status (unless
    ``load_exit``) and the same code and location in the output (``valid`` becomes
    ``loaded`` for the loader)."""
    load_expect = ["loaded" if e == "valid" else e for e in expect]
    return [Run([*CLI, "validate", str(problem)], exit, expect),
            Run([*LOAD, str(problem)], exit if load_exit is None else load_exit, load_expect)]


# ----------------------------------------------------------------------- issue 14: writes
def _onnx(root: Path) -> Path:
    """net1 as ONNX (with weights), written by our exporter."""
    from petab_sciml.formats.onnx import write
    from petab_sciml.formats.yaml import read

    problem = make_problem(root)
    net = read(problem.parent / "net1.yaml")
    out = root / "net1.onnx"
    write(net, out, params=network_parameters())
    return out


def _inputs_file(path: Path) -> None:
    from petab_sciml.arrays import write_array_file

    write_array_file(path, inputs={"net1_prey": {"0": np.arange(3.0)}},
                     parameters={"other": {"l": {"w": np.ones(2)}}})


def _kept_inputs(root: Path) -> None:
    from petab_sciml.arrays import read_array_file

    data = read_array_file(root / "arrays.hdf5")
    assert list(data.inputs) == ["net1_prey"], "inputs/ was lost"
    assert np.array_equal(data.inputs["net1_prey"]["0"].read(), np.arange(3.0))
    assert set(data.parameters) == {"other", "net1"}
    assert data.parameters["net1"]["layer1"]["weight"].shape == (4, 2)


@case("convert_params_keep_inputs",
      "convert net.onnx net.yaml --params arrays.hdf5, where arrays.hdf5 also holds inputs/: "
      "the inputs are deleted")
def _(root):
    onnx = _onnx(root)
    _inputs_file(root / "arrays.hdf5")
    argv = [*CLI, "convert", str(onnx), str(root / "net.yaml"), "--params",
            str(root / "arrays.hdf5")]
    return [Run(argv, 2, ["arrays.hdf5", "exists", "--force"]),
            Run([*argv, "--force"], 0, ["wrote"], ["net.yaml", "arrays.hdf5"], _kept_inputs)]


@case("convert_onto_itself_yaml", "convert a.yaml a.yaml rewrites its own input")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    return [Run([*CLI, "convert", str(net), str(net), "--force"], 2, ["net1.yaml",
                                                                       "is the input"])]


@case("convert_onto_itself_onnx", "the same with .onnx (the network id changes as well)")
def _(root):
    onnx = _onnx(root)
    (root / "link.onnx").symlink_to(onnx)
    os.link(onnx, root / "hard.onnx")
    return [Run([*CLI, "convert", str(onnx), str(onnx), "--force"], 2, ["is the input"]),
            Run([*CLI, "convert", str(onnx), str(root / "link.onnx"), "--force"], 2,
                ["link.onnx", "is the input"]),
            Run([*CLI, "convert", str(onnx), str(root / "hard.onnx"), "--force"], 2,
                ["hard.onnx", "is the input"])]


@case("convert_existing_output", "an existing output is overwritten without a word")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    (root / "out.yaml").write_text("precious: true\n")

    def replaced(root: Path) -> None:
        assert "nn_model_id: net1" in (root / "out.yaml").read_text()

    argv = [*CLI, "convert", str(net), str(root / "out.yaml")]
    return [Run(argv, 2, ["out.yaml", "exists", "--force"]),
            Run([*argv, "--force"], 0, ["wrote"], ["out.yaml"], replaced)]


@case("convert_planted_symlink",
      "the temporary file next to the output has a predictable name and follows symlinks")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    (root / "victim.txt").write_text("do not touch\n")
    for name in (".out.yaml.tmp", ".out.onnx.tmp", ".out.hdf5.tmp"):
        (root / name).symlink_to(root / "victim.txt")
    (root / "link.yaml").symlink_to(root / "victim.txt")

    def clean(root: Path) -> None:
        leftovers = [p.name for p in root.iterdir() if p.name.endswith(".tmp")
                     and not p.is_symlink()]
        assert not leftovers, leftovers

    return [Run([*CLI, "convert", str(net), str(root / "out.yaml")], 0, ["wrote"],
                ["out.yaml"], clean),
            Run([*CLI, "convert", str(net), str(root / "out.onnx"), "--params-in",
                 str(root / "problem" / "net1_ps.hdf5")], 0, ["wrote"], ["out.onnx"], clean),
            Run([*CLI, "convert", str(net), str(root / "link.yaml"), "--force"], 2,
                ["link.yaml", "symbolic link"])]


@case("convert_to_special_file",
      "converting to a device path replaces the device node with a regular file")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    os.mkfifo(root / "fifo.yaml")

    def still_fifo(root: Path) -> None:
        import stat

        assert stat.S_ISFIFO(os.lstat(root / "fifo.yaml").st_mode)

    return [Run([*CLI, "convert", str(net), str(root / "fifo.yaml"), "--force"], 2,
                ["fifo.yaml", "FIFO"], check=still_fifo),
            Run([*CLI, "convert", str(root / "fifo.yaml"), str(root / "o.onnx")], 1,
                ["fifo.yaml", "FIFO"], check=still_fifo),
            Run([*CLI, "convert", str(net), "/dev/null", "--to", "yaml", "--force"], 2,
                ["/dev/null", "character device"])]


# ----------------------------------------------------------------------- issue 14: budgets
BOMB = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n"
    for i in range(9))


@case("yaml_bomb_problem", "YAML alias bombs in problem.yaml")
def _(root):
    problem = make_problem(root)
    problem.write_text(problem.read_text() + "bomb:\n" + "".join(
        "  " + line + "\n" for line in BOMB.splitlines()))
    line = PROBLEM_YAML.count("\n") + 1 + 6   # the line of "f:", whose alias crosses
    return both(problem, ["LIMIT_YAML_ALIASES", f"problem.yaml, line {line},"])


@case("yaml_bomb_network", "YAML alias bombs in a network YAML")
def _(root):
    problem = make_problem(root)
    net = problem.parent / "net1.yaml"
    net.write_text(BOMB + net.read_text())
    return both(problem, ["LIMIT_YAML_ALIASES", "net1.yaml, line 6,"])


@case("yaml_deep_nesting", "YAML nesting (a budget like the alias bomb)")
def _(root):
    problem = make_problem(root)
    net = problem.parent / "net1.yaml"
    net.write_text(net.read_text() + "free_parameters: " + "[" * 500 + "]" * 500 + "\n")
    line = NETWORK_YAML.count("\n") + 1
    # the mapping holds the lists: the 100th "[" (column 17 + 100) is level 101
    return both(problem, ["LIMIT_YAML_DEPTH", f"net1.yaml, line {line}, column 117"])


def _huge_layer(root: Path, size: int) -> Path:
    problem = make_problem(root)
    edit(problem.parent / "net1.yaml", "{in_features: 2, out_features: 4, bias: true}",
         f"{{in_features: {size}, out_features: {size}, bias: true}}")
    return problem


@case("huge_layer_1e6", "a 1 KB network YAML declaring a 10^6 x 10^6 Linear")
def _(root):
    return both(_huge_layer(root, 10**6), ["LIMIT_ELEMENTS", "net1.yaml", "layer 'layer1'"])


@case("huge_layer_20000", "a 20000 x 20000 layer takes 20 s and 6.5 GB just to validate")
def _(root):
    problem = _huge_layer(root, 20000)
    return both(problem, ["LIMIT_ELEMENTS", "net1.yaml", "layer 'layer1'"]) + [
        Run([*CLI, "validate", str(problem), "--limit", "max_elements=1e9"], 1,
            ["ARRAY_PARAMETERS_MISMATCH", "net1_ps.hdf5"])]


def _huge_input(root: Path, shape: tuple[int, ...]) -> Path:
    problem = make_problem(root)
    with h5py.File(problem.parent / "net1_ps.hdf5", "a") as h5:
        h5.create_dataset("inputs/net1_prey/0", shape=shape, dtype="f8",
                          chunks=(1,) * (len(shape) - 2) + (64, 64))
    return problem


@case("hdf5_shape_1e6", "a 7 KB HDF5 input declaring shape (3, 1e6, 1e6) is called valid")
def _(root):
    return both(_huge_input(root, (3, 10**6, 10**6)),
                ["LIMIT_ARRAY_SHAPE", "net1_ps.hdf5", "inputs/net1_prey/0"])


@case("hdf5_shape_20000", "at (3, 20000, 20000) load_problem grows past 18 GB")
def _(root):
    return both(_huge_input(root, (3, 20000, 20000)),
                ["LIMIT_ARRAY_SHAPE", "net1_ps.hdf5", "inputs/net1_prey/0"])


@case("hdf5_200k_groups", "200k groups in an array file: 248 s and 200k warnings")
def _(root):
    problem = make_problem(root)
    with h5py.File(problem.parent / "net1_ps.hdf5", "a") as h5:
        group = h5.create_group("inputs")
        first = group.create_group("x0")
        first.create_dataset("0", data=[1.0])
        for i in range(1, 200_000):   # hard links: each is an entry, and fast to make
            group.id.links.create_hard(f"x{i}".encode(), first.id, b".")
    return both(problem, ["LIMIT_ARRAY_ENTRIES", "net1_ps.hdf5", "inputs"])


def _formula(root: Path, table: str, old: str, new: str) -> Path:
    problem = make_problem(root)
    edit(problem.parent / table, old, new)
    return problem


@case("expression_deep_unary", "500 or more nested unary minus signs raise RecursionError")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t", "prey_obs\t"
                       + "-" * 500 + "prey\t")
    return both(problem, ["LIMIT_EXPRESSION_DEPTH", "observables.tsv", "row 2",
                          "observableFormula"])


@case("expression_deep_noise", "... in noise formulas")
def _(root):
    deep = "(1+" * 300 + "prey" + ")" * 300
    problem = _formula(root, "observables.tsv", "prey\t0.05", f"prey\t{deep}")
    return both(problem, ["LIMIT_EXPRESSION_DEPTH", "observables.tsv", "row 2",
                          "noiseFormula"])


@case("expression_deep_hybridization", "... or hybridization formulas")
def _(root):
    deep = "exp(" * 500 + "prey" + ")" * 500
    problem = _formula(root, "hybridization.tsv", "net1_prey\tprey", f"net1_prey\t{deep}")
    return both(problem, ["LIMIT_EXPRESSION_DEPTH", "hybridization.tsv", "row 2",
                          "targetValue"])


@case("expression_deep_parentheses", "500 nested parentheses: handled (no budget needed)")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t",
                       "prey_obs\t" + "(" * 500 + "prey" + ")" * 500 + "\t")
    return both(problem, ["valid"], exit=0, load_exit=0)


@case("expression_long", "an expression over the size budget")
def _(root):
    long = "+".join(["prey"] * 30_000)
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t", f"prey_obs\t{long}\t")
    return both(problem, ["LIMIT_EXPRESSION_SIZE", "observables.tsv", "row 2"])


@case("expression_power_tower", "2^2^2^2^2^2 and 9^9^9 hang at load")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t",
                       "prey_obs\tprey + 2^2^2^2^2^2 - 9^9^9\t")
    return both(problem, ["valid"], exit=0, load_exit=0)


@case("expression_huge_literal", "a 5000-digit literal raises a traceback")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t",
                       f"prey_obs\tprey * {'7' * 5000}\t")
    return both(problem, ["valid"], exit=0, load_exit=0)


@case("expression_1e999999", "1e999999 takes 100 s inside the libpetab second-opinion lint")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t",
                       "prey_obs\tprey * 1e999999\t")
    # the opt-in second opinion is not given the formula (libpetab's sympy takes 100 s)
    return both(problem, ["valid"], exit=0, load_exit=0) + [
        Run([*CLI, "validate", str(problem), "--libpetab"], 0,
            ["LIBPETAB", "not run", "observables.tsv", "valid"])]


@case("layer_size_negative", "negative layer sizes give INTERNAL_ERROR")
def _(root):
    return both(_huge_layer(root, -5), ["NN_FILE_INVALID", "net1.yaml", "layer 'layer1'",
                                        "non-negative"])


@case("layer_size_1e30", "1e30 layer sizes give INTERNAL_ERROR")
def _(root):
    return both(_huge_layer(root, 10**30), ["LIMIT_ELEMENTS", "net1.yaml", "layer 'layer1'"]) \
        + both(_huge_layer(root / "float", "1.0e+30"), ["NN_FILE_INVALID", "net1.yaml",
                                                        "must be an integer"])


@case("measurement_nan_time", "a NaN time in the measurement table passes validate")
def _(root):
    problem = _formula(root, "measurements.tsv", "prey_obs\texp1\t0.9\t2",
                       "prey_obs\texp1\t0.9\tnan")
    return both(problem, ["MEASUREMENT_VALUE_INVALID", "measurements.tsv", "row 3",
                          "column time"])


# ----------------------------------------------------------------------- issue 16
def _with_external(root: Path, kind: str) -> Path:
    problem = make_problem(root)
    secret = root / "outside" / "secret.h5"
    secret.parent.mkdir()
    with h5py.File(secret, "w") as h5:
        h5["x"] = np.arange(3.0)
    (root / "outside" / "raw.bin").write_bytes(np.arange(3.0).tobytes())
    with h5py.File(problem.parent / "net1_ps.hdf5", "a") as h5:
        if kind == "raw":
            h5.create_dataset("inputs/net1_prey/0", shape=(3,), dtype="<f8",
                              external=[(str(root / "outside" / "raw.bin"), 0, 24)])
        elif kind == "link_absolute":
            h5["inputs/net1_prey/0"] = h5py.ExternalLink(str(secret), "/x")
        elif kind == "link_relative":
            h5["inputs/net1_prey/0"] = h5py.ExternalLink("../outside/secret.h5", "/x")
        elif kind == "soft_to_external":
            h5["evil"] = h5py.ExternalLink(str(secret), "/x")
            h5["inputs/net1_prey/0"] = h5py.SoftLink("/evil")
        else:
            layout = h5py.VirtualLayout(shape=(3,), dtype="f8")
            layout[:] = h5py.VirtualSource(str(secret), "x", shape=(3,))
            h5.create_group("inputs/net1_prey").create_virtual_dataset("0", layout)
    return problem


for _kind, _bullet in (("raw", "an array file with external raw storage"),
                       ("link_absolute", "an external link (absolute)"),
                       ("link_relative", "an external link ../../x.h5"),
                       ("soft_to_external", "a soft link through an external link"),
                       ("virtual", "a virtual dataset")):
    def _build(root, kind=_kind):
        return both(_with_external(root, kind), ["ARRAY_EXTERNAL_DATA", "net1_ps.hdf5"])
    case(f"hdf5_external_{_kind}", f"HDF5 reaches outside the problem: {_bullet}")(_build)


@case("convert_params_external", "convert put the first bytes of /etc/passwd into ONNX")
def _(root):
    problem = _with_external(root, "link_absolute")
    with h5py.File(problem.parent / "net1_ps.hdf5", "a") as h5:
        del h5["parameters/net1/layer2/bias"]
        h5["parameters/net1/layer2/bias"] = h5py.ExternalLink(str(root / "outside/secret.h5"),
                                                              "/x")
    return [Run([*CLI, "convert", str(problem.parent / "net1.yaml"), str(root / "o.onnx"),
                 "--params-in", str(problem.parent / "net1_ps.hdf5")], 1,
                ["net1_ps.hdf5", "external link"])]


@case("nnef_output_unrelated_files",
      "convert x.yaml DIR --to nnef deletes every *.dat in a folder with a graph.nnef")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    model = root / "model"
    model.mkdir()
    (model / "graph.nnef").write_text("version 1.0;\ngraph g( x ) -> ( x ) {}\n")
    (model / "notes.dat").write_text("my notes\n")
    (model / "README.md").write_text("mine\n")
    return [Run([*CLI, "convert", str(net), str(model), "--to", "nnef", "--params-in",
                 str(root / "problem" / "net1_ps.hdf5"), "--force"], 1,
                ["model", "not part of its NNEF model", "notes.dat"])]


@case("nnef_output_replaces_model", "writing over an NNEF model folder we wrote (with --force)")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    params = str(root / "problem" / "net1_ps.hdf5")
    argv = [*CLI, "convert", str(net), str(root / "model"), "--to", "nnef", "--params-in",
            params]

    def replaced(root: Path) -> None:
        assert (root / "model" / "graph.nnef").is_file()
        assert not [p for p in root.iterdir() if p.name.startswith(".model.")]

    return [Run(argv, 0, ["wrote"], ["model"]), Run(argv, 2, ["model", "exists"]),
            Run([*argv, "--force"], 0, ["wrote"], ["model"], replaced)]


def _special(root: Path, which: str, what: str) -> Path:
    problem = make_problem(root)
    target = {"table": problem.parent / "measurements.tsv",
              "network": problem.parent / "net1.yaml",
              "model": problem.parent / "lv.xml",
              "problem": problem}[which]
    target.unlink()
    if what == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    return problem


for _which in ("problem", "table", "network", "model"):
    for _what in ("dev_zero", "fifo"):
        def _build(root, which=_which, what=_what):
            problem = _special(root, which, what)
            name = {"problem": "problem.yaml", "table": "measurements.tsv",
                    "network": "net1.yaml", "model": "lv.xml"}[which]
            kind = "FIFO" if what == "fifo" else "character device"
            return both(problem, ["FILE_NOT_REGULAR", name, kind])
        case(f"special_{_which}_{_what}",
             f"/dev/zero or a FIFO as {_which} grows to 23 GB or hangs")(_build)


def _onnx_problem(root: Path, graph_nodes: list, name: str) -> Path:
    import onnx
    from onnx import TensorProto, helper

    problem = make_problem(root)
    graph = helper.make_graph(graph_nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(problem.parent / name))
    edit(problem, "location: net1.yaml\n        format: YAML",
         f"location: {name}\n        format: onnx")
    return problem


def _const(name: str, value) -> object:
    from onnx import helper, numpy_helper

    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))


@case("onnx_range_bomb", "a 367-byte Range graph grows past 18 GB during constant folding")
def _(root):
    from onnx import TensorProto, helper

    nodes = [_const("s", np.array(0, np.int64)), _const("l", np.array(3 * 10**9, np.int64)),
             _const("d", np.array(1, np.int64)), helper.make_node("Range", ["s", "l", "d"],
                                                                  ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "rf"], ["y"])]
    problem = _onnx_problem(root, nodes, "bomb.onnx")
    assert (problem.parent / "bomb.onnx").stat().st_size < 400
    return both(problem, ["LIMIT_CONSTANT_FOLDING", "bomb.onnx", "Range"]) + [
        Run([*CLI, "convert", str(problem.parent / "bomb.onnx"), str(root / "o.yaml")], 1,
            ["max_folded_elements", "bomb.onnx"])]


@case("onnx_constant_of_shape", "ConstantOfShape [30000,30000] takes 3.5 GB in validate")
def _(root):
    from onnx import helper

    nodes = [_const("sh", np.array([30000, 30000], np.int64)),
             helper.make_node("ConstantOfShape", ["sh"], ["c"]),
             helper.make_node("Add", ["x", "c"], ["y"])]
    return both(_onnx_problem(root, nodes, "bomb.onnx"),
                ["LIMIT_CONSTANT_FOLDING", "bomb.onnx", "ConstantOfShape"])


@case("onnx_external_data", "ONNX external data outside the problem folder is not read")
def _(root):
    import onnx
    from onnx import TensorProto, helper

    problem = make_problem(root)
    (root / "outside").mkdir()
    (root / "outside" / "w.bin").write_bytes(np.arange(2, dtype=np.float32).tobytes())
    weight = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2],
                              data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "../../outside/w.bin"), ("offset", "0"),
                       ("length", "8")):
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (problem.parent / "ext.onnx").write_bytes(model.SerializeToString())
    edit(problem, "location: net1.yaml\n        format: YAML",
         "location: ext.onnx\n        format: onnx")
    return both(problem, ["NN_FILE_INVALID", "ext.onnx", "points outside"])


def _tgz(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    path.write_bytes(gzip.compress(raw.getvalue()))


@case("nnef_tgz_huge_member", "a 3 GB member in a 14 MB NNEF .tgz is extracted in full")
def _(root):
    problem = make_problem(root)
    graph = tarfile.TarInfo("model/graph.nnef")
    text = b"version 1.0;\ngraph g( x ) -> ( x ) {}\n"
    graph.size = len(text)
    big = tarfile.TarInfo("model/w.dat")
    big.size = 3 * 2**30    # the header's size; the data is cut short
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.addfile(graph, io.BytesIO(text))
        raw.write(tar.tarinfo.tobuf(big, tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
        raw.write(b"\0" * 4096)
    (problem.parent / "net1.tgz").write_bytes(gzip.compress(raw.getvalue()))
    edit(problem, "location: net1.yaml\n        format: YAML",
         "location: net1.tgz\n        format: nnef")
    return both(problem, ["LIMIT_ARCHIVE_MEMBER", "net1.tgz", "model/w.dat"])


@case("nnef_tgz_link_member", "archive members that are links or devices")
def _(root):
    problem = make_problem(root)
    link = tarfile.TarInfo("model/graph.nnef")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    _tgz(problem.parent / "net1.tgz", [(link, b"")])
    edit(problem, "location: net1.yaml\n        format: YAML",
         "location: net1.tgz\n        format: nnef")
    return both(problem, ["LIMIT_ARCHIVE_MEMBER", "net1.tgz", "a link to '/etc/passwd'"])


@case("table_duplicate_column", "a duplicate column in a table is accepted, the last one wins")
def _(root):
    problem = _formula(root, "measurements.tsv", "measurement\ttime\n",
                       "measurement\ttime\tmeasurement\n")
    edit(problem.parent / "measurements.tsv", "0.5\t1\n", "0.5\t1\t50000\n")
    return both(problem, ["TABLE_DUPLICATE_COLUMN", "measurements.tsv", "row 1",
                          "column measurement"])


@case("table_row_too_long", "rows longer than the header")
def _(root):
    problem = _formula(root, "measurements.tsv", "0.9\t2\n", "0.9\t2\textra\tcells\n")
    return both(problem, ["TABLE_ROW_TOO_LONG", "measurements.tsv", "row 3"])


@case("observable_empty", "an empty observableFormula")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t", "prey_obs\t\t")
    return both(problem, ["EXPRESSION_INVALID", "observables.tsv", "row 2",
                          "observableFormula"])


@case("sbml_duplicate_ids", "duplicate SBML ids")
def _(root):
    problem = _formula(root, "lv.xml", '<parameter id="gamma"', '<parameter id="alpha"')
    return both(problem, ["MODEL_DUPLICATE_ID", "lv.xml", "'alpha'"])


@case("paths_outside_problem", "table or model paths that leave the problem folder: warn")
def _(root):
    problem = make_problem(root)
    (root / "shared").mkdir()
    os.replace(problem.parent / "lv.xml", root / "shared" / "lv.xml")
    edit(problem, "location: lv.xml", "location: ../shared/lv.xml")
    return both(problem, ["FILE_OUTSIDE_PROBLEM", "model_files.lv.location"], exit=0,
                load_exit=0)


@case("convert_output_folder_missing", "an output folder that doesn't exist")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    return [Run([*CLI, "convert", str(net), str(root / "nowhere" / "x.onnx")], 2,
                ["nowhere", "does not exist"])]


@case("convert_output_is_folder", "an output that is a folder")
def _(root):
    net = make_problem(root).parent / "net1.yaml"
    (root / "dir.onnx").mkdir()
    return [Run([*CLI, "convert", str(net), str(root / "dir.onnx"), "--force"], 2,
                ["dir.onnx", "is a folder"])]


@case("convert_truncated_tgz", "a truncated .tgz input gives a raw traceback or Aborted!")
def _(root):
    problem = make_problem(root)
    out = root / "model.tgz"
    from petab_sciml.convert import convert

    convert(problem.parent / "net1.yaml", out, params_in=problem.parent / "net1_ps.hdf5")
    data = out.read_bytes()
    (root / "cut.tgz").write_bytes(data[: len(data) // 2])
    return [Run([*CLI, "convert", str(root / "cut.tgz"), str(root / "o.yaml")], 1,
                ["cut.tgz", "not a readable archive"])]


# ----------------------------------------------------------------------- issue 31: faults
EVALUATE = [sys.executable, str(Path(__file__).with_name("hostile_evaluate.py"))]
SOLVE_FAILED = ("ok=False value=inf reason=an ODE solve failed (more than max_steps steps, "
                "a collapsed step size or a non-finite state)")
EVALUATION_BUDGET = dict(cpu_s=30.0, wall_s=120.0, peak_mb=1000.0)
"""One evaluation: importing a backend, loading, compiling (JAX) and solving."""


@case("noise_formula_zero", "a noiseFormula 0 gives value = nan with ok = True")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t0.05", "prey_obs\tprey\t0")
    return both(problem, ["NOISE_VALUE_INVALID", "observables.tsv", "row 2",
                          "column noiseFormula"])


@case("noise_formula_negative", "a noiseFormula -0.1 gives value = nan with ok = True")
def _(root):
    problem = _formula(root, "observables.tsv", "predator_obs\tpredator\t0.05",
                       "predator_obs\tpredator\t-0.1")
    return both(problem, ["NOISE_VALUE_INVALID", "observables.tsv", "row 3",
                          "column noiseFormula"])


@case("noise_parameters_negative",
      "a numeric noiseParameters entry <= 0 (the whole noise formula) passes validate")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t0.05",
                       "prey_obs\tprey\tnoiseParameter1_prey_obs")
    table = problem.parent / "measurements.tsv"
    lines = table.read_text().splitlines()
    lines = [lines[0] + "\tnoiseParameters", lines[1] + "\t0.1", lines[2] + "\t-0.2",
             *(line + "\t" for line in lines[3:])]
    table.write_text("\n".join(lines) + "\n")
    return both(problem, ["NOISE_VALUE_INVALID", "measurements.tsv", "row 3",
                          "column noiseParameters"])


@case("log_normal_measurement_zero",
      "a log-normal observable with a zero or negative measurement gives NaN")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t0.05\tlin\tnormal",
                       "prey_obs\tprey\t0.05\tlin\tlog-normal")
    edit(problem.parent / "measurements.tsv", "prey_obs\texp1\t0.9\t2", "prey_obs\texp1\t0\t2")
    return both(problem, ["MEASUREMENT_VALUE_INVALID", "measurements.tsv", "row 3",
                          "column measurement"])


@case("log10_laplace_measurement_negative", "... and on the log10 scale (Laplace)")
def _(root):
    problem = _formula(root, "observables.tsv", "prey_obs\tprey\t0.05\tlin\tnormal",
                       "prey_obs\tprey\t0.05\tlog10\tlaplace")
    edit(problem.parent / "measurements.tsv", "prey_obs\texp1\t0.5\t1",
         "prey_obs\texp1\t-0.5\t1")
    return both(problem, ["MEASUREMENT_VALUE_INVALID", "measurements.tsv", "row 2",
                          "column measurement"])


@case("noise_parameter_negative_at_run_time",
      "a noise formula of parameters that is <= 0: ok = False with the reason, both backends")
def _(root):
    from tests.support.hostile_solves import runtime_noise_problem

    problem = runtime_noise_problem(root, "-0.1")
    expect = ["ok=False value=inf reason=noise standard deviation <= 0", "rows 1, 2;"]
    return [Run([*CLI, "validate", str(problem)], 0, ["valid"]),
            *(Run([*EVALUATE, str(problem), backend], 1, expect, **EVALUATION_BUDGET)
              for backend in ("jax", "torch"))]


EXPLICIT = {"jax": "solver=dopri8", "torch": "method=dopri8"}
"""The explicit solver chosen: the defaults would retry a failed solve implicitly."""


def _failing_solve(problem: Path) -> list[Run]:
    """Both backends' explicit solvers on ``problem`` with the same step budget: both
    fail alike."""
    return [Run([*EVALUATE, str(problem), backend, "max_steps=3000", EXPLICIT[backend]], 1,
                [SOLVE_FAILED], **EVALUATION_BUDGET) for backend in ("jax", "torch")]


@case("solve_stiff", "a stiff problem: JAX stops at max_steps, PyTorch ran past 300 s")
def _(root):
    from tests.support.hostile_solves import stiff_problem

    problem = stiff_problem(root)
    # the defaults: the explicit solve fails within the budget, the implicit one solves
    handled = [Run([*EVALUATE, str(problem), backend, "max_steps=3000"], 0,
                   ["ok=True", "succeeded with the implicit kvaerno5"], **EVALUATION_BUDGET)
               for backend in ("jax", "torch")]
    return [*_failing_solve(problem), *handled]


@case("solve_time_1e9", "a measurement time of 1e9: the same")
def _(root):
    from tests.support.hostile_solves import long_horizon_problem

    return _failing_solve(long_horizon_problem(root))


def _checkpoint_written(root: Path) -> None:
    assert (root / "fit" / "checkpoints" / "start_0000.pt").is_file()


@case("fit_sigterm", "SIGTERM during fit (timeout -s TERM) dies without a checkpoint")
def _(root):
    problem = make_problem(root)
    fit = [*CLI, "fit", str(problem), "--backend", "torch", "--starts", "1", "--steps",
           "1000000", "--checkpoint-every", "1000000", "--out", str(root / "fit"),
           "--no-plots"]
    return [Run(["timeout", "--preserve-status", "-s", "TERM", "20", *fit], 143,
                ["stopped by SIGTERM", "--resume"], changes=["fit"],
                check=_checkpoint_written, cpu_s=40.0, wall_s=90.0, peak_mb=1000.0)]

"""Runner for network test cases in the official ML-import layout.

A case folder holds ``solutions.yaml`` naming ``net_file``, the inputs (``net_input`` or
``net_input_arg0``, ``net_input_arg1`` ...), optional ``net_ps`` and ``net_output``
lists, and optionally ``dropout`` (number of training-mode passes whose mean is compared)
and our own keys ``tol`` (absolute tolerance) and ``mode`` (``train`` or ``eval``).  A
case's ``mode`` wins; cases without one run in the mode the runner is given (``train`` by
default, as in the official suite; ``petab-sciml test-cases run --mode eval``).

The runner is backend-agnostic: it talks to backends only through
:class:`petab_sciml.backend_api.Backend`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from petab_sciml.arrays import load_parameters, read_array_file
from petab_sciml.errors import PetabSciMLError
from petab_sciml.network import Network
from petab_sciml.plugins import get_backend, get_format

SUITE_ENV = "PETAB_SCIML_TESTSUITE"
MODES = ("train", "eval")
"""Modes a network case runs in (PyTorch's ``model.train()`` / ``model.eval()``)."""
SUITE_TOLERANCE = 1e-3
"""Absolute tolerance of the official suite's ML-import cases."""
DROPOUT_TOLERANCE = 1e-2
ALPHA_DROPOUT_TOLERANCE = 2e-2
DROPOUT_PASS_FACTOR = 4
REPO_ROOT = Path(__file__).resolve().parents[1]


def suite_problem(case: str) -> Path:
    """``problem.yaml`` of the official suite's SciML problem-import case ``case``
    (``"001"``) in :func:`default_suite`; raises :class:`FileNotFoundError` naming
    ``PETAB_SCIML_TESTSUITE`` when no suite is found."""
    suite = default_suite()
    if suite is None:
        raise FileNotFoundError(f"official PEtab SciML suite not found: set {SUITE_ENV}")
    return suite / "test_cases" / "sciml_problem_import" / case / "petab" / "problem.yaml"


def default_suite() -> Path | None:
    """The official suite: ``$PETAB_SCIML_TESTSUITE``, else ``../shared/petab_sciml_testsuite``
    beside the repository or the working directory, if present."""
    env = os.environ.get(SUITE_ENV)
    if env:
        return Path(env)
    for base in (REPO_ROOT, Path.cwd()):
        candidate = base.parent / "shared" / "petab_sciml_testsuite"
        if candidate.is_dir():
            return candidate
    return None


def bundled_cases() -> Path:
    """Our own reference cases (``test_cases/`` of the repository)."""
    return REPO_ROOT / "test_cases"


@dataclass
class NetworkCase:
    """One ML-import case, parsed from its ``solutions.yaml``."""

    path: Path
    net_file: Path
    inputs: list[list[Path]]
    """Per repetition i, one file per network input."""
    params: list[Path | None]
    outputs: list[Path]
    dropout: int | None = None
    tol: float | None = None
    mode: str = "train"
    mode_given: bool = False
    """Whether solutions.yaml names the mode (else ``mode`` is the default, train)."""

    def mode_or(self, default: str) -> str:
        """The mode this case runs in: its own, else ``default``."""
        return self.mode if self.mode_given else default

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"


def _files(case: Path, solutions: dict, key: str) -> list[Path]:
    value = solutions[key]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise PetabSciMLError(f"{key} must be a list of file names", file=case /
                              "solutions.yaml", entry=key)
    return [case / v for v in value]


def load_case(path: str | os.PathLike) -> NetworkCase:
    """Parse a case folder; errors name ``solutions.yaml`` and the key."""
    case = Path(path)
    sol_file = case / "solutions.yaml"
    solutions = _read_solutions(sol_file) or {}
    if "net_file" not in solutions:
        raise PetabSciMLError("missing key net_file (not an ML-import case)", file=sol_file)
    outputs = _files(case, solutions, "net_output")
    if "net_input" in solutions:
        inputs = [[f] for f in _files(case, solutions, "net_input")]
    else:
        arg_keys = sorted((k for k in solutions if re.fullmatch(r"net_input_arg\d+", k)),
                          key=lambda k: int(k[len("net_input_arg"):]))
        if not arg_keys:
            raise PetabSciMLError("missing key net_input (or net_input_arg0, ...)",
                                  file=sol_file)
        per_arg = [_files(case, solutions, k) for k in arg_keys]
        inputs = [list(files) for files in zip(*per_arg)]
    params: list[Path | None] = (
        list(_files(case, solutions, "net_ps")) if "net_ps" in solutions
        else [None] * len(outputs)
    )
    if not (len(inputs) == len(params) == len(outputs)):
        raise PetabSciMLError(f"net_input, net_ps and net_output list {len(inputs)}, "
                              f"{len(params)} and {len(outputs)} files; expected equal counts",
                              file=sol_file)
    mode = solutions.get("mode", "train")
    if mode not in MODES:
        raise PetabSciMLError(f"mode must be train or eval, got {mode!r}", file=sol_file,
                              entry="mode")
    return NetworkCase(case, case / solutions["net_file"], inputs, params, outputs,
                       solutions.get("dropout"), solutions.get("tol"), mode,
                       "mode" in solutions)


def _discover(paths: Iterable[str | os.PathLike], is_case: Callable[[Path], bool]
              ) -> list[Path]:
    """Folders under ``paths`` (a case folder itself, or any folder above cases) whose
    ``solutions.yaml`` satisfies ``is_case``."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise PetabSciMLError("no such file or folder", file=p)
        if (p / "solutions.yaml").is_file():
            if is_case(p):
                found.append(p)
            continue
        found.extend(sol.parent for sol in sorted(p.rglob("solutions.yaml"))
                     if is_case(sol.parent))
    return found


def discover(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Network (ML-import) case folders under ``paths``."""
    return _discover(paths, _is_network_case)


def _read_solutions(path: Path) -> Any:
    """A case's ``solutions.yaml``, read within the YAML budgets (a suite folder may
    come from someone else)."""
    from petab_sciml.safe_read import load_yaml, read_text

    try:
        return load_yaml(read_text(path, what="a test case's solutions (YAML)",
                                   limit="max_yaml_bytes"), file=path)
    except yaml.YAMLError as exc:
        raise PetabSciMLError(f"cannot read solutions: {exc}", file=path) from None
    except PetabSciMLError as exc:
        raise PetabSciMLError(f"cannot read solutions: {exc.message}", file=path,
                              entry=exc.entry) from None


def _is_network_case(folder: Path) -> bool:
    try:
        data = _read_solutions(folder / "solutions.yaml")
    except PetabSciMLError:
        return True  # let load_case report it
    return isinstance(data, dict) and "net_file" in data


def _read_single(path: Path, group: str) -> list[np.ndarray]:
    """All arrays of ``inputs``/``outputs`` in a reference file, by id in natural order."""
    content = read_array_file(path)
    entries = getattr(content, group)
    out = []
    for array_id in sorted(entries, key=_natural_key):
        keys = entries[array_id]
        if len(keys) != 1:
            raise PetabSciMLError(f"expected one dataset under {group}/{array_id}, found "
                                  f"{', '.join(keys)}", file=path)
        out.append(np.asarray(next(iter(keys.values()))))
    return out


def _natural_key(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


@dataclass
class CaseResult:
    """Outcome of one case on one backend."""

    case: str
    backend: str
    layers: str
    max_abs_error: float | None
    tolerance: float
    passed: bool
    error: str | None = None
    seconds: float = 0.0
    cross: dict[str, Any] = field(default_factory=dict)
    gradient_norm: float | None = None
    """Norm of this backend's vector-Jacobian products in the cross-backend check."""
    fd_rel_error: float | None = None
    """float64 runs: this backend's vector-Jacobian product against central finite
    differences (:func:`finite_difference_error`)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _layer_summary(network: Network) -> str:
    types = [layer.type for layer in network.layers.values()]
    functions = sorted({n.function for n in network.nodes if n.function})
    return ", ".join(dict.fromkeys(types + functions)) or "-"


def tolerance_of(case: NetworkCase, network: Network) -> float:
    if case.tol is not None:
        return float(case.tol)
    if case.dropout:
        if any(layer.type == "AlphaDropout" for layer in network.layers.values()):
            return ALPHA_DROPOUT_TOLERANCE
        return DROPOUT_TOLERANCE
    return SUITE_TOLERANCE


def _inputs_of(case: NetworkCase, i: int) -> list[np.ndarray]:
    arrays: list[np.ndarray] = []
    for f in case.inputs[i]:
        arrays.extend(_read_single(f, "inputs"))
    return arrays


def run_case(case: NetworkCase, backend_name: str, *, dtype: str = "float32",
             mode: str = "train") -> CaseResult:
    """Run every repetition of ``case`` on one backend and compare with the references,
    in the case's own mode, else in ``mode``."""
    start = time.perf_counter()
    layers, tol = "?", SUITE_TOLERANCE
    train = case.mode_or(mode) == "train"
    try:
        backend = get_backend(backend_name)
        network = get_format("yaml").read(case.net_file)
        layers, tol = _layer_summary(network), tolerance_of(case, network)
        model = backend.build(network, dtype=dtype)
        worst = 0.0
        for i in range(len(case.outputs)):
            if case.params[i] is not None:
                model = backend.set_parameters(model, load_parameters(case.params[i], network))
            inputs = _inputs_of(case, i)
            expected = _read_single(case.outputs[i], "outputs")
            if case.dropout and train:
                # The reference is itself a mean over ``dropout`` passes; averaging over
                # more passes here keeps our own sampling noise well below the reference's,
                # so the tolerance mostly has to cover the reference's noise.
                passes = DROPOUT_PASS_FACTOR * int(case.dropout)
                got = backend.mean_forward(model, inputs, passes=passes, seed=i)
            else:
                got = backend.forward(model, inputs, train=train)
            worst = max(worst, _max_abs_error(got, expected, case, i))
        return CaseResult(case.name, backend_name, layers, worst, tol, bool(worst <= tol),
                          seconds=time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - a case's failure is reported, not raised
        return CaseResult(case.name, backend_name, layers, None, tol, False,
                          error=f"{type(exc).__name__}: {exc}",
                          seconds=time.perf_counter() - start)


def _max_abs_error(got: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                   case: NetworkCase, i: int) -> float:
    if len(got) != len(expected):
        raise PetabSciMLError(f"the network gives {len(got)} output(s), the reference "
                              f"{len(expected)}", file=case.outputs[i])
    worst = 0.0
    for k, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            raise PetabSciMLError(f"output {k} has shape {g.shape}, reference {e.shape}",
                                  file=case.outputs[i])
        if g.size:
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - e))))
    return worst


COTANGENT_SEED = 0
"""Seed of the random cotangents of the cross-backend gradient check."""
NOISE_LEVEL = {"float32": 1e3 * float(np.finfo(np.float32).eps),
               "float64": 1e3 * float(np.finfo(np.float64).eps)}
"""A compared gradient whose norm is at most this times the cotangents' norm is rounding
noise: the check reports "nothing to compare" rather than pass or fail."""


def cross_backend(case: NetworkCase, backend_names: Sequence[str], *,
                  dtype: str = "float32", mode: str = "train") -> dict[str, Any]:
    """Outputs and vector-Jacobian products of the first backend against each other one,
    on the case's first repetition.

    The products take one seeded random cotangent per output (standard normal,
    :data:`COTANGENT_SEED`), with respect to every parameter array and every input: a
    gradient of the plain sum of the outputs vanishes for a softmax head and would
    compare rounding noise.  Returns ``output_max_abs_diff``, ``gradient_max_rel_diff``
    (the largest difference over the reference gradient's largest entry),
    ``gradient_norm`` (per backend, the norm of all its products together) and
    ``gradient_compared`` (False when the reference's norm is at the noise level,
    :data:`NOISE_LEVEL`).  Stochastic networks are compared in eval mode; others in the
    case's mode (else ``mode``).
    """
    network = get_format("yaml").read(case.net_file)
    inputs = _inputs_of(case, 0)
    train = case.mode_or(mode) == "train" and not network.stochastic
    results, cotangents = [], None
    for name in backend_names:
        backend, model = _first_repetition_model(case, network, name, dtype)
        outputs = backend.forward(model, inputs, train=train)
        if cotangents is None:
            cotangents = random_cotangents(outputs)
        arrays, input_grads = backend.vjp(model, inputs, cotangents, train=train)
        flat = [arrays[g][a] for g, a in _array_keys(arrays)] + list(input_grads)
        results.append((name, outputs, _flat_gradient(flat)))
    _, ref_out, ref_grad = results[0]
    scale = float(np.max(np.abs(ref_grad))) if ref_grad.size else 0.0
    cotangent_norm = float(np.sqrt(sum(np.sum(c ** 2) for c in cotangents)))
    compared = float(np.linalg.norm(ref_grad)) > NOISE_LEVEL[dtype] * max(cotangent_norm, 1.0)
    out_diff, grad_diff = 0.0, 0.0
    for _, outputs, grad in results[1:]:
        for a, b in zip(ref_out, outputs):
            if a.size:
                out_diff = max(out_diff, float(np.max(np.abs(a - b))))
        if grad.shape != ref_grad.shape:
            raise PetabSciMLError(f"the backends give gradients of {ref_grad.size} and "
                                  f"{grad.size} elements")
        if compared and grad.size:
            grad_diff = max(grad_diff, float(np.max(np.abs(grad - ref_grad))) / scale)
    return {"output_max_abs_diff": out_diff, "gradient_max_rel_diff": grad_diff,
            "gradient_compared": compared,
            "gradient_norm": {name: float(np.linalg.norm(g)) for name, _, g in results}}


def _first_repetition_model(case: NetworkCase, network: Network, backend_name: str,
                            dtype: str) -> tuple[Any, Any]:
    """``(backend, model)``: ``network`` built in ``backend_name`` with the parameters of
    the case's first repetition."""
    backend = get_backend(backend_name)
    model = backend.build(network, dtype=dtype)
    if case.params[0] is not None:
        model = backend.set_parameters(model, load_parameters(case.params[0], network))
    return backend, model


def _array_keys(arrays: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """``(layer, array)`` pairs in one order for every backend (JAX returns its dicts
    with sorted keys, PyTorch in module order)."""
    return [(g, a) for g in sorted(arrays) for a in sorted(arrays[g])]


def random_cotangents(outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One standard-normal array per output, its shape (seed :data:`COTANGENT_SEED`)."""
    rng = np.random.default_rng(COTANGENT_SEED)
    return [rng.standard_normal(np.shape(o)) for o in outputs]


FD_DIRECTIONS = 3
"""Random directions of the finite-difference check (seeded, :data:`COTANGENT_SEED`)."""
FD_STEP = 1e-4
"""Relative step of the central differences (times the largest entry of the point)."""
FD_TOLERANCE = 1e-6
"""Largest relative error of a float64 vector-Jacobian product against the differences."""


def finite_difference_error(case: NetworkCase, backend_name: str, *,
                            mode: str = "train") -> float:
    """The largest relative error, over :data:`FD_DIRECTIONS` seeded random directions
    through the parameters and the inputs together, of ``backend_name``'s float64
    vector-Jacobian product (random cotangents, :func:`random_cotangents`) against
    central finite differences of ``<cotangents, outputs>``: an independent reference for
    the gradient (the ML-import references hold outputs only).

    At a kink (ReLU, max pooling, a clamp) differences across it do not give the
    derivative.  Each direction is differenced with steps ``h`` and ``h / 4``; where the
    two disagree by more than the error allowed, a step crossed a kink, and the
    direction is replaced by a new random one (at most 20 draws in all).  Where they
    agree but not with the product, the point itself may lie on a kink (every direction
    then crosses it): the gap between the forward and backward slopes that stays as the
    step shrinks (``h / 4`` against ``h / 16``) says so, and the direction is redrawn
    too.  The error is ``|fd(h / 4) - <vjp, d>| / max(|<vjp, d>|, |fd|, 1e-300)``.
    Stochastic networks run in eval mode, others in the case's mode (else ``mode``).
    """
    network = get_format("yaml").read(case.net_file)
    backend, model = _first_repetition_model(case, network, backend_name, "float64")
    inputs = [np.asarray(x, np.float64) for x in _inputs_of(case, 0)]
    train = case.mode_or(mode) == "train" and not network.stochastic
    return vjp_finite_difference_error(backend, model, inputs, train=train)


def vjp_finite_difference_error(backend: Any, model: Any, inputs: Sequence[np.ndarray], *,
                                train: bool = False) -> float:
    """The check of :func:`finite_difference_error` on a built float64 ``model`` of
    ``backend`` at ``inputs``: the largest relative error of its vector-Jacobian product
    against central finite differences along seeded random directions through the
    parameters and the inputs together (kinks avoided as described there)."""
    values = backend.get_parameters(model)
    cotangents = random_cotangents(backend.forward(model, inputs, train=train))
    arrays, input_grads = backend.vjp(model, inputs, cotangents, train=train)
    keys = _array_keys(arrays)
    point = _flat_gradient([np.asarray(values[g][a]) for g, a in keys] + list(inputs))
    grad = _flat_gradient([arrays[g][a] for g, a in keys] + list(input_grads))
    shapes = [np.shape(values[g][a]) for g, a in keys] + [x.shape for x in inputs]

    def pairing(x: np.ndarray) -> float:
        parts, at = [], 0
        for shape in shapes:
            size = int(np.prod(shape))
            parts.append(x[at:at + size].reshape(shape))
            at += size
        changed = {g: dict(values[g]) for g in values}
        for (g, a), part in zip(keys, parts, strict=False):
            changed[g][a] = part
        outputs = backend.forward(backend.set_parameters(model, changed), parts[len(keys):],
                                  train=train)
        return float(sum(np.sum(np.asarray(o, np.float64) * c)
                         for o, c in zip(outputs, cotangents, strict=True)))

    h = FD_STEP * max(float(np.max(np.abs(point))) if point.size else 1.0, 1.0)
    rng = np.random.default_rng(COTANGENT_SEED + 1)
    worst, used = 0.0, 0
    at_point = pairing(point) if point.size else 0.0

    def one_sided_gap(d: np.ndarray, step: float) -> float:
        return abs((pairing(point + step * d) - at_point) / step
                   - (at_point - pairing(point - step * d)) / step)

    for _ in range(20):
        if used == FD_DIRECTIONS or not point.size:
            break
        d = rng.standard_normal(point.size)
        d /= np.linalg.norm(d)
        exact = float(grad @ d)
        coarse = (pairing(point + h * d) - pairing(point - h * d)) / (2 * h)
        fine = (pairing(point + h / 4 * d) - pairing(point - h / 4 * d)) / (h / 2)
        scale = max(abs(exact), abs(fine), 1e-300)
        if abs(coarse - fine) > FD_TOLERANCE * scale * 100:
            continue        # a kink between the steps
        if abs(fine - exact) > FD_TOLERANCE * scale:
            # the point itself on a kink (a ReLU input exactly 0, a tie in a max): the
            # one-sided slopes differ by a gap that does not shrink with the step
            wide, narrow = one_sided_gap(d, h / 4), one_sided_gap(d, h / 16)
            if narrow > FD_TOLERANCE * scale * 100 and narrow > 0.5 * wide:
                continue
        worst = max(worst, abs(fine - exact) / scale)
        used += 1
    if used < FD_DIRECTIONS and point.size:
        raise PetabSciMLError(f"finite differences: only {used} of {FD_DIRECTIONS} random "
                              "directions avoided a kink in 20 draws")
    return worst


def _flat_gradient(parts: Sequence[np.ndarray]) -> np.ndarray:
    """All gradient arrays as one float64 vector, in order."""
    if not parts:
        return np.zeros(0)
    return np.concatenate([np.asarray(g, np.float64).ravel() for g in parts])


CROSS_TOLERANCES = {"float32": (1e-5, 1e-4), "float64": (1e-10, 1e-7)}
"""(outputs absolute, gradients relative) agreement required between backends.

float64 gradients: torch's hardsigmoid backward uses the float32 constant 1/6 even in
float64, a 3e-8 relative error of torch's own, hence 1e-7."""


def _check_finite_differences(result: CaseResult, case: NetworkCase, mode: str) -> None:
    """Add the finite-difference check to a float64 result (failing it above
    :data:`FD_TOLERANCE`)."""
    try:
        result.fd_rel_error = finite_difference_error(case, result.backend, mode=mode)
    except Exception as exc:  # noqa: BLE001 - reported with the case
        result.error = f"finite differences: {type(exc).__name__}: {exc}"
        result.passed = False
        return
    if result.fd_rel_error > FD_TOLERANCE:
        result.passed = False
        result.error = (f"the gradient differs from central finite differences by "
                        f"{result.fd_rel_error:.1e} (relative; allowed {FD_TOLERANCE:.0e})")


def run_all(paths: Sequence[Path], backends: Sequence[str], *, dtype: str = "float32",
            progress: Callable[[str], None] | None = None, mode: str = "train"
            ) -> list[CaseResult]:
    """Run every case on every backend (in its own mode, else ``mode``); with several
    backends, add cross-backend columns to the first backend's result (and fail it if the
    backends disagree).  In float64 each backend's gradient is also checked against
    finite differences (``fd_rel_error``)."""
    if mode not in MODES:
        raise PetabSciMLError(f"mode must be train or eval, got {mode!r}")
    results: list[CaseResult] = []
    for path in paths:
        if progress:
            progress(str(path))
        try:
            case = load_case(path)
        except PetabSciMLError as exc:
            results.extend(CaseResult(str(path), b, "?", None, 0.0, False, error=str(exc))
                           for b in backends)
            continue
        per_backend = [run_case(case, b, dtype=dtype, mode=mode) for b in backends]
        if dtype == "float64":
            for r in per_backend:
                if r.error is None:
                    _check_finite_differences(r, case, mode)
        if len(backends) > 1 and all(r.error is None for r in per_backend):
            try:
                cross = cross_backend(case, backends, dtype=dtype, mode=mode)
                out_tol, grad_tol = CROSS_TOLERANCES[dtype]
                agree = (cross["output_max_abs_diff"] <= out_tol
                         and cross["gradient_max_rel_diff"] <= grad_tol)
            except Exception as exc:  # noqa: BLE001
                cross, agree = {}, False
                per_backend[0].error = f"cross-backend: {type(exc).__name__}: {exc}"
            for r in per_backend:
                r.cross = cross
                r.gradient_norm = cross.get("gradient_norm", {}).get(r.backend)
                r.passed = r.passed and agree
        results.extend(per_backend)
    return results


# ---------------------------------------------------------------------------------------
# Problem cases: the suite's sciml_problem_import and initialization categories
# ---------------------------------------------------------------------------------------
PROBLEM_CATEGORIES = ("sciml_problem_import", "initialization")
CROSS_LLH_RTOL = 1e-6
"""Cross-backend agreement required of the log-likelihood (relative)."""


@dataclass
class ProblemCase:
    """One problem case (``petab/problem.yaml`` plus references in ``solutions.yaml``)."""

    path: Path
    problem: Path
    solutions: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def category(self) -> str:
        return self.path.parent.name

    def tol(self, key: str, default: float = SUITE_TOLERANCE) -> float:
        return float(self.solutions.get(key, self.solutions.get("tol", default)))


def _is_problem_case(folder: Path) -> bool:
    if not (folder / "petab" / "problem.yaml").is_file():
        return False
    try:
        data = _read_solutions(folder / "solutions.yaml")
    except PetabSciMLError:
        return True
    keys = ("llh", "log_posterior", "grad_files", "simulation_files", "parameter_files")
    return isinstance(data, dict) and any(k in data for k in keys)


def discover_problems(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Problem-case folders (SciML problem import, initialization) under ``paths``."""
    return _discover(paths, _is_problem_case)


def load_problem_case(path: str | os.PathLike) -> ProblemCase:
    case = Path(path)
    sol_file = case / "solutions.yaml"
    solutions = _read_solutions(sol_file) or {}
    return ProblemCase(case, case / "petab" / "problem.yaml", solutions)


@dataclass
class ProblemResult:
    """Outcome of one problem case on one backend: the worst absolute error of each
    quantity the case has references for, and the tolerance it was held to."""

    case: str
    backend: str
    passed: bool
    llh: float | None = None
    errors: dict[str, float] = field(default_factory=dict)
    """``llh`` (or ``log_posterior``), ``simulations``, ``gradient``, ``parameters``."""
    tolerances: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    cross: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        return out


def _read_tsv(path: Path) -> list[dict[str, str]]:
    import csv
    import io

    from petab_sciml.safe_read import read_text

    text = read_text(path, what="a test case's table")
    return [dict(r) for r in csv.DictReader(io.StringIO(text, newline=""), delimiter="\t")]


def _h5_nested(path: Path, net: str) -> dict[str, dict[str, np.ndarray]]:
    """A reference file's parameters of ``net``, read as an array file (links and
    external data refused, shapes within the budgets)."""
    groups = read_array_file(path, require_pytorch_format=False).parameters
    if net not in groups:
        raise PetabSciMLError(f"no parameters of network {net!r}", file=path,
                              entry=f"parameters/{net}")
    return {lay: {arr: lazy.read() for arr, lazy in arrays.items()}
            for lay, arrays in groups[net].items()}


def evaluate_problem_case(case: ProblemCase, backend_name: str, **options: Any):
    """Load the case's problem in ``backend_name`` and evaluate it once at the nominal
    parameters (value, gradient, simulations); returns ``(simulator, evaluation)``."""
    from petab_sciml.problem import load_problem

    problem = load_problem(case.problem, backend=backend_name)
    sim = problem.simulator(**options)
    return sim, sim.evaluate(grad=True)


def check_problem_case(case: ProblemCase, sim: Any, ev: Any) -> tuple[dict, dict, list[str]]:
    """Compare an evaluation with the case's references: (errors, tolerances, problems)."""
    sol = case.solutions
    errors: dict[str, float] = {}
    tols: dict[str, float] = {}
    problems: list[str] = []
    if "llh" in sol:
        errors["llh"] = abs(ev.llh - float(sol["llh"]))
        tols["llh"] = case.tol("tol_llh")
    if "log_posterior" in sol:
        errors["log_posterior"] = abs(ev.log_posterior - float(sol["log_posterior"]))
        tols["log_posterior"] = case.tol("tol_log_posterior")
    sim_files = sol.get("simulation_files") or []
    if sim_files:
        rows = [r for f in sim_files for r in _read_tsv(case.path / f)]
        ref = np.array([float(r["simulation"]) for r in rows])
        if ref.shape != ev.simulations.shape:
            problems.append(f"{len(rows)} reference simulations, {ev.simulations.size} "
                            "simulated")
        else:
            measured = sim.plan.measurements.rows
            for i, (r, m) in enumerate(zip(rows, measured)):
                if r["observableId"] != m["observableId"] or \
                        float(r["time"]) != float(m["time"]):
                    problems.append(f"simulation row {i + 2} does not match measurement "
                                    f"row {i + 2}")
                    break
            errors["simulations"] = float(np.max(np.abs(ev.simulations - ref))) \
                if ref.size else 0.0
        tols["simulations"] = case.tol("tol_simulations")
    grad_files = sol.get("grad_files") or {}
    if grad_files:
        # the references are gradients of the log-likelihood (or log-posterior): the
        # objective is its negative
        worst = 0.0
        tols["gradient"] = case.tol("tol_grad")
        mine = ev.grad
        trainable = sim.trainable()
        for key, fname in grad_files.items():
            path = case.path / fname
            if key == "mech":
                for r in _read_tsv(path):
                    pid = r["parameterId"]
                    if pid not in sim.parameter_ids:
                        problems.append(f"gradient reference for {pid!r}, which is not "
                                        "estimated")
                        continue
                    got = -mine["mech"][sim.parameter_ids.index(pid)]
                    worst = max(worst, abs(got - float(r["value"])))
                for pid in sim.parameter_ids:
                    if pid not in {r["parameterId"] for r in _read_tsv(path)}:
                        problems.append(f"no gradient reference for estimated {pid!r}")
                continue
            ref = _h5_nested(path, key)
            for lay, arrays in ref.items():
                for arr, value in arrays.items():
                    mask = trainable["nets"][key][lay][arr]
                    got = -mine["nets"][key][lay][arr]
                    if value.size == 0:   # frozen in the reference: no gradient
                        if mask.any():
                            problems.append(f"{key}.{lay}.{arr} is frozen in the reference "
                                            "but estimated here")
                        continue
                    if value.shape != got.shape:
                        problems.append(f"{key}.{lay}.{arr}: reference shape {value.shape}, "
                                        f"gradient shape {got.shape}")
                        continue
                    if mask.any():
                        worst = max(worst, float(np.max(np.abs(got - value)[mask])))
        errors["gradient"] = worst
    params = sol.get("parameter_files") or {}
    if params:
        worst = 0.0
        nominal = sim.parameters()["nets"]
        for net, fname in params.items():
            for lay, arrays in _h5_nested(case.path / fname, net).items():
                for arr, value in arrays.items():
                    got = nominal[net][lay][arr]
                    if got.shape != value.shape:
                        problems.append(f"{net}.{lay}.{arr}: shape {got.shape}, reference "
                                        f"{value.shape}")
                        continue
                    worst = max(worst, float(np.max(np.abs(got - value), initial=0.0)))
        errors["parameters"] = worst
        tols["parameters"] = case.tol("tol")
    return errors, tols, problems


def run_problem_case(case: ProblemCase, backend_name: str, **options: Any
                     ) -> tuple[ProblemResult, Any]:
    """Run one case on one backend; returns the result and the evaluation (or None)."""
    start = time.perf_counter()
    try:
        sim, ev = evaluate_problem_case(case, backend_name, **options)
        errors, tols, problems = check_problem_case(case, sim, ev)
        passed = not problems and ev.ok and all(errors[k] <= tols[k] for k in errors)
        result = ProblemResult(case.name, backend_name, passed, ev.llh, errors, tols,
                               "; ".join(problems) or (None if ev.ok else
                                                        "the simulation failed"),
                               time.perf_counter() - start)
        return result, ev
    except Exception as exc:  # noqa: BLE001 - a case's failure is reported, not raised
        return ProblemResult(case.name, backend_name, False, error=f"{type(exc).__name__}: "
                             f"{exc}", seconds=time.perf_counter() - start), None


def cross_problem(evals: Sequence[Any]) -> dict[str, float]:
    """Agreement of the first evaluation with the others: relative difference of the
    log-likelihood, max abs difference of simulations, max relative gradient difference."""
    ref = evals[0]
    out = {"llh_rel_diff": 0.0, "simulation_max_abs_diff": 0.0, "gradient_max_rel_diff": 0.0}
    for ev in evals[1:]:
        out["llh_rel_diff"] = max(out["llh_rel_diff"],
                                  abs(ev.llh - ref.llh) / max(abs(ref.llh), 1e-300))
        if ev.simulations.size:
            out["simulation_max_abs_diff"] = max(out["simulation_max_abs_diff"], float(
                np.max(np.abs(ev.simulations - ref.simulations))))
        if ref.grad_flat is not None and ev.grad_flat is not None and ref.grad_flat.size:
            scale = max(float(np.max(np.abs(ref.grad_flat))), 1e-12)
            out["gradient_max_rel_diff"] = max(out["gradient_max_rel_diff"], float(
                np.max(np.abs(ev.grad_flat - ref.grad_flat))) / scale)
    return out


def run_problems(paths: Sequence[Path], backends: Sequence[str], *,
                 progress: Callable[[str], None] | None = None, **options: Any
                 ) -> list[ProblemResult]:
    """Run every problem case on every backend; with several backends the first
    backend's result gets cross-backend columns (and fails if the log-likelihoods differ
    by more than :data:`CROSS_LLH_RTOL`)."""
    results: list[ProblemResult] = []
    for path in paths:
        if progress:
            progress(str(path))
        try:
            case = load_problem_case(path)
        except PetabSciMLError as exc:
            results.extend(ProblemResult(str(path), b, False, error=str(exc)) for b in backends)
            continue
        runs = [run_problem_case(case, b, **options) for b in backends]
        per_backend = [r for r, _ in runs]
        evals = [ev for _, ev in runs]
        if len(backends) > 1 and all(ev is not None for ev in evals):
            cross = cross_problem(evals)
            agree = cross["llh_rel_diff"] <= CROSS_LLH_RTOL
            for r in per_backend:
                r.cross = cross
                r.passed = r.passed and agree
                if not agree and r.error is None:
                    r.error = (f"backends disagree: log-likelihood relative difference "
                               f"{cross['llh_rel_diff']:.1e} > {CROSS_LLH_RTOL:.0e}")
        results.extend(per_backend)
    return results

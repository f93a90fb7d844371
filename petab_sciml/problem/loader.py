"""``load_problem``: a validated problem with every network built in a backend and its
parameters where the tables say they are.

The result keeps plain data next to the backend models: ``problem.parameters[net]`` is a
:class:`~petab_sciml.problem.resolve.ResolvedNetwork` (initial values, trainable masks,
bounds and priors per element, dropout per array, all numpy), resolved once here, so a
simulator can use ``{net: {layer: {array: ndarray}}}`` plus masks without re-parsing.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.errors import PetabSciMLError
from petab_sciml.problem.config import ProblemConfig
from petab_sciml.problem.context import ProblemContext
from petab_sciml.problem.data import ProblemData
from petab_sciml.problem.issues import IssueList
from petab_sciml.problem.parameters import PlainParameter
from petab_sciml.problem.resolve import ResolvedNetwork
from petab_sciml.problem.validate import validate_problem


class ProblemError(PetabSciMLError):
    """The problem is invalid; ``issues`` holds every finding."""

    def __init__(self, message: str, issues: IssueList):
        super().__init__(message)
        self.issues = issues


class ProblemWarning(UserWarning):
    """A validation warning of a problem that loads (issued once per warning by
    :func:`load_problem`; the issue is in ``problem.issues`` too)."""


class NetworkParameters(dict):
    """``ResolvedNetwork`` by network id (``problem.parameters["net1"]``); calling it,
    ``problem.parameters()``, gives the nominal parameter values of the objective:
    ``{"mech": estimated mechanistic values (parameter-table order), "nets": {net:
    {layer: {array: ndarray}}}}`` (see :mod:`petab_sciml.simulation`)."""

    problem: Any = None

    def __call__(self) -> dict[str, Any]:
        return self.problem.simulator().parameters()


@dataclass
class Problem:
    """A loaded PEtab SciML problem.

    For training: ``problem.parameters()``, ``problem.objective(p)``,
    ``problem.value_and_grad(p)``, ``problem.simulate(p)`` (measurement-table order), all
    in the problem's backend (:mod:`petab_sciml.simulation`, ``docs/simulation.md``).
    """

    path: Path
    backend_name: str
    backend: Any
    dtype: str
    config: ProblemConfig
    context: ProblemContext
    networks: dict[str, Any]
    """Network IR by id."""
    models: dict[str, Any]
    """Backend models by network id, parameters initialised."""
    parameters: dict[str, ResolvedNetwork]
    plain_parameters: dict[str, PlainParameter]
    issues: IssueList = field(default_factory=IssueList)
    plan: Any = None
    """The simulation plan (:class:`petab_sciml.simulation.SimulationPlan`), built at
    load."""
    _simulators: dict = field(default_factory=dict, repr=False)

    @property
    def data(self) -> ProblemData:
        """What the simulation plan is built from
        (:func:`petab_sciml.simulation.build_plan`)."""
        return ProblemData(self.config, self.context, self.parameters, self.plain_parameters)

    # ------------------------------------------------------------- objective
    def simulator(self, backend: str | None = None, **options: Any) -> Any:
        """The :class:`petab_sciml.simulation.Simulator` of this problem (default: the
        problem's backend; one per backend and options, built on first use)."""
        from petab_sciml.simulation import simulator_for

        key = (backend or self.backend_name, tuple(sorted(options.items())))
        if key not in self._simulators:
            self._simulators[key] = simulator_for(self, key[0], **options)
        return self._simulators[key]

    def objective(self, p: Any = None) -> float:
        """Negative log-posterior (negative log-likelihood without priors) at ``p``."""
        return self.simulator().objective(p)

    def value_and_grad(self, p: Any = None) -> tuple[float, Any]:
        """Objective and its gradient (same structure as ``p``; frozen entries 0)."""
        return self.simulator().value_and_grad(p)

    def simulate(self, p: Any = None) -> np.ndarray:
        """Simulated observables in measurement-table order."""
        return self.simulator().simulate(p)

    def model(self, params: Any = None, *, backend: str | None = None, **options: Any) -> Any:
        """The whole problem as a native trainable model of ``backend`` (default: the
        problem's): an ``equinox.Module`` in JAX (:mod:`petab_sciml.backends.jax.problem`),
        a ``torch.nn.Module`` in PyTorch (:mod:`petab_sciml.backends.torch.problem`).
        Its estimated values start at the nominal values, or at ``params``
        (``{"mech": linear values, "nets": {...}}``); ``options`` are the backend's
        simulation options."""
        from petab_sciml.plugins import get_backend

        return get_backend(backend or self.backend_name).problem_model(self, params,
                                                                       **options)

    def save(self, values: Any, out_dir: str | Path, *, force: bool = False) -> Path:
        """Write this problem with ``values`` as its nominal values into ``out_dir``.

        ``values`` is a native model (:meth:`model`) or ``{"mech": ..., "nets": ...}``.
        See :func:`petab_sciml.problem.save.save_problem`; returns the new problem.yaml."""
        from petab_sciml.problem.save import save_problem

        return save_problem(self, values, out_dir, force=force)

    # ------------------------------------------------------------- plain-data views
    def initial_parameters(self, net_id: str) -> dict[str, dict[str, np.ndarray]]:
        """``{layer: {array: float64 ndarray}}``: the initial values (PyTorch layout)."""
        return self.parameters[net_id].values

    def trainable(self, net_id: str) -> dict[str, dict[str, np.ndarray]]:
        return self.parameters[net_id].trainable

    def bounds(self, net_id: str) -> tuple[dict, dict]:
        r = self.parameters[net_id]
        return r.lower, r.upper

    def dropout(self, net_id: str) -> dict[str, dict[str, float]]:
        return self.parameters[net_id].dropout

    def hybridization(self, net_id: str) -> str:
        return self.config.networks[net_id].hybridization


def load_problem(path: str | Path | Any, backend: str = "torch", *, dtype: str = "float64",
                 trust_code: bool = False, seed: int = 0, simulation: bool = True,
                 confine: bool = False) -> Problem:
    """Validate and load the problem at ``path`` (its YAML file), or a
    ``petab.v2.Problem`` read by libpetab-python (>= 0.10).

    A libpetab problem is written to a temporary folder first (its tables as they are in
    memory, the hybridization tables too; network and array files copied from the
    folder it was read from), which lives as long as the returned problem.

    Networks are built in ``backend`` (``"torch"`` or ``"jax"``) with ``dtype``; their
    parameters are set from the resolved parameter table (elements the problem leaves
    open keep the backend's seeded default initialisation).  Arrays that are entirely
    non-estimated are frozen as the backend does it (``Backend.freeze``; in torch
    ``requires_grad=False``); ``problem.trainable(net)`` has the element-wise masks for
    every backend.  Raises :class:`ProblemError` if validation finds errors and issues
    each validation warning as a :class:`ProblemWarning`; networks whose format runs code
    need ``trust_code=True``.

    With ``simulation`` (default) the SBML model is imported and the simulation plan
    built here, so a model outside the supported SBML subset fails at load
    (``UnsupportedSbmlError`` naming the element), never during a simulation; validation
    runs the same, so ``petab-sciml validate`` reports it too.  Without ``simulation``
    those errors do not stop loading the networks.

    With ``confine`` no file outside the problem's folder is opened (symlinks resolved):
    each is a validation error ``FILE_OUTSIDE_CONFINED`` (see ``docs/security.md``).
    """
    from petab_sciml.plugins import get_backend

    folder = None
    if not isinstance(path, (str, Path)):
        folder, path = _write_libpetab_problem(path, confine)
    report = validate_problem(path, trust_code=trust_code, read_values=True, confine=confine)
    if report.plan_error is not None:
        # the checks that building the simulation plan makes: the only error (they run on
        # an otherwise valid problem); raise what the plan builder raised, as it names
        # the element (UnsupportedSbmlError, SimulationError, ...)
        if simulation:
            raise report.plan_error
        report.issues.remove(report.plan_issue)
    if report.issues.errors:
        lines = "\n".join(f"  {i}" for i in report.issues.errors[:20])
        more = len(report.issues.errors) - 20
        raise ProblemError(f"{path}: the problem is invalid ({len(report.issues.errors)} "
                           f"error(s)):\n{lines}" + (f"\n  ... {more} more" if more > 0 else ""),
                           report.issues)
    for issue in report.issues.warnings:
        warnings.warn(f"{path}: {issue}", ProblemWarning, stacklevel=2)
    ctx = report.context
    unchecked = sorted(ctx.unchecked_networks)
    if unchecked:
        raise ProblemError(f"{path}: network(s) {', '.join(unchecked)} could not be loaded "
                           "(see the warnings; formats that run code need trust_code=True)",
                           report.issues)
    impl = get_backend(backend)
    models: dict[str, Any] = {}
    for net_id, network in ctx.networks.items():
        resolved = report.resolved[net_id]
        model = impl.build(network, dtype=dtype, seed=seed)
        defaults = impl.get_parameters(model)
        values = _fill_defaults(resolved, defaults)
        model = impl.set_parameters(model, _cast(values, dtype, network), strict=False)
        model = impl.freeze(model, resolved.trainable)
        models[net_id] = model
    resolved = NetworkParameters(report.resolved)
    problem = Problem(Path(path), backend, impl, dtype, ctx.config, ctx, dict(ctx.networks),
                      models, resolved, report.parameters.plain, report.issues)
    resolved.problem = problem
    if folder is not None:
        import shutil
        import weakref

        weakref.finalize(problem, shutil.rmtree, folder, True)
    if simulation and ctx.config.model_files:
        from petab_sciml.simulation import build_plan

        problem.plan = build_plan(problem.data)
    return problem


def _write_libpetab_problem(problem: Any, confine: bool = False) -> tuple[str, Path]:
    """Write a ``petab.v2.Problem`` to a new temporary folder; return (folder, YAML).
    Files are never copied to outside that folder, nor (with ``confine``) from outside
    the folder the problem was read from."""
    import shutil
    import tempfile

    from petab_sciml.confine import outside_of

    config = getattr(problem, "config", None)
    if not hasattr(problem, "to_files") or config is None:
        raise TypeError(f"load_problem takes a path to a problem YAML file or a "
                        f"petab.v2.Problem, got {type(problem).__name__}")
    folder = tempfile.mkdtemp(prefix="petab_sciml_")
    try:
        out = Path(folder)
        problem.to_files(out)
        sciml = getattr(getattr(problem, "extensions", None), "sciml", None)
        ext = (config.extensions or {}).get("sciml")
        for table, name in zip(getattr(sciml, "hybridization_tables", []) or [],
                               getattr(ext, "hybridization_files", []) or []):
            table.to_tsv(out / str(name))
        source = Path(str(config.base_path)) if config.base_path is not None else None
        names = [str(n) for n in getattr(ext, "array_files", []) or []]
        names += [str(n.location) for n in (getattr(ext, "neural_networks", None) or {})
                  .values()]
        names += [str(n) for n in getattr(ext, "hybridization_files", []) or []]
        for name in names:
            if outside_of(out / name, out) is not None or (
                    confine and source is not None and outside_of(source / name, source)):
                continue
            if not (out / name).exists() and source is not None and (source / name).exists():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / name, out / name)
        yaml_name = Path(str(config.filepath)).name if config.filepath else "problem.yaml"
        return folder, out / yaml_name
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _fill_defaults(resolved: ResolvedNetwork, defaults: dict) -> dict:
    values = resolved.values
    for layer, arrays in resolved.from_backend.items():
        for array, mask in arrays.items():
            base = np.asarray(defaults[layer][array], dtype=np.float64)
            values[layer][array] = np.where(mask, base, values[layer][array])
    return values


def _cast(values: dict, dtype: str, network: Any) -> dict:
    infos = network.parameter_arrays()
    out: dict[str, dict[str, np.ndarray]] = {}
    for layer, arrays in values.items():
        out[layer] = {}
        for array, value in arrays.items():
            fixed = infos[layer][array].dtype
            out[layer][array] = np.asarray(value).astype(fixed or dtype)
    return out


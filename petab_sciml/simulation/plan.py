"""The simulation plan: a loaded PEtab SciML problem as plain, backend-agnostic data.

Built **once** at load (:func:`build_plan`); the JAX and PyTorch executors only compile
what is here.  Nothing in the plan is re-parsed per objective evaluation.

Symbols and vectors
-------------------
* ``x``: the ODE states (:attr:`OdeModel.state_ids` of the hybridized model).
* ``theta``: every constant a formula may use: the model's constant parameters and
  compartments (after hybridization), every ordinary PEtab parameter, and network inputs
  that conditions assign.  ``theta0`` holds the default values (SBML values, overridden
  by the parameter table's nominal values); conditions change entries per period.
* ``o_j``: the outputs of network ``j`` that the problem maps to PEtab ids (one group per
  network, in :attr:`SimulationPlan.networks` order).
* ``w``: the flat vector of everything that the objective is a function of: the estimated
  mechanistic parameters (:attr:`mech_ids`, parameter-table order) followed by every
  network array (PyTorch layout, C order).  ``free_index`` lists the estimated entries:
  gradients are taken only with respect to ``w[free_index]``.

Every compiled formula is ``f(t, x, theta, o_1, ..., o_J)`` (the initial values drop
``x``); see :meth:`SimulationPlan.groups`.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy

from petab_sciml.errors import PetabSciMLError
from petab_sciml.problem.resolve import Prior

_KINKED_FORMULAS = (sympy.Piecewise, sympy.Abs, sympy.Max, sympy.Min, sympy.floor,
                    sympy.ceiling, sympy.sign, sympy.Heaviside, sympy.Mod)

__all__ = [
    "SimulationError",
    "SimulationPlan",
    "NetworkPlan",
    "NetworkInput",
    "ArraySlot",
    "ExperimentPlan",
    "PeriodPlan",
    "MeasurementPlan",
    "build_plan",
]

TRANSFORMS = ("lin", "log", "log10")
DISTRIBUTIONS = ("normal", "laplace")
_TIME_NAMES = {"time", "t"}


class SimulationError(PetabSciMLError):
    """The problem cannot be simulated (an unsupported PEtab feature, or an
    inconsistency found while building the simulation plan)."""


# --------------------------------------------------------------------------- data model
@dataclass(frozen=True)
class ArraySlot:
    """One network array in the flat vector ``w``."""

    layer: str
    array: str
    shape: tuple[int, ...]
    offset: int
    ir_trainable: bool
    """A parameter of the network (True) or a buffer such as running statistics."""

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def key(self) -> str:
        return f"{self.layer}.{self.array}"


@dataclass(frozen=True)
class NetworkInput:
    """One input argument of a network.

    ``kind`` is ``"elements"`` (each element is a formula, ``exprs`` in C order; the
    formulas of all such arguments of one network are compiled together, this argument
    takes ``[start:start + size]`` of their values) or ``"array"`` (values from array
    files: ``data[g]`` for initial-condition group ``g``).
    """

    arg: int
    kind: str
    shape: tuple[int, ...]
    exprs: tuple[sympy.Expr, ...] = ()
    start: int = 0
    data: np.ndarray | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass
class NetworkPlan:
    id: str
    network: Any
    """The network IR (:class:`petab_sciml.network.Network`)."""
    pre_initialization: bool
    inputs: list[NetworkInput]
    output_ids: tuple[str, ...]
    output_index: tuple[tuple[int, tuple[int, ...] | None], ...]
    """Per output id: (output argument, element index or None for the whole argument)."""
    arrays: list[ArraySlot]
    input_exprs: tuple[sympy.Expr, ...] = ()
    """Formulas of all ``elements`` inputs, concatenated (see :class:`NetworkInput`)."""
    in_rhs: bool = False
    """A simulation network evaluated inside the right-hand side."""
    in_observables: bool = False
    """A simulation network evaluated at the measurement points."""

    @property
    def n_outputs(self) -> int:
        return len(self.output_ids)


@dataclass
class PeriodPlan:
    start: float
    end: float
    conditions: tuple[str, ...]
    theta_changes: list[tuple[int, int]]
    """(theta index, change index): ``theta[i] = change_values[k]`` at the period start."""
    state_changes: list[tuple[int, int]]
    """(state index, change index)."""
    times: np.ndarray
    """Sorted unique measurement times in this period (may be empty; ``inf`` last: a
    steady-state measurement)."""
    steady_state: bool = False
    """The period runs to steady state (``end`` is ``inf``): a pre-equilibration period
    (experiment table time ``-inf``; it starts at the next period's start time, or 0),
    or a last period with measurements at ``time = inf``.  The solve goes past the last
    finite measurement time until the weighted RMS of ``dx/dt`` (and, with forward
    sensitivities, of ``dS/dt``) with the solver's ``atol`` and ``rtol`` drops below 1,
    as AMICI's convergence check; ``inf`` measurements read the state there."""
    pre_equilibration: bool = False


@dataclass
class ExperimentPlan:
    id: str
    group: int
    """Initial-condition group (index into :attr:`SimulationPlan.groups_conditions`)."""
    periods: list[PeriodPlan]

    @property
    def t0(self) -> float:
        return self.periods[0].start


@dataclass
class MeasurementPlan:
    """Measurements in table order, as index arrays."""

    experiment: np.ndarray
    period: np.ndarray
    time_index: np.ndarray
    """Index into the period's ``times``."""
    time: np.ndarray
    observable: np.ndarray
    value: np.ndarray
    transform: np.ndarray
    """Index into :data:`TRANSFORMS` per measurement."""
    distribution: np.ndarray
    """Index into :data:`DISTRIBUTIONS` per measurement."""
    obs_par_theta: np.ndarray
    """(M, K): theta index of each observable-placeholder value (-1: a number)."""
    obs_par_value: np.ndarray
    """(M, K): the number (where ``obs_par_theta`` is -1; NaN if unset)."""
    noise_par_theta: np.ndarray
    noise_par_value: np.ndarray
    rows: list[dict[str, str]]
    """The measurement-table rows (observableId, experimentId, time, ...)."""

    @property
    def size(self) -> int:
        return int(self.value.shape[0])


@dataclass
class SimulationPlan:
    source: Path
    fingerprint: str
    """sha256 of every file of the problem (keys caches of compiled code)."""
    state_ids: tuple[str, ...]
    theta_ids: tuple[str, ...]
    theta0: np.ndarray
    mech_ids: tuple[str, ...]
    mech_theta_index: np.ndarray
    mech_lower: np.ndarray
    mech_upper: np.ndarray
    networks: list[NetworkPlan]
    n_w: int
    w0: np.ndarray
    free_index: np.ndarray
    rhs_exprs: tuple[sympy.Expr, ...]
    x0_exprs: tuple[sympy.Expr, ...]
    change_exprs: tuple[sympy.Expr, ...]
    groups_conditions: list[tuple[str, ...]]
    group_theta_changes: list[list[tuple[int, int]]]
    group_t0: np.ndarray
    experiments: list[ExperimentPlan]
    observable_ids: tuple[str, ...]
    obs_exprs: tuple[sympy.Expr, ...]
    noise_exprs: tuple[sympy.Expr, ...]
    n_obs_par: int
    n_noise_par: int
    measurements: MeasurementPlan
    priors: list[tuple[Prior, np.ndarray, float, float, str]]
    """(prior, indices into ``w``, lower, upper bounds, scale) for each (prior, bounds,
    scale) group; ``scale`` is the ``parameterScale`` on which a ``parameterScale*`` prior
    applies (``lin`` for every other prior, which applies to the linear value)."""
    logprior_const: float
    """Constant part of the log-prior (truncation to bounds, implicit uniform priors)."""
    has_priors: bool
    model: Any = None
    """The hybridized :class:`~petab_sciml.sbml.OdeModel`."""
    info: dict[str, Any] = field(default_factory=dict)
    mech_scale: tuple[str, ...] = ()
    """``parameterScale`` of each estimated mechanistic parameter (``lin``, ``log``,
    ``log10``): the scale the native trainable models optimize on."""
    w_lower: np.ndarray | None = None
    """Lower bound of every entry of ``w`` (linear scale; -inf where unbounded)."""
    w_upper: np.ndarray | None = None

    # ---------------------------------------------------------------- symbol groups
    @property
    def net_output_groups(self) -> list[tuple[str, ...]]:
        return [n.output_ids for n in self.networks]

    def groups(self, with_states: bool = True) -> list[tuple[str, ...]]:
        """The symbol groups of every compiled formula: ``[x, theta, o_1, ..., o_J]``."""
        out = [self.state_ids] if with_states else []
        return out + [self.theta_ids, *self.net_output_groups]

    @property
    def n_mech(self) -> int:
        return len(self.mech_ids)

    @property
    def n_free(self) -> int:
        return int(self.free_index.size)

    @property
    def n_periods_max(self) -> int:
        return max((len(e.periods) for e in self.experiments), default=0)

    @property
    def rhs_smooth(self) -> bool:
        """Whether everything the ODE solver integrates is smooth: the right-hand side's
        formulas and the inputs of the networks inside it have no piecewise terms,
        ``abs``, ``min``/``max``, rounding or sign, and those networks have no kinks
        (:attr:`petab_sciml.network.Network.smooth`).  Where it is not, a last-bit
        difference can flip the step controller's accept / reject decisions."""
        exprs = [*self.rhs_exprs, *(e for n in self.networks if n.in_rhs
                                    for e in n.input_exprs)]
        if any(e.has(*_KINKED_FORMULAS) for e in exprs if isinstance(e, sympy.Basic)):
            return False
        # a network without the IR's smoothness (none today) counts as kinked
        return all(getattr(n.network, "smooth", False) for n in self.networks if n.in_rhs)

    def network(self, net_id: str) -> NetworkPlan:
        for n in self.networks:
            if n.id == net_id:
                return n
        raise KeyError(net_id)

    # ------------------------------------------------------------ parameter vectors
    def pack(self, params: Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray:
        """``{"mech": vector, "nets": {net: {layer: {array: values}}}}`` -> ``w``
        (float64; written into ``out`` if given, else a fresh array aligned for zero-copy
        hand-over to JAX, see :func:`aligned_empty`).  Missing networks or arrays keep
        their nominal values."""
        w = aligned_empty(self.n_w) if out is None else out
        written: list[tuple[int, int]] = []   # (start, stop) of every entry passed
        mech = params.get("mech")
        if mech is not None:
            mech = np.asarray(_numpy(mech), dtype=np.float64).reshape(-1)
            if mech.size != self.n_mech:
                raise SimulationError(f"'mech' has {mech.size} values; the problem estimates "
                                      f"{self.n_mech} ({', '.join(self.mech_ids)})")
            w[: self.n_mech] = mech
            written.append((0, self.n_mech))
        nets = params.get("nets") or {}
        for net_id, layers in nets.items():
            try:
                plan = self.network(net_id)
            except KeyError:
                raise SimulationError(f"unknown network {net_id!r}") from None
            slots = {(s.layer, s.array): s for s in plan.arrays}
            for layer, arrays in layers.items():
                for array, value in arrays.items():
                    slot = slots.get((layer, array))
                    if slot is None:
                        raise SimulationError(f"network {net_id!r} has no array "
                                              f"{layer}.{array}")
                    v = np.asarray(_numpy(value), dtype=np.float64)
                    if v.shape != slot.shape:
                        raise SimulationError(f"{net_id}.{layer}.{array} has shape {v.shape}, "
                                              f"expected {slot.shape}")
                    w[slot.offset: slot.offset + slot.size] = v.reshape(-1)
                    written.append((slot.offset, slot.offset + slot.size))
        # entries nobody passed keep their nominal values (copied only where needed: w
        # may hold millions of entries; slots never overlap and each is written once)
        if sum(stop - start for start, stop in written) < self.n_w:
            kept = np.ones(self.n_w, bool)
            for start, stop in written:
                kept[start:stop] = False
            np.copyto(w, self.w0, where=kept)
        return w

    def unpack(self, w: np.ndarray, copy: bool = True) -> dict[str, Any]:
        """``w`` -> ``{"mech": vector, "nets": {net: {layer: {array: ndarray}}}}``.

        ``copy=False``: the arrays are views of ``w`` (no copies: for a ``w`` nobody
        else holds, e.g. a fresh gradient)."""
        w = np.asarray(w, dtype=np.float64)
        take = np.copy if copy else (lambda a: a)
        nets: dict[str, dict[str, dict[str, np.ndarray]]] = {}
        for plan in self.networks:
            layers: dict[str, dict[str, np.ndarray]] = {}
            for s in plan.arrays:
                layers.setdefault(s.layer, {})[s.array] = \
                    take(w[s.offset: s.offset + s.size].reshape(s.shape))
            nets[plan.id] = layers
        return {"mech": take(w[: self.n_mech]), "nets": nets}

    @functools.cached_property
    def all_free(self) -> bool:
        """Every entry of ``w`` is estimated (``free_index`` is ``0, 1, ..., n_w - 1``):
        gradients need no gathering or scattering."""
        return bool(self.free_index.size == self.n_w
                    and np.array_equal(self.free_index, np.arange(self.n_w)))

    def free_mask(self) -> np.ndarray:
        mask = np.zeros(self.n_w, bool)
        mask[self.free_index] = True
        return mask


def _scaled(values: Iterable[float], scale: str) -> tuple[float, ...]:
    """``values`` (linear) on ``scale``: ``log`` (natural) or ``log10``; 0 maps to -inf."""
    if scale == "lin":
        return tuple(values)
    log = math.log if scale == "log" else math.log10
    return tuple(-math.inf if v <= 0 else log(v) if math.isfinite(v) else v for v in values)


def aligned_empty(n: int, alignment: int = 64) -> np.ndarray:
    """An uninitialized float64 vector of ``n`` entries whose data starts on an
    ``alignment``-byte boundary.  ``jax.device_put`` hands such an array to the CPU
    backend without copying it (it copies anything less aligned), which matters for
    ``w`` of millions of entries."""
    raw = np.empty(n * 8 + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start: start + n * 8].view(np.float64)


def _numpy(value: Any) -> Any:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


# --------------------------------------------------------------------------- building
def build_plan(problem: Any) -> SimulationPlan:
    """The simulation plan of a loaded problem (:func:`petab_sciml.problem.load_problem`).

    Raises :class:`~petab_sciml.sbml.UnsupportedSbmlError` (naming the SBML element) for
    models outside the supported subset and :class:`SimulationError` for PEtab features
    the simulators do not support; both at load, never during a simulation.
    """
    return _Builder(problem).build()


class _Builder:
    def __init__(self, problem: Any):
        self.problem = problem
        self.ctx = problem.context
        self.cfg = problem.config

    # ------------------------------------------------------------------ helpers
    def rows(self, kind: str) -> list[tuple[Any, Any]]:
        return list(self.ctx.rows(kind))

    def fail(self, message: str, *, file: Any = None, entry: str | None = None):
        raise SimulationError(message, file=file, entry=entry)

    def parse(self, text: Any, where: str) -> sympy.Expr:
        from petab_sciml.expressions import TIME, parse

        expr = parse(text, context=where)
        subs = {}
        for s in expr.free_symbols:
            if s.name == "t" and "t" not in self.known_names:
                subs[s] = TIME
            elif s.name in self.aliases:
                subs[s] = sympy.Symbol(self.aliases[s.name])
        return expr.xreplace(subs) if subs else expr

    # ------------------------------------------------------------------ main
    def build(self) -> SimulationPlan:
        from petab_sciml.sbml import load_sbml

        cfg = self.cfg
        if not cfg.model_files:
            self.fail("the problem has no model file", file=cfg.path)
        model_id, entry = next(iter(cfg.model_files.items()))
        language = str(entry.get("language", "sbml")).lower()
        if language != "sbml":
            self.fail(f"model language {language!r} cannot be simulated (only sbml)",
                      file=cfg.path, entry=f"model_files.{model_id}")
        self.model_path = cfg.resolve(entry["location"])
        base_model = load_sbml(self.model_path)
        self.base_model = base_model

        # mapping aliases of model entities (petabEntityId -> modelEntityId)
        self.aliases = {m.petab_id: m.model_id for m in self.ctx.mapping.values()
                        if m.ref is None and m.valid and m.model_id != m.petab_id}
        self.known_names = set(base_model.state_ids) | set(base_model.constant_ids) | \
            set(base_model.rules) | set(base_model.fluxes) | set(base_model.derived)

        self._networks_and_inputs()
        self._hybridize()
        self._theta()
        self._network_plans()
        self._parameters()
        self._conditions_and_experiments()
        self._observables()
        self._measurements()
        self._check_formulas()
        self._priors()
        return self._assemble()

    # ------------------------------------------------------------------ networks
    def _networks_and_inputs(self) -> None:
        ctx = self.ctx
        self.net_ids = list(ctx.networks)
        self.input_refs: dict[str, Any] = {}
        for pid, ref in ctx.refs("inputs").items():
            if ctx.mapping[pid].valid:
                self.input_refs[pid] = ref
        # network input names used directly as ids (no mapping row)
        mapped_args = {(r.net, r.arg) for r in self.input_refs.values()}
        for net_id, network in ctx.networks.items():
            for k, name in enumerate(network.inputs):
                if (net_id, k) not in mapped_args and name not in self.input_refs:
                    from petab_sciml.problem.entities import EntityRef

                    self.input_refs[name] = EntityRef(f"{net_id}.inputs[{k}]", net_id,
                                                      "inputs", arg=k)
        self.output_refs = {pid: ref for pid, ref in ctx.refs("outputs").items()
                            if ctx.mapping[pid].valid}
        self.output_net = {pid: ref.net for pid, ref in self.output_refs.items()}
        self.hyb: dict[str, tuple[str, str]] = {}
        for table, row in self.rows("hybridization"):
            self.hyb[row["targetId"]] = (row["targetValue"], f"{table.file}:{row.line}")

    def _hybridize(self) -> None:
        overrides: dict[str, Any] = {}
        for tid, (value, where) in self.hyb.items():
            if tid in self.input_refs:
                continue
            target = self.aliases.get(tid, tid)
            if value.lower() == "array":
                self.fail(f"'array' can only be assigned to network inputs, not {tid!r}",
                          entry=where)
            overrides[target] = self.parse(value, where)
        self.model = self.base_model.override(overrides, context="hybridization")
        self.state_ids = tuple(self.model.state_ids)

    def _theta(self) -> None:
        model = self.model
        plain = self.problem.plain_parameters
        ids = list(model.constant_ids)
        values = dict(zip(model.constant_ids, model.constant_values()))
        states = set(model.state_ids)
        for pid, par in plain.items():
            target = self.aliases.get(pid, pid)
            if target in states:
                self.fail(f"parameter {pid!r} is a state of the model; set initial values "
                          "in the condition table", entry=f"parameter {pid}")
            if target not in values:
                ids.append(target)
            values[target] = _nominal(par)
        # network inputs assigned by conditions get a theta slot of their own
        for _, row in self.rows("condition"):
            tid = row["targetId"]
            if tid in self.input_refs and tid not in values:
                ids.append(tid)
                values[tid] = math.nan
        self.theta_ids = tuple(ids)
        self.theta_index = {s: i for i, s in enumerate(ids)}
        self.theta0 = np.array([values[s] for s in ids], np.float64)

    # ------------------------------------------------------------------ network plans
    def _network_plans(self) -> None:
        ctx = self.ctx
        arrays_in = ctx.arrays.inputs
        self.array_inputs: dict[tuple[str, int], str] = {}
        plans: dict[str, NetworkPlan] = {}
        for net_id in self.net_ids:
            network = ctx.networks[net_id]
            entry = self.cfg.networks.get(net_id)
            pre = bool(entry.pre_initialization) if entry is not None else False
            per_arg: dict[int, list[tuple[str, Any]]] = {}
            for pid, ref in self.input_refs.items():
                if ref.net == net_id:
                    per_arg.setdefault(ref.arg, []).append((pid, ref))
            inputs: list[NetworkInput] = []
            exprs: list[sympy.Expr] = []
            for k in range(len(network.inputs)):
                items = per_arg.get(k, [])
                if not items:
                    self.fail(f"input argument {k} ({network.inputs[k]!r}) of network "
                              f"{net_id!r} is assigned nowhere", entry=f"network {net_id}")
                whole = [(pid, ref) for pid, ref in items if ref.index is None]
                if whole:
                    pid, ref = whole[0]
                    if len(items) > 1:
                        self.fail(f"input argument {k} of network {net_id!r} is assigned "
                                  "both as a whole and by elements", entry=pid)
                    value = self.hyb.get(pid, (None, None))[0]
                    if (value is None or value.lower() == "array") and pid in arrays_in:
                        inputs.append(NetworkInput(k, "array", (), data=None))
                        self.array_inputs[(net_id, k)] = pid
                        continue
                    if value is not None and value.lower() == "array":
                        self.fail(f"{pid!r} is assigned 'array' but no array file holds "
                                  f"inputs/{pid}", entry=pid)
                    expr = self._input_expr(pid, value)
                    inputs.append(NetworkInput(k, "elements", (1,), (expr,), len(exprs)))
                    exprs.append(expr)
                    continue
                ndim = {len(ref.index) for _, ref in items}
                if len(ndim) != 1:
                    self.fail(f"elements of input argument {k} of network {net_id!r} are "
                              "indexed with different numbers of indices", entry=items[0][0])
                shape = tuple(max(ref.index[d] for _, ref in items) + 1
                              for d in range(ndim.pop()))
                cells: dict[tuple[int, ...], sympy.Expr] = {}
                for pid, ref in items:
                    value = self.hyb.get(pid, (None, None))[0]
                    if value is not None and value.lower() == "array":
                        self.fail(f"{pid!r} maps to elements of an input; 'array' assigns "
                                  "whole input arguments only", entry=pid)
                    cells[tuple(ref.index)] = self._input_expr(pid, value)
                if len(cells) != math.prod(shape):
                    self.fail(f"input argument {k} of network {net_id!r}: {len(cells)} of "
                              f"{math.prod(shape)} elements of shape {shape} are assigned",
                              entry=f"network {net_id}")
                flat = [cells[idx] for idx in np.ndindex(*shape)]
                inputs.append(NetworkInput(k, "elements", shape, tuple(flat), len(exprs)))
                exprs.extend(flat)
            outs = sorted(((pid, ref) for pid, ref in self.output_refs.items()
                           if ref.net == net_id), key=lambda item: (item[1].arg,
                                                                    item[1].index or ()))
            plans[net_id] = NetworkPlan(
                net_id, network, pre, inputs, tuple(pid for pid, _ in outs),
                tuple((ref.arg if ref.arg is not None else 0,
                       tuple(ref.index) if ref.index is not None else None)
                      for _, ref in outs), [], tuple(exprs))
        self.net_plans = plans

    def _input_expr(self, pid: str, value: str | None) -> sympy.Expr:
        if value is not None and value != "":
            return self.parse(value, f"hybridization: {pid}")
        if pid in self.theta_index:
            return sympy.Symbol(pid)
        self.fail(f"network input {pid!r} gets no value (hybridization, condition or "
                  "parameter table, array file)", entry=pid)
        raise AssertionError  # pragma: no cover

    # ------------------------------------------------------------------ parameters
    def _parameters(self) -> None:
        plain = self.problem.plain_parameters
        mech = [pid for pid, p in plain.items() if p.estimate]
        self.mech_ids = tuple(mech)
        self.mech_theta_index = np.array(
            [self.theta_index[self.aliases.get(pid, pid)] for pid in mech], np.int64)
        lower = [plain[p].lower if plain[p].lower is not None else -math.inf for p in mech]
        upper = [plain[p].upper if plain[p].upper is not None else math.inf for p in mech]
        self.mech_lower = np.array(lower, np.float64)
        self.mech_upper = np.array(upper, np.float64)
        self.mech_scale = tuple(plain[p].scale for p in mech)
        w0 = [_nominal(plain[p]) for p in mech]
        free = list(range(len(mech)))
        offset = len(mech)
        self.w_lower = list(lower)
        self.w_upper = list(upper)
        self.w_prior: list[Prior | None] = [plain[p].prior for p in mech]
        for net_id in self.net_ids:
            plan = self.net_plans[net_id]
            resolved = self.problem.parameters[net_id]
            infos = plan.network.parameter_arrays()
            values = resolved.values or {}
            for layer, arrays in infos.items():
                for array, info in arrays.items():
                    shape = tuple(info.shape)
                    slot = ArraySlot(layer, array, shape, offset, info.trainable)
                    plan.arrays.append(slot)
                    value = values.get(layer, {}).get(array)
                    if value is None:
                        value = np.zeros(shape)
                    w0.extend(np.asarray(value, np.float64).reshape(-1).tolist())
                    mask = np.asarray(resolved.trainable.get(layer, {}).get(
                        array, np.zeros(shape, bool)), bool).reshape(-1)
                    if not info.trainable:
                        mask = np.zeros_like(mask)
                    free.extend((offset + np.flatnonzero(mask)).tolist())
                    lo = np.broadcast_to(resolved.lower.get(layer, {}).get(array, -np.inf),
                                         shape).reshape(-1)
                    hi = np.broadcast_to(resolved.upper.get(layer, {}).get(array, np.inf),
                                         shape).reshape(-1)
                    pidx = np.broadcast_to(resolved.prior_index.get(layer, {}).get(array, -1),
                                           shape).reshape(-1)
                    self.w_lower.extend(lo.tolist())
                    self.w_upper.extend(hi.tolist())
                    self.w_prior.extend(None if i < 0 else resolved.priors[int(i)]
                                        for i in pidx)
                    offset += slot.size
        self.n_w = offset
        self.w0 = np.array(w0, np.float64)
        self.free_index = np.array(free, np.int64)

    # ------------------------------------------------------------------ conditions
    def _conditions_and_experiments(self) -> None:
        states = {s: i for i, s in enumerate(self.state_ids)}
        # all condition changes: conditionId -> [(kind, index, change index)]
        changes: dict[str, list[tuple[str, int, int]]] = {}
        exprs: list[sympy.Expr] = []
        self.first_period_state_free: set[int] = set()
        for table, row in self.rows("condition"):
            cid, tid, value = row["conditionId"], row["targetId"], row["targetValue"]
            where = f"{table.file}:{row.line}"
            target = self.aliases.get(tid, tid)
            if value == "":
                continue
            expr = self.parse(value, f"condition {cid}: {tid}")
            if target in states:
                kind, index = "x", states[target]
            elif target in self.theta_index:
                kind, index = "theta", self.theta_index[target]
            elif target in self.model.rules:
                self.fail(f"condition target {tid!r} is defined by an assignment rule or "
                          "the hybridization table and cannot be changed", entry=where)
            else:
                self.fail(f"condition target {tid!r} is not a state, parameter, compartment "
                          "or network input", entry=where)
            changes.setdefault(cid, []).append((kind, index, len(exprs)))
            exprs.append(expr)
        self.change_exprs = tuple(exprs)
        self.condition_changes = changes

        # experiments -> periods
        periods: dict[str, list[tuple[float, list[str]]]] = {}
        for table, row in self.rows("experiment"):
            eid = row["experimentId"]
            text = row["time"].strip().lower()
            time = float(text) if text else 0.0
            if time == math.inf:
                self.fail(f"experiment {eid!r}: a period cannot start at time inf (use "
                          "-inf for pre-equilibration)", entry=f"{table.file}:{row.line}")
            plist = periods.setdefault(eid, [])
            cids = [c.strip() for c in row["conditionId"].split(";") if c.strip()]
            for start, conds in plist:
                if start == time:
                    conds.extend(cids)
                    break
            else:
                plist.append((time, cids))
        self.periods_raw = {eid: sorted(p, key=lambda item: item[0])
                            for eid, p in periods.items()}

    # ------------------------------------------------------------------ observables
    def _observables(self) -> None:
        ids: list[str] = []
        obs_exprs: list[sympy.Expr] = []
        noise_exprs: list[sympy.Expr] = []
        self.obs_placeholders: list[list[str]] = []
        self.noise_placeholders: list[list[str]] = []
        self.obs_codes: list[tuple[int, int]] = []
        for table, row in self.rows("observable"):
            oid = row["observableId"]
            where = f"{table.file}:{row.line}"
            formula = self.parse(row["observableFormula"], f"observable {oid}")
            noise_text = row["noiseFormula"] or "1"
            noise = self.parse(noise_text, f"observable {oid} noiseFormula")
            op = _placeholders(row["observablePlaceholders"], formula, "observableParameter",
                               oid)
            np_ = _placeholders(row["noisePlaceholders"], noise, "noiseParameter", oid)
            formula = formula.xreplace({sympy.Symbol(n): sympy.Symbol(f"__op{k}")
                                        for k, n in enumerate(op)})
            noise = noise.xreplace({sympy.Symbol(n): sympy.Symbol(f"__np{k}")
                                    for k, n in enumerate(np_)})
            # a noise formula may refer to the observable itself
            noise = noise.xreplace({sympy.Symbol(oid): formula})
            self.obs_codes.append(_noise_model(row, where, self))
            ids.append(oid)
            obs_exprs.append(formula)
            noise_exprs.append(noise)
            self.obs_placeholders.append(op)
            self.noise_placeholders.append(np_)
        self.observable_ids = tuple(ids)
        self.obs_exprs = tuple(obs_exprs)
        self.noise_exprs = tuple(noise_exprs)
        self.n_obs_par = max((len(p) for p in self.obs_placeholders), default=0)
        self.n_noise_par = max((len(p) for p in self.noise_placeholders), default=0)

    # ------------------------------------------------------------------ measurements
    def _measurements(self) -> None:
        obs_index = {o: i for i, o in enumerate(self.observable_ids)}
        rows: list[dict[str, str]] = []
        records = []
        for table, row in self.rows("measurement"):
            where = f"{table.file}:{row.line}"
            oid = row["observableId"]
            if oid not in obs_index:
                self.fail(f"unknown observable {oid!r}", entry=where)
            t_text = row["time"].strip().lower()
            time = float(t_text)
            if time == -math.inf:
                self.fail("a measurement at time -inf", entry=where)
            eid = row["experimentId"]
            records.append((eid, time, oid, float(row["measurement"]), row, where))
            rows.append(dict(row.cells))
        # experiments that have measurements, in order of first appearance
        order: list[str] = []
        for eid, *_ in records:
            if eid not in order:
                order.append(eid)
        experiments: list[ExperimentPlan] = []
        exp_index: dict[str, int] = {}
        groups: list[tuple[str, ...]] = []
        group_index: dict[tuple[str, ...], int] = {}
        for eid in order:
            raw = self.periods_raw.get(eid)
            if raw is None:
                if eid and self.ctx.tables.get("experiment"):
                    self.fail(f"experiment {eid!r} is not in the experiment table",
                              entry="measurements")
                raw = [(0.0, [])]
            times = [t for e, t, *_ in records if e == eid]
            t_end = max(times)
            pre_eq = raw[0][0] == -math.inf
            if len(raw) > 2 and raw[1][0] == -math.inf:
                self.fail(f"experiment {eid!r} has several periods at time -inf",
                          entry="experiments")
            first = raw[1][0] if pre_eq and len(raw) > 1 else 0.0 if pre_eq else raw[0][0]
            if min(times) < first and not (pre_eq and len(raw) == 1):
                self.fail(f"experiment {eid!r} has measurements before its first period "
                          f"(t0 = {first})", entry="measurements")
            if pre_eq and len(raw) == 1 and any(math.isfinite(t) for t in times):
                self.fail(f"experiment {eid!r} has only a pre-equilibration period: its "
                          "measurements must be at time inf", entry="measurements")
            periods: list[PeriodPlan] = []
            for k, (start, conds) in enumerate(raw):
                end = raw[k + 1][0] if k + 1 < len(raw) else max(t_end, start)
                in_period = sorted({t for t in times
                                    if start <= t and (t < end or k + 1 == len(raw))})
                pre = k == 0 and pre_eq
                if pre:
                    start = first
                    end = math.inf
                    in_period = [math.inf] if len(raw) == 1 else []
                theta_changes, state_changes = [], []
                for cid in conds:
                    for kind, index, chg in self.condition_changes.get(cid, []):
                        (theta_changes if kind == "theta" else state_changes).append(
                            (index, chg))
                periods.append(PeriodPlan(float(start), float(end), tuple(conds),
                                          theta_changes, state_changes,
                                          np.array(in_period, np.float64),
                                          steady_state=end == math.inf,
                                          pre_equilibration=pre))
            key = tuple(sorted(raw[0][1]))
            if key not in group_index:
                group_index[key] = len(groups)
                groups.append(key)
            exp_index[eid] = len(experiments)
            experiments.append(ExperimentPlan(eid, group_index[key], periods))
        self.experiments = experiments
        self.groups_conditions = groups
        self.group_theta_changes = []
        self.group_t0 = np.zeros(len(groups))
        for g in range(len(groups)):
            first = next(e for e in experiments if e.group == g)
            self.group_theta_changes.append(list(first.periods[0].theta_changes))
            self.group_t0[g] = first.t0

        m = len(records)
        K, L = self.n_obs_par, self.n_noise_par
        exp_a = np.zeros(m, np.int64)
        per_a = np.zeros(m, np.int64)
        tix_a = np.zeros(m, np.int64)
        time_a = np.zeros(m, np.float64)
        obs_a = np.zeros(m, np.int64)
        val_a = np.zeros(m, np.float64)
        tr_a = np.zeros(m, np.int64)
        di_a = np.zeros(m, np.int64)
        opt = np.full((m, K), -1, np.int64)
        opv = np.full((m, K), np.nan)
        npt = np.full((m, L), -1, np.int64)
        npv = np.full((m, L), np.nan)
        for i, (eid, time, oid, value, row, where) in enumerate(records):
            e = exp_index[eid]
            exp = experiments[e]
            k = max(j for j, p in enumerate(exp.periods) if p.start <= time)
            if k + 1 < len(exp.periods) and time >= exp.periods[k + 1].start:
                k += 1
            if exp.periods[k].pre_equilibration and len(exp.periods) > 1:
                k = 1   # the pre-equilibration period starts where period 1 does
            times = exp.periods[k].times
            exp_a[i], per_a[i] = e, k
            tix_a[i] = int(np.searchsorted(times, time))
            time_a[i], val_a[i] = time, value
            o = obs_index[oid]
            obs_a[i] = o
            tr_a[i], di_a[i] = self.obs_codes[o]
            self._overrides(row["observableParameters"], self.obs_placeholders[o], opt[i],
                            opv[i], "observableParameters", where)
            self._overrides(row["noiseParameters"], self.noise_placeholders[o], npt[i],
                            npv[i], "noiseParameters", where)
        self.measurements = MeasurementPlan(exp_a, per_a, tix_a, time_a, obs_a, val_a, tr_a,
                                            di_a, opt, opv, npt, npv, rows)

    def _overrides(self, text: str, names: list[str], theta_out: np.ndarray,
                   value_out: np.ndarray, column: str, where: str) -> None:
        parts = [p.strip() for p in text.split(";")] if text.strip() else []
        if len(parts) == 1 and len(names) > 1:
            parts = parts * len(names)
        if len(parts) != len(names):
            self.fail(f"{column}: {len(parts)} value(s) for {len(names)} placeholder(s) "
                      f"({', '.join(names) or 'none'})", entry=where)
        for k, part in enumerate(parts):
            try:
                value_out[k] = float(part)
                continue
            except ValueError:
                pass
            target = self.aliases.get(part, part)
            if target not in self.theta_index:
                self.fail(f"{column}: {part!r} is neither a number nor a parameter id",
                          entry=where)
            theta_out[k] = self.theta_index[target]

    # ------------------------------------------------------------------ checks
    def _check_formulas(self) -> None:
        """Which simulation networks run where; every formula's symbols are known."""
        from petab_sciml.expressions import TIME

        plans = self.net_plans
        out_net = self.output_net
        states = set(self.state_ids)

        def nets_of(exprs: Iterable[sympy.Expr]) -> set[str]:
            return {out_net[s.name] for e in exprs for s in e.free_symbols
                    if s.name in out_net}

        def closure(nets: set[str]) -> set[str]:
            todo, seen = list(nets), set()
            while todo:
                n = todo.pop()
                if n in seen:
                    continue
                seen.add(n)
                todo.extend(nets_of(plans[n].input_exprs) - seen)
            return seen

        # order networks: pre-initialization first, each after the networks it reads
        deps = {n: nets_of(plans[n].input_exprs) for n in plans}
        ordered: list[str] = []
        pending = sorted(plans, key=lambda n: (not plans[n].pre_initialization,
                                               self.net_ids.index(n)))
        while pending:
            for n in pending:
                if deps[n] <= set(ordered):
                    ordered.append(n)
                    pending.remove(n)
                    break
            else:
                self.fail("networks read each other's outputs in a cycle: "
                          + ", ".join(pending))
        for n in ordered:
            plan = plans[n]
            if plan.pre_initialization:
                bad = {plans[d].id for d in deps[n] if not plans[d].pre_initialization}
                dyn = {s.name for e in plan.input_exprs for s in e.free_symbols} & \
                    (states | {TIME.name})
                if bad or dyn:
                    self.fail(f"pre-initialization network {n!r} has inputs that depend on "
                              f"{', '.join(sorted(bad | dyn))}", entry=f"network {n}")
        self.net_order = ordered
        sim = {n for n in plans if not plans[n].pre_initialization}
        rhs = closure(nets_of(self.model.rhs())) & sim
        obs = closure(nets_of(self.obs_exprs + self.noise_exprs)) & sim
        for n in rhs:
            plans[n].in_rhs = True
        for n in obs:
            plans[n].in_observables = True
        if nets_of(self.model.initial_values()) & sim:
            self.fail("initial values depend on a simulation network's outputs; use a "
                      "pre-initialization network")
        if nets_of(self.change_exprs) & sim:
            self.fail("condition values may not use simulation networks' outputs")
        # first-period parameter changes are evaluated before the initial state and the
        # pre-initialization networks exist
        first = {c for e in self.experiments for c in e.periods[0].conditions}
        for cid, items in self.condition_changes.items():
            if cid not in first:
                continue
            for kind, _, k in items:
                used = {s.name for s in self.change_exprs[k].free_symbols}
                if kind == "theta" and used & (states | set(out_net)):
                    self.fail(f"condition {cid!r} starts an experiment and sets a parameter "
                              "from a state or network output value, which is not "
                              "supported")

    # ------------------------------------------------------------------ priors
    def _priors(self) -> None:
        from petab_sciml.simulation.likelihood import on_parameter_scale, truncation_log_mass

        free = set(self.free_index.tolist())
        scale_of = dict(zip(range(len(self.mech_ids)), self.mech_scale))
        by_key: dict[tuple, list[int]] = {}
        has = any(p is not None for p in self.w_prior)
        const = 0.0
        for i in sorted(free):
            prior = self.w_prior[i]
            lo, hi = self.w_lower[i], self.w_upper[i]
            if prior is None:
                if has and math.isfinite(lo) and math.isfinite(hi) and hi > lo:
                    const -= math.log(hi - lo)   # implicit uniform(lower, upper)
                continue
            scale = scale_of.get(i, "lin") if on_parameter_scale(prior) else "lin"
            by_key.setdefault((prior, lo, hi, scale), []).append(i)
        priors = []
        for (prior, lo, hi, scale), idx in by_key.items():
            const -= len(idx) * truncation_log_mass(prior, *_scaled((lo, hi), scale))
            priors.append((prior, np.array(idx, np.int64), lo, hi, scale))
        self.priors = priors
        self.logprior_const = const
        self.has_priors = has

    # ------------------------------------------------------------------ assemble
    def _assemble(self) -> SimulationPlan:
        plans = [self.net_plans[n] for n in self.net_order]
        for plan in plans:
            for i, inp in enumerate(plan.inputs):
                if inp.kind == "array":
                    pid = self.array_inputs[(plan.id, inp.arg)]
                    data = self._array_data(pid)
                    plan.inputs[i] = NetworkInput(inp.arg, "array", tuple(data.shape[1:]),
                                                  data=data)
        plan = SimulationPlan(
            source=self.cfg.path,
            fingerprint=_fingerprint(self.cfg),
            state_ids=self.state_ids,
            theta_ids=self.theta_ids,
            theta0=self.theta0,
            mech_ids=self.mech_ids,
            mech_theta_index=self.mech_theta_index,
            mech_lower=self.mech_lower,
            mech_upper=self.mech_upper,
            networks=plans,
            n_w=self.n_w,
            w0=self.w0,
            free_index=self.free_index,
            rhs_exprs=tuple(self.model.rhs()),
            x0_exprs=tuple(self.model.initial_values()),
            change_exprs=tuple(self.model.expand(e) for e in self.change_exprs),
            groups_conditions=self.groups_conditions,
            group_theta_changes=self.group_theta_changes,
            group_t0=self.group_t0,
            experiments=self.experiments,
            observable_ids=self.observable_ids,
            obs_exprs=tuple(self.model.expand(e) for e in self.obs_exprs),
            noise_exprs=tuple(self.model.expand(e) for e in self.noise_exprs),
            n_obs_par=self.n_obs_par,
            n_noise_par=self.n_noise_par,
            measurements=self.measurements,
            priors=self.priors,
            logprior_const=self.logprior_const,
            has_priors=self.has_priors,
            model=self.model,
            mech_scale=self.mech_scale,
            w_lower=np.asarray(self.w_lower, np.float64),
            w_upper=np.asarray(self.w_upper, np.float64),
        )
        for net in plan.networks:
            net.input_exprs = tuple(self.model.expand(e) for e in net.input_exprs)
        return plan

    def _array_data(self, pid: str) -> np.ndarray:
        from petab_sciml.arrays import condition_ids

        keyed = self.ctx.arrays.inputs[pid]
        out = []
        for conds in self.groups_conditions:
            found = None
            for key, lazy in keyed.items():
                ids = condition_ids(key)
                if ids is None or set(ids) & set(conds):
                    if found is not None:
                        self.fail(f"array input {pid!r}: several datasets apply to "
                                  f"condition(s) {', '.join(conds) or '<none>'}",
                                  entry=f"inputs/{pid}")
                    found = lazy
            if found is None:
                self.fail(f"array input {pid!r} has no data for initial condition(s) "
                          f"{', '.join(conds) or '<none>'}", entry=f"inputs/{pid}")
            out.append(np.asarray(found, np.float64))
        shapes = {a.shape for a in out}
        if len(shapes) != 1:
            self.fail(f"array input {pid!r} has different shapes per condition: {shapes}",
                      entry=f"inputs/{pid}")
        return np.stack(out)


# --------------------------------------------------------------------------- helpers
def _nominal(par: Any) -> float:
    if par.nominal is not None:
        return float(par.nominal)
    lo, hi = par.lower, par.upper
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return 0.5 * (lo + hi)
    return 0.0


def _placeholders(column: str, expr: sympy.Expr, prefix: str, oid: str) -> list[str]:
    if column.strip():
        return [p.strip() for p in column.split(";") if p.strip()]
    import re

    pattern = re.compile(rf"^{prefix}(\d+)_{re.escape(oid)}$")
    found = []
    for s in expr.free_symbols:
        m = pattern.match(s.name)
        if m:
            found.append((int(m.group(1)), s.name))
    return [name for _, name in sorted(found)]


def _noise_model(row: Any, where: str, builder: _Builder) -> tuple[int, int]:
    transform = (row["observableTransformation"] or "lin").strip().lower()
    dist = (row["noiseDistribution"] or "normal").strip().lower()
    if dist in ("log-normal", "lognormal", "log-laplace", "loglaplace"):
        if transform not in ("lin", "log"):
            builder.fail(f"noiseDistribution {dist!r} with observableTransformation "
                         f"{transform!r}", entry=where)
        transform, dist = "log", dist.replace("log-", "").replace("log", "")
    if dist in ("log10-normal", "log10-laplace"):
        transform, dist = "log10", dist.split("-")[1]
    if transform not in TRANSFORMS:
        builder.fail(f"observableTransformation {transform!r} is not supported (known: "
                     f"{', '.join(TRANSFORMS)})", entry=where)
    if dist not in DISTRIBUTIONS:
        builder.fail(f"noiseDistribution {dist!r} is not supported (known: normal, laplace, "
                     "log-normal, log-laplace)", entry=where)
    return TRANSFORMS.index(transform), DISTRIBUTIONS.index(dist)


def _fingerprint(cfg: Any) -> str:
    """Hash of everything that shapes the computation: the problem YAML and every file
    or folder it names (tables, model, networks, array files), each under the name the
    problem gives it.  Folders (an NNEF model) contribute every file below them by
    relative path and content, so an edit to any of them changes the hash."""
    import os
    import stat

    def hash_file(path: Path) -> None:
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                h.update(b"<special>\0")
                return
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            h.update(digest.digest())
        except OSError:
            h.update(b"<unreadable>\0")

    def hash_path(path: Path) -> None:
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError:
            h.update(b"<missing>\0")
            return
        if not is_dir:
            hash_file(path)
            return
        h.update(b"<folder>\0")
        for root, dirs, files in os.walk(path):   # symlinked folders are not entered
            dirs.sort()
            for name in sorted(files):
                file = Path(root) / name
                h.update(file.relative_to(path).as_posix().encode() + b"\0")
                hash_file(file)

    h = hashlib.sha256()
    entries: list[tuple[str, Path]] = [("problem", cfg.path)]
    for kind, names in cfg.files.items():
        entries.extend((f"{kind}:{n}", cfg.resolve(n)) for n in names)
    entries.extend((f"model:{e['location']}", cfg.resolve(e["location"]))
                   for e in cfg.model_files.values())
    entries.extend((f"hybridization:{n}", cfg.resolve(n)) for n in cfg.hybridization_files)
    entries.extend((f"arrays:{n}", cfg.resolve(n)) for n in cfg.array_files)
    entries.extend((f"network:{k}:{e.location}", cfg.resolve(e.location))
                   for k, e in cfg.networks.items() if e.location)
    for label, path in entries:
        h.update(label.encode() + b"\0")
        hash_path(path)
    return h.hexdigest()

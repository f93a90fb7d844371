"""The simulation plan: a loaded PEtab SciML problem as plain, backend-agnostic data.

Built **once** at load (:func:`petab_sciml.simulation.builder.build_plan`); the JAX and
PyTorch executors only compile what is here.  Nothing in the plan is re-parsed per
objective evaluation.

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
import math
from collections.abc import Mapping
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
]

TRANSFORMS = ("lin", "log", "log10")
DISTRIBUTIONS = ("normal", "laplace")


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
    events: tuple[Any, ...] = ()
    """The SBML events (:class:`petab_sciml.simulation.events.EventPlan`), in execution
    order for simultaneous ones."""

    @property
    def has_state_events(self) -> bool:
        """Some event's trigger depends on states: where it fires inside a period is
        found by root finding (:mod:`petab_sciml.simulation.events`)."""
        return any(e.time is None for e in self.events)

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


"""``build_plan``: a problem's data -> its :class:`~petab_sciml.simulation.plan.SimulationPlan`.

The build runs once per load in named steps (:meth:`PlanBuilder.build`), each reading
what the steps before it found.  The steps that concern the networks (their plans, the
order they run in, where they run) live in :mod:`.builder_networks`; those that read the
condition, experiment, observable and measurement tables in :mod:`.builder_tables`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy

from petab_sciml.problem.data import ProblemData
from petab_sciml.problem.resolve import Prior
from petab_sciml.simulation.builder_networks import check_network_roles, network_plans
from petab_sciml.simulation.builder_tables import (
    condition_changes,
    experiment_periods,
    experiment_plans,
    group_changes,
    measurement_plan,
    measurement_records,
    observable_table,
)
from petab_sciml.simulation.events import event_plans
from petab_sciml.simulation.fingerprint import problem_fingerprint
from petab_sciml.simulation.plan import (
    ArraySlot,
    NetworkInput,
    SimulationError,
    SimulationPlan,
)
from petab_sciml.simulation.scales import on_scale

__all__ = ["build_plan"]


def build_plan(data: ProblemData) -> SimulationPlan:
    """The simulation plan of a problem's data (``problem.data`` of a loaded problem,
    :func:`petab_sciml.problem.load_problem`).

    Raises :class:`~petab_sciml.sbml.UnsupportedSbmlError` (naming the SBML element) for
    models outside the supported subset and :class:`SimulationError` for PEtab features
    the simulators do not support; both at load, never during a simulation.
    """
    return PlanBuilder(data).build()


class PlanBuilder:
    """The state of one build: the problem's data and what each step found."""

    def __init__(self, data: ProblemData):
        self.data = data
        self.ctx = data.context
        self.cfg = data.config

    # ------------------------------------------------------------------ helpers
    def rows(self, kind: str) -> list[tuple[Any, Any]]:
        """``(table, row)`` of every row of the tables of ``kind``, in file order."""
        return list(self.ctx.rows(kind))

    def fail(self, message: str, *, file: Any = None, entry: str | None = None):
        raise SimulationError(message, file=file, entry=entry)

    def parse(self, text: Any, where: str) -> sympy.Expr:
        """A PEtab formula with model aliases resolved and ``t`` as time (unless the
        model has an entity ``t``).  A boolean formula (``true``, ``a < b``) is a
        number, 1 or 0, as PEtab reads booleans used as numbers."""
        from petab_sciml.expressions import TIME, bool_to_number, parse

        expr = bool_to_number(parse(text, context=where))
        subs = {}
        for s in expr.free_symbols:
            if s.name == "t" and "t" not in self.known_names:
                subs[s] = TIME
            elif s.name in self.aliases:
                subs[s] = sympy.Symbol(self.aliases[s.name])
        return expr.xreplace(subs) if subs else expr

    # ------------------------------------------------------------------ main
    def build(self) -> SimulationPlan:
        self._load_model()
        self._networks_and_inputs()
        self._hybridize()
        self._theta()
        self.net_plans, self.array_inputs = network_plans(self)
        self._parameters()
        self.change_exprs, self.condition_changes = condition_changes(self)
        self.periods_raw = experiment_periods(self)
        self.observables = observable_table(self)
        records, rows = measurement_records(self)
        experiments, exp_index, self.groups_conditions = experiment_plans(self, records)
        self.experiments = experiments
        self.group_theta_changes, self.group_t0 = group_changes(experiments,
                                                               len(self.groups_conditions))
        self.measurements = measurement_plan(self, records, rows, exp_index)
        self.net_order = check_network_roles(self)
        self._priors()
        return self._assemble()

    def _load_model(self) -> None:
        """The SBML model, and the aliases of model entities (petabEntityId ->
        modelEntityId) that formulas may use."""
        from petab_sciml.sbml import load_sbml

        cfg = self.cfg
        if not cfg.model_files:
            self.fail("the problem has no model file", file=cfg.path)
        model_id, entry = next(iter(cfg.model_files.items()))
        language = str(entry.get("language", "sbml")).lower()
        if language != "sbml":
            self.fail(f"model language {language!r} cannot be simulated (only sbml)",
                      file=cfg.path, entry=f"model_files.{model_id}")
        base_model = load_sbml(cfg.resolve(entry["location"]))
        self.base_model = base_model
        self.aliases = {m.petab_id: m.model_id for m in self.ctx.mapping.values()
                        if m.ref is None and m.valid and m.model_id != m.petab_id}
        self.known_names = set(base_model.state_ids) | set(base_model.constant_ids) | \
            set(base_model.rules) | set(base_model.fluxes) | set(base_model.derived)

    # ------------------------------------------------------------------ networks
    def _networks_and_inputs(self) -> None:
        """Mapped network inputs and outputs, and the hybridization table's targets."""
        from petab_sciml.problem.entities import EntityRef

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
                    self.input_refs[name] = EntityRef(f"{net_id}.inputs[{k}]", net_id,
                                                      "inputs", arg=k)
        self.output_refs = {pid: ref for pid, ref in ctx.refs("outputs").items()
                            if ctx.mapping[pid].valid}
        self.output_net = {pid: ref.net for pid, ref in self.output_refs.items()}
        self.hyb: dict[str, tuple[str, str]] = {}
        for table, row in self.rows("hybridization"):
            self.hyb[row["targetId"]] = (row["targetValue"], f"{table.file}:{row.line}")

    def _hybridize(self) -> None:
        """The model with the hybridization table's assignments to model entities."""
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
        """``theta``: the model's constants, every plain parameter, and network inputs
        that conditions assign (NaN until a condition sets them)."""
        model = self.model
        plain = self.data.plain_parameters
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
        for _, row in self.rows("condition"):
            tid = row["targetId"]
            if tid in self.input_refs and tid not in values:
                ids.append(tid)
                values[tid] = math.nan
        self.theta_ids = tuple(ids)
        self.theta_index = {s: i for i, s in enumerate(ids)}
        self.theta0 = np.array([values[s] for s in ids], np.float64)

    # ------------------------------------------------------------------ parameters
    def _parameters(self) -> None:
        """``w``: the estimated mechanistic parameters, then every network array (slots
        appended to each network plan), with nominal values, bounds, priors and the
        estimated entries.  Network arrays are handled whole (numpy), never entry by
        entry: a network may have millions of parameters."""
        plain = self.data.plain_parameters
        mech = [pid for pid, p in plain.items() if p.estimate]
        self.mech_ids = tuple(mech)
        self.mech_theta_index = np.array(
            [self.theta_index[self.aliases.get(pid, pid)] for pid in mech], np.int64)
        lower = [plain[p].lower if plain[p].lower is not None else -math.inf for p in mech]
        upper = [plain[p].upper if plain[p].upper is not None else math.inf for p in mech]
        self.mech_lower = np.array(lower, np.float64)
        self.mech_upper = np.array(upper, np.float64)
        self.mech_scale = tuple(plain[p].scale for p in mech)
        # One chunk per array (the mechanistic parameters first): concatenated once.
        self.prior_table: list[Prior] = []
        mech_priors = [self._prior_number(plain[p].prior) for p in mech]
        chunks = _WChunks(np.array([_nominal(plain[p]) for p in mech], np.float64),
                          np.arange(len(mech), dtype=np.int64), self.mech_lower,
                          self.mech_upper, np.array(mech_priors, np.int64))
        offset = len(mech)
        for net_id in self.net_ids:
            offset = self._network_arrays(net_id, offset, chunks)
        self.n_w = offset
        self.w0 = np.concatenate(chunks.w0)
        self.free_index = np.concatenate(chunks.free)
        self.w_lower = np.concatenate(chunks.lower)
        self.w_upper = np.concatenate(chunks.upper)
        self.w_prior_index = np.concatenate(chunks.prior)

    def _prior_number(self, prior: Prior | None) -> int:
        """``prior``'s index in :attr:`prior_table` (appended if new), -1 for None."""
        if prior is None:
            return -1
        self.prior_table.append(prior)
        return len(self.prior_table) - 1

    def _network_arrays(self, net_id: str, offset: int, chunks: _WChunks) -> int:
        """Append network ``net_id``'s arrays to ``w`` from ``offset`` on (nominal values,
        estimated entries, bounds and prior numbers to ``chunks``); returns the offset
        after them."""
        plan = self.net_plans[net_id]
        resolved = self.data.parameters[net_id]
        values = resolved.values or {}
        priors = [self._prior_number(prior) for prior in resolved.priors]
        prior_number = np.array(priors + [-1], np.int64)   # index -1: no prior
        for layer, arrays in plan.network.parameter_arrays().items():
            for array, info in arrays.items():
                shape = tuple(info.shape)
                slot = ArraySlot(layer, array, shape, offset, info.trainable)
                plan.arrays.append(slot)
                value = values.get(layer, {}).get(array)
                if value is None:
                    value = np.zeros(shape)
                chunks.w0.append(np.asarray(value, np.float64).reshape(-1))
                mask = np.asarray(resolved.trainable.get(layer, {}).get(
                    array, np.zeros(shape, bool)), bool).reshape(-1)
                if not info.trainable:
                    mask = np.zeros_like(mask)
                chunks.free.append(offset + np.flatnonzero(mask).astype(np.int64))
                chunks.lower.append(np.broadcast_to(np.asarray(resolved.lower.get(
                    layer, {}).get(array, -np.inf), np.float64), shape).reshape(-1))
                chunks.upper.append(np.broadcast_to(np.asarray(resolved.upper.get(
                    layer, {}).get(array, np.inf), np.float64), shape).reshape(-1))
                pidx = np.broadcast_to(resolved.prior_index.get(layer, {}).get(array, -1),
                                       shape).reshape(-1)
                chunks.prior.append(prior_number[np.asarray(pidx, np.int64)])
                offset += slot.size
        return offset

    # ------------------------------------------------------------------ priors
    def _priors(self) -> None:
        """Priors grouped by (prior, bounds, scale) over the estimated entries, and the
        constant part of the log-prior.  Only entries with a prior (or, where any entry
        has one, the implicit uniform of a bounded entry without) are visited one by
        one, in index order (the constant is summed in that order)."""
        from petab_sciml.simulation.likelihood import on_parameter_scale, truncation_log_mass

        free = self.free_index
        number = self.w_prior_index[free]
        has = bool((self.w_prior_index >= 0).any())
        lo_all, hi_all = self.w_lower[free], self.w_upper[free]
        if has:
            visit = np.ones(len(free), bool)
        else:
            visit = number >= 0
        by_key: dict[tuple, list[int]] = {}
        const = 0.0
        n_mech = len(self.mech_ids)
        for k in np.flatnonzero(visit).tolist():
            i, lo, hi = int(free[k]), float(lo_all[k]), float(hi_all[k])
            if number[k] < 0:
                if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
                    const -= math.log(hi - lo)   # implicit uniform(lower, upper)
                continue
            prior = self.prior_table[number[k]]
            scale = (self.mech_scale[i] if i < n_mech and on_parameter_scale(prior)
                     else "lin")
            by_key.setdefault((prior, lo, hi, scale), []).append(i)
        priors = []
        for (prior, lo, hi, scale), idx in by_key.items():
            const -= len(idx) * truncation_log_mass(prior, *on_scale((lo, hi), scale))
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
        obs = self.observables
        plan = SimulationPlan(
            source=self.cfg.path,
            fingerprint=problem_fingerprint(self.cfg),
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
            observable_ids=obs.ids,
            obs_exprs=tuple(self.model.expand(e) for e in obs.obs_exprs),
            noise_exprs=tuple(self.model.expand(e) for e in obs.noise_exprs),
            n_obs_par=obs.n_obs_par,
            n_noise_par=obs.n_noise_par,
            measurements=self.measurements,
            priors=self.priors,
            logprior_const=self.logprior_const,
            has_priors=self.has_priors,
            model=self.model,
            mech_scale=self.mech_scale,
            w_lower=self.w_lower,
            w_upper=self.w_upper,
            events=event_plans(self.model, self.state_ids, self.theta_ids, self.fail),
        )
        for net in plan.networks:
            net.input_exprs = tuple(self.model.expand(e) for e in net.input_exprs)
        return plan

    def _array_data(self, pid: str) -> np.ndarray:
        """Array input ``pid`` per initial-condition group: ``(G, *shape)``."""
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


def _nominal(par: Any) -> float:
    """A plain parameter's nominal value; without one, the middle of finite bounds, else 0."""
    if par.nominal is not None:
        return float(par.nominal)
    lo, hi = par.lower, par.upper
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return 0.5 * (lo + hi)
    return 0.0



class _WChunks:
    """The parameter vector ``w`` being built, one numpy chunk per array: nominal
    values, indices of estimated entries, bounds and prior numbers (-1: none)."""

    def __init__(self, w0: np.ndarray, free: np.ndarray, lower: np.ndarray,
                 upper: np.ndarray, prior: np.ndarray) -> None:
        self.w0, self.free, self.lower, self.upper, self.prior = (
            [w0], [free], [lower], [upper], [prior])

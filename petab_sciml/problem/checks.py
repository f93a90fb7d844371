"""Cross-table checks: hybridization, conditions, experiments, measurements,
observables, network inputs/outputs and array inputs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from petab_sciml.problem.context import ProblemContext
from petab_sciml.problem.expressions import CONSTANTS, free_symbols
from petab_sciml.problem.noise_checks import check_noise_values
from petab_sciml.problem.parameters import ParameterTables
from petab_sciml.problem.shape_checks import check_network_shapes
from petab_sciml.problem.tables import ID_RE, parse_float

ARRAY = "array"
TIME = {"time", "t"}


@dataclass
class Symbols:
    """Who is who: ids by role, built once."""

    model: set[str]
    species: set[str]
    model_parameters: set[str]
    parameters: set[str]
    nn_inputs: dict[str, str]
    """input id -> network id (mapped ids and input names of loaded networks)."""
    nn_outputs: dict[str, str]
    nn_parameters: set[str]
    observables: set[str] = field(default_factory=set)
    conditions: set[str] = field(default_factory=set)
    aliases: set[str] = field(default_factory=set)
    """PEtab ids of the mapping table (aliases of model or network entities)."""

    def known(self) -> set[str]:
        return (self.model | self.parameters | set(self.nn_inputs) | set(self.nn_outputs)
                | self.observables | self.aliases | TIME | CONSTANTS)


def build_symbols(ctx: ProblemContext, params: ParameterTables) -> Symbols:
    model = ctx.model
    nn_inputs = {pid: ref.net for pid, ref in ctx.refs("inputs").items()}
    for net_id, network in ctx.networks.items():
        for name in network.inputs:
            nn_inputs.setdefault(name, net_id)
    sym = Symbols(
        model=model.entities if model else set(),
        species=model.species if model else set(),
        model_parameters=model.parameters if model else set(),
        parameters=set(params.all_ids),
        nn_inputs=nn_inputs,
        nn_outputs={pid: ref.net for pid, ref in ctx.refs("outputs").items()},
        nn_parameters=set(ctx.refs("parameters")),
    )
    sym.observables = {row["observableId"] for _, row in ctx.rows("observable")}
    sym.conditions = {row["conditionId"] for _, row in ctx.rows("condition")}
    sym.aliases = {pid for pid, m in ctx.mapping.items() if m.valid}
    return sym


def run_checks(ctx: ProblemContext, params: ParameterTables) -> Symbols:
    sym = build_symbols(ctx, params)
    initial, all_conditions = check_experiments(ctx, sym)
    hyb = check_hybridization(ctx, params, sym)
    cond_targets = check_conditions(ctx, sym, hyb, initial)
    check_array_inputs(ctx, sym, hyb, initial, all_conditions)
    check_inputs_assigned(ctx, params, sym, hyb, cond_targets)
    check_outputs_used(ctx, sym, hyb)
    check_observables(ctx, sym)
    check_expressions(ctx)
    check_measurements(ctx)
    check_noise_values(ctx)
    check_network_ids(ctx, sym, hyb, cond_targets)
    check_network_shapes(ctx)
    return sym


# ---------------------------------------------------------------------- experiments
def check_experiments(ctx: ProblemContext, sym: Symbols) -> tuple[set[str], set[str]]:
    """Return (initial condition ids, all used condition ids); '' stands for none."""
    defined = set(sym.conditions)
    for keyed in ctx.arrays.inputs.values():
        for key in keyed:
            if key not in ("0", "data"):
                defined.update(p.strip() for p in key.split(";"))
    first: dict[str, tuple[float, list[str]]] = {}
    used: set[str] = set()
    for table, row in ctx.rows("experiment"):
        eid, cid = row["experimentId"], row["conditionId"]
        time = parse_float(row["time"])
        if time is None or math.isnan(time):
            ctx.issues.add("EXPERIMENT_TIME_INVALID", f"time must be a number (or -inf), got "
                           f"{row['time']!r}", file=table.file, row=row.line, column="time")
            continue
        if eid and not ID_RE.match(eid):
            ctx.issues.add("TABLE_ID_INVALID", f"experimentId {eid!r} is not a valid PEtab id",
                           file=table.file, row=row.line, column="experimentId")
        if cid and cid not in defined:
            ctx.issues.add("EXPERIMENT_CONDITION_UNKNOWN", f"condition {cid!r} is not defined "
                           "in a condition table (nor as an array-input condition)",
                           file=table.file, row=row.line, column="conditionId")
        used.add(cid)
        best = first.get(eid)
        if best is None or time < best[0]:
            first[eid] = (time, [cid])
        elif time == best[0]:
            best[1].append(cid)
    initial = {c for _, cids in first.values() for c in cids}
    return initial, used


# ---------------------------------------------------------------------- hybridization
@dataclass
class Hybridization:
    targets: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    """target id -> (value, file, line)"""


def check_hybridization(ctx: ProblemContext, params: ParameterTables,
                        sym: Symbols) -> Hybridization:
    hyb = Hybridization()
    issues = ctx.issues
    known = sym.known()
    input_refs = ctx.refs("inputs")
    for table, row in ctx.rows("hybridization"):
        f, line = table.file, row.line
        tid, value = row["targetId"], row["targetValue"]
        if tid in hyb.targets:
            issues.add("HYB_TARGET_DUPLICATE", f"{tid!r} is already assigned (line "
                       f"{hyb.targets[tid][2]} of {hyb.targets[tid][1]})", file=f, row=line,
                       column="targetId")
            continue
        hyb.targets[tid] = (value, f, line)
        if not value:
            issues.add("HYB_VALUE_MISSING", f"no targetValue for {tid!r}", file=f, row=line,
                       column="targetValue")
        if tid in sym.nn_inputs:
            _hyb_input(ctx, sym, tid, value, input_refs.get(tid), known, f, line)
            continue
        if tid in sym.nn_outputs or tid in sym.nn_parameters:
            what = "output" if tid in sym.nn_outputs else "parameter"
            issues.add("HYB_TARGET_INVALID", f"{tid!r} is a network {what}; network {what}s "
                       "cannot be hybridization targets", file=f, row=line, column="targetId")
            continue
        if tid not in sym.model:
            mapped = ctx.mapping.get(tid)
            if mapped is not None and mapped.ref is None and mapped.model_id in sym.model:
                pass  # an alias of a model entity through the mapping table
            else:
                issues.add("HYB_TARGET_UNKNOWN", f"{tid!r} is neither a network input nor a "
                           "model entity", file=f, row=line, column="targetId")
                continue
        if tid in params.estimated:
            issues.add("HYB_TARGET_ESTIMATED", f"{tid!r} is estimated in the parameter table; "
                       "hybridization targets must be non-estimated", file=f, row=line,
                       column="targetId")
        if value:
            _hyb_model_target(ctx, sym, tid, value, known, f, line)
    return hyb


def _hyb_input(ctx, sym, tid, value, ref, known, f, line) -> None:
    issues = ctx.issues
    net = sym.nn_inputs[tid]
    pre = ctx.hybridization_of(net)
    if value.lower() == ARRAY:
        if ref is not None and ref.index is not None:
            issues.add("HYB_VALUE_INVALID", f"{tid!r} maps to elements of an input "
                       f"({ref.text}); 'array' assigns whole input arguments only", file=f,
                       row=line, column="targetValue")
        if tid not in ctx.arrays.inputs:
            issues.add("HYB_ARRAY_INPUT_MISSING", f"{tid!r} is assigned 'array' but no array "
                       f"file has inputs/{tid}", file=f, row=line, column="targetValue")
        return
    if not value:
        return
    symbols = free_symbols(value)
    _unknown_symbols(ctx, symbols, known, f, line)
    bad_nn = symbols & sym.nn_parameters
    if bad_nn:
        issues.add("NN_PARAMETER_REFERENCED_OUTSIDE", f"network parameter id(s) "
                   f"{', '.join(sorted(bad_nn))} may only be used in the parameter table",
                   file=f, row=line, column="targetValue")
    if pre:
        dynamic = symbols & (sym.species | TIME)
        if dynamic:
            issues.add("HYB_VALUE_INVALID", f"network {net!r} is evaluated before simulation "
                       f"(pre_initialization), but the input {tid!r} depends on "
                       f"{', '.join(sorted(dynamic))} (species/time)", file=f, row=line,
                       column="targetValue")


def _unknown_symbols(ctx, symbols, known, f, line, code="HYB_VALUE_UNKNOWN_SYMBOL",
                     column="targetValue") -> None:
    unknown = sorted(s for s in symbols if s not in known and s.lower() != ARRAY)
    if unknown:
        ctx.issues.add(code, f"unknown symbol(s) {', '.join(unknown)}", file=f, row=line,
                       column=column)


def _hyb_model_target(ctx, sym, tid, value, known, f, line) -> None:
    issues = ctx.issues
    if value.lower() == ARRAY:
        issues.add("HYB_VALUE_INVALID", f"'array' can only be assigned to network inputs, "
                   f"not to {tid!r}", file=f, row=line, column="targetValue")
        return
    symbols = free_symbols(value)
    _unknown_symbols(ctx, symbols, known, f, line)
    bad_nn = symbols & sym.nn_parameters
    if bad_nn:
        issues.add("NN_PARAMETER_REFERENCED_OUTSIDE", f"network parameter id(s) "
                   f"{', '.join(sorted(bad_nn))} may only be used in the parameter table",
                   file=f, row=line, column="targetValue")
    outputs = symbols & set(sym.nn_outputs)
    is_species = tid in sym.species
    is_parameter = tid in sym.model_parameters
    for out in sorted(outputs):
        pre = ctx.hybridization_of(sym.nn_outputs[out])
        if pre is False and not is_parameter:
            issues.add("HYB_TARGET_INVALID", f"output {out!r} of simulation network "
                       f"{sym.nn_outputs[out]!r} may only set model parameters; {tid!r} is "
                       f"{'a species' if is_species else 'not a model parameter'}", file=f,
                       row=line, column="targetId")
        elif pre and not (is_parameter or is_species):
            issues.add("HYB_TARGET_INVALID", f"output {out!r} of pre-initialization network "
                       f"{sym.nn_outputs[out]!r} may only set model parameters or species "
                       f"initial values; {tid!r} is neither", file=f, row=line,
                       column="targetId")


# ---------------------------------------------------------------------- conditions
def check_conditions(ctx: ProblemContext, sym: Symbols, hyb: Hybridization,
                     initial: set[str]) -> dict[str, tuple[str, int]]:
    targets: dict[str, tuple[str, int]] = {}
    known = sym.known()
    for table, row in ctx.rows("condition"):
        f, line = table.file, row.line
        cid, tid, value = row["conditionId"], row["targetId"], row["targetValue"]
        if not ID_RE.match(cid):
            ctx.issues.add("TABLE_ID_INVALID", f"conditionId {cid!r} is not a valid PEtab id",
                           file=f, row=line, column="conditionId")
        targets.setdefault(tid, (f, line))
        if tid in hyb.targets and tid not in sym.nn_inputs:
            ctx.issues.add("HYB_CONDITION_CONFLICT", f"{tid!r} is assigned both here and in "
                           f"the hybridization table ({hyb.targets[tid][1]} line "
                           f"{hyb.targets[tid][2]}), which assigns it for all experiments",
                           file=f, row=line, column="targetId")
        if tid in sym.nn_parameters:
            ctx.issues.add("NN_PARAMETER_REFERENCED_OUTSIDE", f"network parameter id {tid!r} "
                           "may only be used in the parameter table", file=f, row=line,
                           column="targetId")
            continue
        if tid in sym.nn_inputs:
            net = sym.nn_inputs[tid]
            if tid in hyb.targets:
                ctx.issues.add("HYB_CONDITION_CONFLICT", f"{tid!r} is assigned both here and "
                               f"in the hybridization table ({hyb.targets[tid][1]} line "
                               f"{hyb.targets[tid][2]})", file=f, row=line, column="targetId")
            if ctx.hybridization_of(net) is False:
                ctx.issues.add("NN_INPUT_DYNAMIC_OUTSIDE_HYBRIDIZATION", f"{tid!r} is an input "
                               f"of simulation network {net!r}; assign it in the "
                               "hybridization table only", file=f, row=line, column="targetId")
            elif cid not in initial:
                ctx.issues.add("NN_INPUT_NON_INITIAL_CONDITION", f"{tid!r} is assigned in "
                               f"condition {cid!r}, which is no experiment's initial "
                               "condition; the assignment is ignored", file=f, row=line,
                               column="conditionId")
        elif tid not in sym.model and not (tid in ctx.mapping and ctx.mapping[tid].ref is None):
            ctx.issues.add("CONDITION_TARGET_UNKNOWN", f"{tid!r} is neither a model entity nor "
                           "a network input", file=f, row=line, column="targetId")
        if value:
            _unknown_symbols(ctx, free_symbols(value), known, f, line,
                             code="CONDITION_TARGET_UNKNOWN")
    return targets


# ---------------------------------------------------------------------- array inputs
def check_array_inputs(ctx: ProblemContext, sym: Symbols, hyb: Hybridization,
                       initial: set[str], used: set[str]) -> None:
    for input_id, keyed in ctx.arrays.inputs.items():
        f = ctx.arrays.input_files[input_id]
        if input_id not in sym.nn_inputs:
            ctx.issues.add("ARRAY_INPUT_UNKNOWN", f"input {input_id!r} is not a network input "
                           "of the problem (no mapped id or input name)", file=f,
                           path=f"inputs/{input_id}")
            continue
        if input_id in hyb.targets and hyb.targets[input_id][0].lower() != ARRAY:
            value, hf, hline = hyb.targets[input_id]
            ctx.issues.add("HYB_CONDITION_CONFLICT", f"{input_id!r} has array data here and is "
                           f"also assigned {value!r} in the hybridization table ({hf} line "
                           f"{hline})", file=f, path=f"inputs/{input_id}")
        keys = set(keyed)
        if keys & {"0", "data"}:
            continue
        covered = {c.strip() for key in keys for c in key.split(";")}
        missing = sorted(c or "<no condition>" for c in initial if c not in covered)
        if missing:
            ctx.issues.add("ARRAY_INPUT_CONDITIONS_INCOMPLETE", f"input {input_id!r} has "
                           f"condition-specific data but none for initial condition(s) "
                           f"{', '.join(missing)}", file=f, path=f"inputs/{input_id}")


# ---------------------------------------------------------------------- inputs/outputs
def check_inputs_assigned(ctx: ProblemContext, params: ParameterTables, sym: Symbols,
                          hyb: Hybridization, cond_targets: dict) -> None:
    assigned = set(hyb.targets) | set(cond_targets) | set(params.all_ids) | \
        set(ctx.arrays.inputs)
    covered_args: dict[str, set[int]] = {}
    for pid, ref in ctx.refs("inputs").items():
        mapped = ctx.mapping[pid]
        if not mapped.valid:
            continue
        if pid not in assigned:
            ctx.issues.add("NN_INPUT_UNASSIGNED", f"network input {pid!r} ({ref.text}) is "
                           "assigned nowhere (hybridization, condition or parameter table, "
                           "array file)", file=mapped.table.file, row=mapped.row.line,
                           column="petabEntityId")
        if ref.arg is not None:
            covered_args.setdefault(ref.net, set()).add(ref.arg)
        net = ref.net
        if ctx.hybridization_of(net) is False and pid in params.all_ids:
            table, row = params.all_ids[pid]
            ctx.issues.add("NN_INPUT_DYNAMIC_OUTSIDE_HYBRIDIZATION", f"{pid!r} is an input of "
                           f"simulation network {net!r}; assign it in the hybridization table "
                           "only", file=table.file, row=row.line, column="parameterId")
    for net_id, network in ctx.networks.items():
        for k, name in enumerate(network.inputs):
            if k in covered_args.get(net_id, set()) or name in assigned:
                continue
            ctx.issues.add("NN_INPUT_UNASSIGNED", f"input argument {k} ({name!r}) of network "
                           f"{net_id!r} gets no value: map {net_id}.inputs[{k}] to a PEtab id "
                           "and assign it", file=_mapping_file(ctx))


def _mapping_file(ctx: ProblemContext) -> str | None:
    tables = ctx.tables.get("mapping")
    return tables[0].file if tables else None


def check_outputs_used(ctx: ProblemContext, sym: Symbols, hyb: Hybridization) -> None:
    used: set[str] = set()
    for value, _, _ in hyb.targets.values():
        used |= free_symbols(value)
    for _, row in ctx.rows("observable"):
        used |= free_symbols(row["observableFormula"]) | free_symbols(row["noiseFormula"])
    for _, row in ctx.rows("condition"):
        used |= free_symbols(row["targetValue"])
    for pid in sym.nn_outputs:
        if pid not in used:
            m = ctx.mapping[pid]
            ctx.issues.add("NN_OUTPUT_UNUSED", f"network output {pid!r} is never used",
                           file=m.table.file, row=m.row.line, column="petabEntityId")
    referenced = {m.ref.net for m in ctx.mapping.values() if m.ref is not None}
    for net_id, entry in (ctx.config.networks.items() if ctx.config else ()):
        if net_id not in referenced:
            ctx.issues.add("NN_UNUSED", f"network {net_id!r} is not referenced in the mapping "
                           "table", file=ctx.config.path.name, path=entry.yaml_path)


# ---------------------------------------------------------------------- observables
def check_observables(ctx: ProblemContext, sym: Symbols) -> None:
    seen: dict[str, int] = {}
    known = sym.known()
    for table, row in ctx.rows("observable"):
        f, line = table.file, row.line
        oid = row["observableId"]
        if not ID_RE.match(oid):
            ctx.issues.add("TABLE_ID_INVALID", f"observableId {oid!r} is not a valid PEtab id",
                           file=f, row=line, column="observableId")
        if oid in seen:
            ctx.issues.add("TABLE_DUPLICATE_ID", f"observableId {oid!r} appears twice (first "
                           f"on line {seen[oid]})", file=f, row=line, column="observableId")
        seen.setdefault(oid, line)
        formulas = {c: free_symbols(row[c]) for c in ("observableFormula", "noiseFormula")}
        obs_ph = _placeholder_ids(row["observablePlaceholders"], "observableParameter", oid,
                                  formulas["observableFormula"] | formulas["noiseFormula"])
        noise_ph = _placeholder_ids(row["noisePlaceholders"], "noiseParameter", oid,
                                    formulas["noiseFormula"])
        # what evaluation resolves: the observable formula sees the observable's
        # placeholders, the noise formula those, its own and the observable's id
        allowed = {"observableFormula": obs_ph,
                   "noiseFormula": obs_ph | noise_ph | {oid}}
        for column, symbols in formulas.items():
            bad_nn = symbols & sym.nn_parameters
            if bad_nn:
                ctx.issues.add("NN_PARAMETER_REFERENCED_OUTSIDE", f"network parameter id(s) "
                               f"{', '.join(sorted(bad_nn))} may only be used in the parameter "
                               "table", file=f, row=line, column=column)
            unknown = sorted(symbols - known - allowed[column])
            if unknown:
                ctx.issues.add("OBSERVABLE_UNKNOWN_SYMBOL", f"unknown symbol(s) "
                               f"{', '.join(unknown)}", file=f, row=line, column=column)


def _placeholder_ids(column: str, prefix: str, oid: str, symbols: set[str]) -> set[str]:
    """The placeholders of an observable row as evaluation resolves them: the column's
    list, else the symbols named ``<prefix><k>_<observableId>``."""
    if column.strip():
        return {p.strip() for p in column.split(";") if p.strip()}
    pattern = re.compile(rf"^{prefix}\d+_{re.escape(oid)}$")
    return {s for s in symbols if pattern.match(s)}


# ---------------------------------------------------------------------- expressions
EXPRESSION_COLUMNS = {
    "observable": ("observableFormula", "noiseFormula"),
    "hybridization": ("targetValue",),
    "condition": ("targetValue",),
}
"""The math columns of each table (checked with the grammar and budgets that loading
uses, :mod:`petab_sciml.math_syntax`)."""


def check_expressions(ctx: ProblemContext) -> None:
    """Every formula parses (the loader's grammar and budgets, without sympy); an
    ``observableFormula`` is never empty.  Formulas too large for exact constant folding
    are remembered in ``ctx.huge_formulas`` (libpetab's second opinion skips them)."""
    from petab_sciml.math_syntax import MathSyntaxError, parse_syntax

    for kind, columns in EXPRESSION_COLUMNS.items():
        for table, row in ctx.rows(kind):
            for column in columns:
                text = row[column]
                if not text:
                    if column == "observableFormula":
                        ctx.issues.add("EXPRESSION_INVALID", "observableFormula is empty; "
                                       "expected a formula", file=table.file, row=row.line,
                                       column=column)
                    continue
                if kind != "observable" and text.lower() == ARRAY:
                    continue
                try:
                    syntax = parse_syntax(text)
                except MathSyntaxError as exc:
                    ctx.issues.add(exc.code or "EXPRESSION_INVALID", exc.message,
                                   file=table.file, row=row.line, column=column)
                    ctx.huge_formulas.add(table.file)
                    continue
                if syntax.huge_constants:
                    ctx.huge_formulas.add(table.file)


# ---------------------------------------------------------------------- measurements
def check_measurements(ctx: ProblemContext) -> None:
    observables = {row["observableId"] for _, row in ctx.rows("observable")}
    experiments = {row["experimentId"] for _, row in ctx.rows("experiment")}
    have_experiments = bool(ctx.tables.get("experiment"))
    for table, row in ctx.rows("measurement"):
        f, line = table.file, row.line
        if row["observableId"] not in observables:
            ctx.issues.add("MEASUREMENT_OBSERVABLE_UNKNOWN", f"observable "
                           f"{row['observableId']!r} is not in the observable table", file=f,
                           row=line, column="observableId")
        eid = row["experimentId"]
        if eid and (not have_experiments or eid not in experiments):
            ctx.issues.add("MEASUREMENT_EXPERIMENT_UNKNOWN", f"experiment {eid!r} is not in the "
                           "experiment table", file=f, row=line, column="experimentId")
        value = parse_float(row["measurement"])
        if value is None or not math.isfinite(value):
            ctx.issues.add("MEASUREMENT_VALUE_INVALID", f"measurement must be a finite number, "
                           f"got {row['measurement']!r}", file=f, row=line,
                           column="measurement")
        time = parse_float(row["time"])
        if time is None or math.isnan(time) or time == -math.inf:
            ctx.issues.add("MEASUREMENT_VALUE_INVALID", f"time must be a number (inf for "
                           f"steady state), not NaN or -inf; got {row['time']!r}", file=f,
                           row=line, column="time")


# ---------------------------------------------------------------------- network ids
def check_network_ids(ctx: ProblemContext, sym: Symbols, hyb: Hybridization,
                      cond_targets: dict) -> None:
    if ctx.config is None:
        return
    for net_id, entry in ctx.config.networks.items():
        if net_id in sym.model:
            ctx.issues.add("NN_ID_AS_PETAB_ID", f"network id {net_id!r} is also a model entity "
                           "id; network ids must not be PEtab ids", file=ctx.config.path.name,
                           path=entry.yaml_path)
        if net_id in hyb.targets:
            _, f, line = hyb.targets[net_id]
            ctx.issues.add("NN_ID_AS_PETAB_ID", f"network id {net_id!r} used as a "
                           "hybridization target", file=f, row=line, column="targetId")
        if net_id in cond_targets:
            f, line = cond_targets[net_id]
            ctx.issues.add("NN_ID_AS_PETAB_ID", f"network id {net_id!r} used as a condition "
                           "target", file=f, row=line, column="targetId")

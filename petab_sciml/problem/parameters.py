"""The parameter table: checked rows, split into network-parameter rows (resolved by
:mod:`petab_sciml.problem.resolve`) and ordinary PEtab parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from petab_sciml.problem.context import ProblemContext
from petab_sciml.problem.resolve import ARRAY, ParameterRow, Prior
from petab_sciml.problem.tables import ID_RE, Row, Table, parse_bool, parse_float

PRIORS = {
    # name (lower case, '-' and '_' removed) -> (canonical PEtab v2 name, parameter count)
    "uniform": ("uniform", 2), "normal": ("normal", 2), "laplace": ("laplace", 2),
    "lognormal": ("log-normal", 2), "loglaplace": ("log-laplace", 2),
    "loguniform": ("log-uniform", 2), "cauchy": ("cauchy", 2), "chisquare": ("chisquare", 1),
    "exponential": ("exponential", 1), "gamma": ("gamma", 2), "rayleigh": ("rayleigh", 1),
    "parameterscaleuniform": ("parameterScaleUniform", 2),
    "parameterscalenormal": ("parameterScaleNormal", 2),
    "parameterscalelaplace": ("parameterScaleLaplace", 2),
}
SCALES = ("lin", "log", "log10")
"""``parameterScale`` values (PEtab v1 column, kept by many v2 problems): the scale on
which an estimated parameter is optimized; nominal values and bounds stay linear."""


@dataclass(frozen=True)
class PlainParameter:
    """An ordinary (non-network) PEtab parameter."""

    id: str
    line: int
    nominal: float | None
    estimate: bool
    lower: float | None
    upper: float | None
    prior: Prior | None
    scale: str = "lin"
    """``parameterScale``: ``lin``, ``log`` or ``log10`` (``lin`` when the column is
    absent or empty)."""


@dataclass
class ParameterTables:
    network_rows: dict[str, list[ParameterRow]] = field(default_factory=dict)
    plain: dict[str, PlainParameter] = field(default_factory=dict)
    all_ids: dict[str, tuple[Table, Row]] = field(default_factory=dict)
    estimated: set[str] = field(default_factory=set)
    any_prior: bool = False


def read_parameters(ctx: ProblemContext) -> ParameterTables:
    out = ParameterTables()
    issues = ctx.issues
    nets = set(ctx.config.networks) if ctx.config else set()
    param_refs = ctx.refs("parameters")
    for table, row in ctx.rows("parameter"):
        f = table.file
        pid = row["parameterId"]
        if not ID_RE.match(pid):
            issues.add("TABLE_ID_INVALID", f"parameterId {pid!r} is not a valid PEtab id",
                       file=f, row=row.line, column="parameterId")
            continue
        if pid in nets:
            issues.add("NN_ID_AS_PETAB_ID", f"{pid!r} is a network id, not a PEtab id; map "
                       f"{pid}.parameters to a parameter id in the mapping table", file=f,
                       row=row.line, column="parameterId")
            continue
        if ctx.model is not None and pid in ctx.model.entities \
                and pid not in ctx.model.parameters:
            issues.add("PARAM_ID_MODEL_ENTITY", f"{pid!r} is a {_entity_kind(ctx, pid)} of "
                       "the model; PEtab v2 parameter tables hold parameters only (model "
                       "parameters or new ids)", file=f, row=row.line, column="parameterId")
        if pid in out.all_ids:
            issues.add("TABLE_DUPLICATE_ID", f"parameterId {pid!r} appears twice (first on "
                       f"line {out.all_ids[pid][1].line})", file=f, row=row.line,
                       column="parameterId")
            continue
        out.all_ids[pid] = (table, row)
        estimate = parse_bool(row["estimate"])
        if estimate is None:
            issues.add("PARAM_ESTIMATE_INVALID", f"estimate must be true or false, got "
                       f"{row['estimate']!r}", file=f, row=row.line, column="estimate")
            estimate = False
        if estimate:
            out.estimated.add(pid)
        prior = _prior(row, table, ctx)
        out.any_prior |= prior is not None
        ref = param_refs.get(pid)
        if pid in ctx.mapping and not ctx.mapping[pid].valid:
            continue  # the mapping row already carries the error
        if ref is not None:
            parsed = _network_row(pid, ref, row, table, estimate, prior, ctx)
            if parsed is not None:
                out.network_rows.setdefault(ref.net, []).append(parsed)
        else:
            out.plain[pid] = _plain_row(pid, row, table, estimate, prior, ctx)
    _check_improper(out, ctx)
    return out


def _entity_kind(ctx: ProblemContext, pid: str) -> str:
    model = ctx.model
    for kind, ids in (("species", model.species), ("compartment", model.compartments),
                      ("reaction", model.reactions)):
        if pid in ids:
            return kind
    return "non-parameter entity (rule variable, species reference, function, event)"


def _bound(row: Row, column: str, default: float, table: Table, ctx: ProblemContext,
           network: bool) -> float | None:
    text = row[column]
    if not text:
        return default if network else None
    value = parse_float(text)
    if value is None or math.isnan(value):
        ctx.issues.add("PARAM_BOUNDS_INVALID", f"{column} must be a number"
                       f"{' (or -inf/inf/empty for network parameters)' if network else ''}, "
                       f"got {text!r}", file=table.file, row=row.line, column=column)
        return default if network else None
    return value


def _prior(row: Row, table: Table, ctx: ProblemContext) -> Prior | None:
    name = row["priorDistribution"]
    if not name:
        if row["priorParameters"]:
            ctx.issues.add("PARAM_PRIOR_INVALID", "priorParameters given without "
                           "priorDistribution", file=table.file, row=row.line,
                           column="priorParameters")
        return None
    key = name.lower().replace("-", "").replace("_", "")
    if key not in PRIORS:
        ctx.issues.add("PARAM_PRIOR_INVALID", f"unknown priorDistribution {name!r}; known: "
                       f"{', '.join(sorted({v[0] for v in PRIORS.values()}))}",
                       file=table.file, row=row.line, column="priorDistribution")
        return None
    canonical, n = PRIORS[key]
    text = row["priorParameters"]
    values = [parse_float(p) for p in text.split(";")] if text else []
    if len(values) != n or any(v is None or math.isnan(v) for v in values):
        ctx.issues.add("PARAM_PRIOR_INVALID", f"{canonical} needs {n} numeric priorParameters "
                       f"separated by ';', got {text!r}", file=table.file, row=row.line,
                       column="priorParameters")
        return None
    return Prior(canonical, tuple(float(v) for v in values))


def _network_row(pid, ref, row, table, estimate, prior, ctx) -> ParameterRow | None:
    issues, f = ctx.issues, table.file
    text = row["nominalValue"]
    nominal: str | float | None
    if not text:
        nominal = None
        if not estimate:
            issues.add("PARAM_NOMINAL_MISSING", f"{pid!r} is not estimated, so it needs a "
                       "nominalValue (array or a number)", file=f, row=row.line,
                       column="nominalValue")
    elif text.lower() == ARRAY:
        nominal = ARRAY
    else:
        nominal = parse_float(text)
        if nominal is None or math.isnan(nominal):
            issues.add("PARAM_NOMINAL_INVALID", f"nominalValue of network parameters must be "
                       f"'array', a number or empty, got {text!r}", file=f, row=row.line,
                       column="nominalValue")
            nominal = None
    lower = _bound(row, "lowerBound", -math.inf, table, ctx, True)
    upper = _bound(row, "upperBound", math.inf, table, ctx, True)
    if lower > upper:
        issues.add("PARAM_BOUNDS_INVALID", f"lowerBound {lower:g} > upperBound {upper:g}",
                   file=f, row=row.line, column="lowerBound")
    elif isinstance(nominal, float) and estimate and not lower <= nominal <= upper:
        issues.add("PARAM_NOMINAL_OUT_OF_BOUNDS", f"nominalValue {nominal:g} outside "
                   f"[{lower:g}, {upper:g}]", file=f, row=row.line, column="nominalValue")
    dropout = _dropout(row, table, ctx, ref)
    if _scale(row, table, ctx) not in ("lin", None):
        issues.add("PARAM_SCALE_INVALID", "network parameters are optimized on linear scale; "
                   f"parameterScale must be lin or empty, got {row['parameterScale']!r}",
                   file=f, row=row.line, column="parameterScale")
    return ParameterRow(pid, ref, row.line, nominal, estimate, lower, upper, prior, dropout)


def _scale(row: Row, table: Table, ctx: ProblemContext) -> str | None:
    """The row's ``parameterScale`` (``lin`` if empty); None (reported) if unknown."""
    text = row["parameterScale"].strip()
    if not text:
        return "lin"
    if text not in SCALES:
        ctx.issues.add("PARAM_SCALE_INVALID", f"parameterScale must be one of "
                       f"{', '.join(SCALES)} (or empty), got {text!r}", file=table.file,
                       row=row.line, column="parameterScale")
        return None
    return text


def _dropout(row, table, ctx, ref) -> float | None:
    text = row["dropout"]
    if not text:
        return None
    p = parse_float(text)
    if p is None or not 0.0 <= p < 1.0:
        ctx.issues.add("PARAM_DROPOUT_INVALID", f"dropout must be a probability p with "
                       f"0 <= p < 1 (or empty), got {text!r}", file=table.file, row=row.line,
                       column="dropout")
        return None
    if ref is not None and ref.level == 3:
        ctx.issues.add("PARAM_DROPOUT_INVALID", "dropout applies to whole networks, layers or "
                       f"arrays, not to elements ({ref.text!r})", file=table.file,
                       row=row.line, column="dropout")
        return None
    return p


def _plain_row(pid, row, table, estimate, prior, ctx) -> PlainParameter:
    issues, f = ctx.issues, table.file
    text = row["nominalValue"]
    nominal = None
    if text.lower() == ARRAY:
        issues.add("PARAM_ARRAY_NOT_NETWORK", f"nominalValue 'array' is only valid for rows "
                   f"mapped to network parameters; {pid!r} is not mapped to "
                   "net.parameters[...]", file=f, row=row.line, column="nominalValue")
    elif text:
        nominal = parse_float(text)
        if nominal is None:
            issues.add("PARAM_NOMINAL_INVALID", f"nominalValue must be a number, got {text!r}",
                       file=f, row=row.line, column="nominalValue")
    elif not estimate:
        issues.add("PARAM_NOMINAL_MISSING", f"{pid!r} is not estimated, so it needs a "
                   "nominalValue", file=f, row=row.line, column="nominalValue")
    lower = _bound(row, "lowerBound", -math.inf, table, ctx, False)
    upper = _bound(row, "upperBound", math.inf, table, ctx, False)
    if estimate:
        for column, value in (("lowerBound", lower), ("upperBound", upper)):
            if value is None and not row[column]:
                issues.add("PARAM_BOUNDS_INVALID", f"estimated parameter {pid!r} needs a "
                           f"{column} (a number; -inf/inf allowed)", file=f, row=row.line,
                           column=column)
    if lower is not None and upper is not None:
        if lower > upper:
            issues.add("PARAM_BOUNDS_INVALID", f"lowerBound {lower:g} > upperBound {upper:g}",
                       file=f, row=row.line, column="lowerBound")
        elif nominal is not None and estimate and not lower <= nominal <= upper:
            issues.add("PARAM_NOMINAL_OUT_OF_BOUNDS", f"nominalValue {nominal:g} outside "
                       f"[{lower:g}, {upper:g}]", file=f, row=row.line, column="nominalValue")
    if row["dropout"]:
        issues.add("PARAM_DROPOUT_INVALID", f"dropout is only valid on rows mapped to network "
                   f"parameters; {pid!r} is not", file=f, row=row.line, column="dropout")
    scale = _scale(row, table, ctx) or "lin"
    if scale != "lin" and estimate:
        for column, value in (("lowerBound", lower), ("upperBound", upper)):
            if value is not None and value < 0:
                issues.add("PARAM_SCALE_INVALID", f"{pid!r} is estimated on {scale} scale, "
                           f"so its {column} must not be negative, got {value:g}", file=f,
                           row=row.line, column=column)
    return PlainParameter(pid, row.line, nominal, estimate, lower, upper, prior, scale)


def _check_improper(out: ParameterTables, ctx: ProblemContext) -> None:
    if not out.any_prior:
        return
    for p in out.plain.values():
        if p.estimate and p.prior is None and not (
                p.lower is not None and p.upper is not None
                and math.isfinite(p.lower) and math.isfinite(p.upper)):
            table, _ = out.all_ids[p.id]
            ctx.issues.add("PARAM_PRIOR_IMPROPER", f"{p.id!r} is estimated without a prior "
                           "while other parameters have priors, so its implicit prior is "
                           "uniform(lowerBound, upperBound), which needs finite bounds",
                           file=table.file, row=p.line, column="priorDistribution")
    for rows in out.network_rows.values():
        for r in rows:
            if r.estimate and r.prior is None and not (math.isfinite(r.lower)
                                                       and math.isfinite(r.upper)):
                table, _ = out.all_ids[r.id]
                ctx.issues.add("PARAM_PRIOR_IMPROPER", f"{r.id!r} is estimated without a "
                               "prior while other parameters have priors, so its implicit "
                               "prior is uniform(lowerBound, upperBound), which needs finite "
                               "bounds", file=table.file, row=r.line, column="priorDistribution")

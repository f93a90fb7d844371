"""Optional: libpetab-python's PEtab v2 checks on the parts of the problem they cover.

libpetab (0.8.x) cannot read a SciML problem as a whole (``nominalValue`` ``array``, the
extension, hybridization targets that are not in the parameter table).  When it is
installed, its table models parse each table (network rows taken out of the parameter
table) and every row it rejects is reported as a ``LIBPETAB`` warning with libpetab's
message.  Our own checks cover the same PEtab rules with exact locations; this is a second
opinion, never a reason to fail on its own.
"""

from __future__ import annotations

import warnings
from typing import Any

_MODELS = {
    "observable": ("ObservableTable", "get_observable_df"),
    "measurement": ("MeasurementTable", "get_measurement_df"),
    "condition": ("ConditionTable", "get_condition_df"),
    "experiment": ("ExperimentTable", "get_experiment_df"),
    "mapping": ("MappingTable", "get_mapping_df"),
    "parameter": ("ParameterTable", "get_parameter_df"),
}


def lint_with_libpetab(report: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _lint(report)


def _lint(report: Any) -> None:
    try:
        import petab.v2 as v2  # noqa: F401
    except Exception:
        return
    ctx = report.context
    nn_ids = set(ctx.refs("parameters"))
    for kind, (model_name, reader) in _MODELS.items():
        for table in ctx.tables.get(kind, []):
            _lint_table(report, v2, kind, model_name, reader, table, nn_ids)


def _lint_table(report, v2, kind, model_name, reader, table, nn_ids) -> None:
    if table.file in report.context.huge_formulas:
        return  # our checks reported it; sympy inside libpetab could take hours on it
    try:
        df = getattr(v2, reader)(str(table.path))
        if kind == "parameter" and "parameterId" in df.columns:
            df = df[~df["parameterId"].isin(nn_ids)]
        elif kind == "parameter":
            df = df[~df.index.isin(nn_ids)]
        if kind == "mapping":
            return  # network modelEntityIds are outside libpetab's grammar
        getattr(v2, model_name).from_df(df)
    except Exception as exc:  # libpetab raises pydantic/pandas/value errors
        message = str(exc).strip().splitlines()
        text = "; ".join(m.strip() for m in message[:3] if m.strip())
        report.context.issues.add("LIBPETAB", f"libpetab cannot parse the table: "
                                  f"{type(exc).__name__}: {text}", file=table.file)

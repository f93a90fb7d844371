"""``problem_info``: networks and every parameter-table row, resolved (for ``info``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from petab_sciml.problem.validate import ValidationReport, validate_problem


def _num(x: float | None) -> Any:
    if x is None:
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def problem_info(path: str | Path, *, trust_code: bool = False, confine: bool = False
                 ) -> dict[str, Any]:
    report = validate_problem(path, trust_code=trust_code, confine=confine)
    return info_from_report(report)


def info_from_report(report: ValidationReport) -> dict[str, Any]:
    ctx = report.context
    out: dict[str, Any] = {"problem": str(report.path), "valid": report.ok,
                           "errors": len(report.issues.errors),
                           "warnings": len(report.issues.warnings),
                           "networks": [], "parameters": []}
    if ctx is None or ctx.config is None:
        return out
    for net_id, entry in ctx.config.networks.items():
        network = ctx.networks.get(net_id)
        item: dict[str, Any] = {"id": net_id, "format": entry.format,
                                "location": entry.location,
                                "hybridization": entry.hybridization,
                                "loaded": network is not None}
        if network is not None:
            item["layers"] = [{"id": lay.id, "type": lay.type,
                               "parameters": sum(i.size for i in lay.arrays().values())}
                              for lay in network.layers.values()]
            item["inputs"] = len(network.inputs)
            item["outputs"] = network.n_outputs
            item["parameter_count"] = network.parameter_count()
            resolved = report.resolved.get(net_id)
            if resolved is not None:
                item["estimated"] = resolved.n_trainable
                item["dropout"] = {f"{lay}.{arr}": p for lay, arrays in resolved.dropout.items()
                                   for arr, p in arrays.items()}
        out["networks"].append(item)
    params = report.parameters
    if params is None:
        return out
    summaries = {s.row.id: s for r in report.resolved.values() for s in r.summaries}
    for pid in params.all_ids:
        s = summaries.get(pid)
        if s is not None:
            r = s.row
            out["parameters"].append({
                "id": pid, "kind": "network", "targets": [f"{r.ref.net}.{t}" for t in s.targets],
                "entity": r.ref.canonical(), "level": r.ref.level_name,
                "elements": s.elements, "effective_elements": s.effective,
                "nominal": r.nominal if not isinstance(r.nominal, float) else _num(r.nominal),
                "estimate": r.estimate, "lower": _num(r.lower), "upper": _num(r.upper),
                "prior": None if r.prior is None else str(r.prior),
                "dropout": r.dropout})
            continue
        plain = params.plain.get(pid)
        mapped = ctx.mapping.get(pid)
        target = mapped.model_id if mapped is not None else pid
        out["parameters"].append({
            "id": pid, "kind": "network input" if pid in ctx.refs("inputs") else "model",
            "targets": [target], "entity": target, "level": None, "elements": 1,
            "effective_elements": 1,
            "nominal": _num(plain.nominal) if plain else None,
            "estimate": plain.estimate if plain else None,
            "lower": _num(plain.lower) if plain else None,
            "upper": _num(plain.upper) if plain else None,
            "prior": None if plain is None or plain.prior is None else str(plain.prior),
            "dropout": None})
    return out

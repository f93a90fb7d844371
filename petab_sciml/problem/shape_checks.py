"""Network input and output shapes against the problem: array inputs that a network
cannot take, and mapping indices outside a network input or output.

The shape of each input argument comes from the problem as the loader builds it: the
array file's dataset, the largest mapped element index plus one per axis, or one value
for a whole argument assigned an expression.  :mod:`petab_sciml.shapes` then propagates
these shapes through the network (PyTorch's rules, no framework needed).  Where a shape
cannot be known, the checks are skipped for that network with an info issue.
"""

from __future__ import annotations

from typing import Any

from petab_sciml.problem.context import Mapped, ProblemContext
from petab_sciml.shapes import ShapeError, infer_shapes, output_shapes

Shape = tuple[int, ...]
_MAX_PROBES = 256
"""Sizes tried per axis when locating an out-of-range element index."""


def check_network_shapes(ctx: ProblemContext) -> None:
    for net_id, network in ctx.networks.items():
        mapped = [m for m in ctx.mapping.values()
                  if m.valid and m.ref is not None and m.ref.net == net_id]
        sources = _input_shapes(ctx, network, mapped)
        if sources is None:
            continue
        shapes = [s for s, _ in sources]
        try:
            outputs = output_shapes(network, shapes)
        except ShapeError as exc:
            _report_input_error(ctx, network, sources, exc)
            continue
        if outputs is None:
            _unchecked(ctx, net_id, "a layer or function has no shape rule")
            continue
        _check_output_indices(ctx, net_id, outputs, mapped)


def _unchecked(ctx: ProblemContext, net_id: str, why: str) -> None:
    entry = ctx.config.networks.get(net_id) if ctx.config else None
    ctx.issues.add("NN_SHAPES_UNCHECKED", f"shapes of network {net_id!r} not checked: {why}",
                   file=ctx.config.path.name if ctx.config else None,
                   path=entry.yaml_path if entry else None)


def _input_shapes(ctx: ProblemContext, network: Any, mapped: list[Mapped]
                  ) -> list[tuple[Shape, tuple[str, Any]]] | None:
    """Per input argument: (shape, (kind, source)) with kind ``array`` (source: input id),
    ``elements`` (source: the mapping rows) or ``value`` (source: the mapping row)."""
    hyb = {row["targetId"]: row["targetValue"] for _, row in ctx.rows("hybridization")}
    out = []
    for k, name in enumerate(network.inputs):
        rows = [m for m in mapped if m.ref.kind == "inputs" and m.ref.arg == k]
        array_id = next((m.petab_id for m in rows if m.ref.index is None
                         and m.petab_id in ctx.arrays.inputs), None)
        if array_id is None and name in ctx.arrays.inputs:
            array_id = name
        if array_id is not None:
            found = {tuple(lazy.shape) for lazy in ctx.arrays.inputs[array_id].values()}
            if len(found) != 1:
                ctx.issues.add("ARRAY_INPUT_SHAPE_MISMATCH", f"input {array_id!r} has "
                               f"datasets of different shapes {sorted(found)}; a network "
                               "input has one shape", file=ctx.arrays.input_files[array_id],
                               path=f"inputs/{array_id}")
                return None
            out.append((found.pop(), ("array", array_id)))
            continue
        elements = [m for m in rows if m.ref.index is not None]
        whole = [m for m in rows if m.ref.index is None]
        if whole and not elements:
            if hyb.get(whole[0].petab_id, "").lower() == "array":
                return None  # its array data is missing: reported as HYB_ARRAY_INPUT_MISSING
            out.append(((1,), ("value", whole[0])))
            continue
        ndims = {len(m.ref.index) for m in elements}
        if not elements or whole or len(ndims) != 1:
            _unchecked(ctx, network.id, f"input argument {k} ({name!r}) has no shape the "
                       "problem defines")
            return None
        ndim = ndims.pop()
        shape = tuple(max(m.ref.index[d] for m in elements) + 1 for d in range(ndim))
        out.append((shape, ("elements", elements)))
    return out


def _report_input_error(ctx: ProblemContext, network: Any,
                        sources: list[tuple[Shape, tuple[str, Any]]], exc: ShapeError) -> None:
    shapes = [s for s, _ in sources]
    culprit = _first_failing_argument(network, sources)
    shape, (kind, source) = sources[culprit]
    what = f"input argument {culprit} of network {network.id!r}"
    if kind == "array":
        ctx.issues.add("ARRAY_INPUT_SHAPE_MISMATCH", f"array input {source!r} has shape "
                       f"{shape}, which {what} does not take: {exc}",
                       file=ctx.arrays.input_files[source], path=f"inputs/{source}")
        return
    if kind == "value":
        _mapping_issue(ctx, "MAPPING_INPUT_INDEX_OUT_OF_RANGE", source,
                       f"{source.model_id!r} assigns one value to {what}, which does not "
                       f"take shape (1,): {exc}")
        return
    accepted = _accepted_sizes(network, shapes, culprit)
    bad = [m for m in source if any(i >= n for i, n in zip(m.ref.index, accepted))] \
        if accepted else []
    for m in bad or source[-1:]:
        limit = "" if not accepted else (" (the network takes shape "
                                         f"{tuple(accepted)} there)")
        _mapping_issue(ctx, "MAPPING_INPUT_INDEX_OUT_OF_RANGE", m,
                       f"{m.model_id!r}: index out of range for {what}{limit}; the mapped "
                       f"elements give it shape {shape}: {exc}")


def _first_failing_argument(network: Any, sources: list) -> int:
    """The argument whose mapped elements break inference (smaller sizes fit), else the
    first array input, else argument 0."""
    shapes = [s for s, _ in sources]
    for k, (_, (kind, _)) in enumerate(sources):
        if kind == "elements" and _accepted_sizes(network, shapes, k) is not None:
            return k
    return next((k for k, (_, (kind, _)) in enumerate(sources) if kind == "array"), 0)


def _accepted_sizes(network: Any, shapes: list[Shape], k: int) -> list[int] | None:
    """Per axis of argument ``k``: the largest size up to the mapped one that the network
    takes (other axes and arguments as mapped); None if none is found."""
    accepted = []
    for axis, size in enumerate(shapes[k]):
        for n in range(size, max(size - _MAX_PROBES, 0), -1):
            trial = list(shapes)
            trial[k] = shapes[k][:axis] + (n,) + shapes[k][axis + 1:]
            try:
                infer_shapes(network, trial)
            except ShapeError:
                continue
            accepted.append(n)
            break
        else:
            return None
    return accepted


def _check_output_indices(ctx: ProblemContext, net_id: str, outputs: list[Shape],
                          mapped: list[Mapped]) -> None:
    for m in mapped:
        ref = m.ref
        if ref.kind != "outputs" or ref.index is None or ref.arg is None:
            continue
        shape = outputs[ref.arg]
        index = tuple(ref.index)
        if len(index) > len(shape) or any(not 0 <= i < n for i, n in zip(index, shape)):
            _mapping_issue(ctx, "MAPPING_OUTPUT_INDEX_OUT_OF_RANGE", m,
                           f"{m.model_id!r}: index {list(index)} out of range: output "
                           f"argument {ref.arg} of network {net_id!r} has shape {shape}")


def _mapping_issue(ctx: ProblemContext, code: str, m: Mapped, message: str) -> None:
    ctx.issues.add(code, message, file=m.table.file, row=m.row.line, column="modelEntityId")

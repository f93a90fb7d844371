"""Scan (opset 9 and newer), unrolled over the static length of its scan inputs.

Each iteration binds the body's state inputs to the current states and its scan inputs
to the iteration's slices (along ``scan_input_axes``, from the end with
``scan_input_directions``), converts the body's nodes as the graph's own, and reads the
new states and the iteration's scan outputs; the scan outputs are stacked along
``scan_output_axes`` (reversed with ``scan_output_directions``).  The body's value
shapes come from ONNX shape inference on the body with the inputs' static shapes.
Scan-8 (a batch axis and ``sequence_lens``) is refused.
"""

from __future__ import annotations

from typing import Any

from .importer import _Importer
from .registry import handles
from .values import _T


def _body_shapes(im: _Importer, body: Any, shapes: list[tuple[int, ...]]) -> dict:
    """ONNX shape inference on a copy of ``body`` whose inputs have ``shapes``."""
    import onnx
    from onnx import helper

    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    for vi, shape in zip(graph.input, shapes, strict=True):
        dims = vi.type.tensor_type.shape
        dims.ClearField("dim")
        for d in shape:
            dims.dim.add().dim_value = int(d)
    # outer-scope values the body reads become inputs of known shape, where known
    defined = {vi.name for vi in graph.input} | {o for n in graph.node for o in n.output}
    for name in {i for n in graph.node for i in n.input if i and i not in defined}:
        v = im.env.get(name)
        shape = None if v is None else im.static_shape(v)
        if shape is not None:
            graph.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT,
                                                             shape))
    model = helper.make_model(graph, opset_imports=list(im.model.opset_import))
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - the handlers then refuse what needs a shape
        return {}
    out = {}
    for vi in list(inferred.value_info) + list(inferred.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                 for d in tt.shape.dim)
    return out


@handles("Scan")
def _scan(im: _Importer, node: Any, ins: list) -> None:
    if im.opset < 9:
        raise im.error(node, "Scan before opset 9 (a batch axis and sequence_lens) is not "
                       "supported")
    at = im.attrs(node)
    body = at["body"]
    m = int(at["num_scan_inputs"])
    n = len(ins) - m
    k = len(body.output) - n
    in_axes = [int(a) for a in at.get("scan_input_axes", [0] * m)]
    in_dirs = [int(a) for a in at.get("scan_input_directions", [0] * m)]
    out_axes = [int(a) for a in at.get("scan_output_axes", [0] * k)]
    out_dirs = [int(a) for a in at.get("scan_output_directions", [0] * k)]
    shapes = []
    for v in ins:
        s = im.static_shape(v)
        if s is None:
            raise im.error(node, "Scan needs the static shapes of its inputs")
        shapes.append(s)
    in_axes = [a + len(shapes[n + j]) if a < 0 else a for j, a in enumerate(in_axes)]
    lengths = {shapes[n + j][a] for j, a in enumerate(in_axes)}
    if len(lengths) != 1:
        raise im.error(node, f"scan inputs of different lengths {sorted(lengths)}")
    steps = lengths.pop()
    slice_shapes = [tuple(d for i, d in enumerate(shapes[n + j]) if i != a)
                    for j, a in enumerate(in_axes)]
    im.shapes.update(_body_shapes(im, body, list(shapes[:n]) + slice_shapes))
    for inner in body.node:   # the body's values are read inside it
        for name in inner.input:
            if name:
                im.consumers.setdefault(name, []).append(-1)
    for out in body.output:
        im.consumers.setdefault(out.name, []).append(-1)
    states = list(ins[:n])
    collected: list[list[Any]] = [[] for _ in range(k)]
    for it in range(steps):
        for vi, state in zip(body.input[:n], states, strict=True):
            im.env[vi.name] = state
        for j, vi in enumerate(body.input[n:]):
            t = steps - 1 - it if in_dirs[j] else it
            index = [{"slice": [None, None, None]}] * in_axes[j] + [t]
            piece = im.emit("getitem", [im.tensor(ins[n + j], node)], {"index": index})
            im.env[vi.name] = _T(piece, slice_shapes[j])
        for inner in body.node:
            im.convert_inner(inner)
        new = [im.value(o.name, node) for o in body.output]
        states = new[:n]
        for j in range(k):
            collected[j].append(new[n + j])
    for j, state in enumerate(states):
        im.alias(node, j, state)
    for j in range(k):
        pieces = [im.tensor(v, node) for v in collected[j]]
        if out_dirs[j]:
            pieces.reverse()
        axis = out_axes[j]
        im.bind(node, n + j, im.emit("stack", [pieces], {"dim": axis},
                                     name=im.out_name(node, n + j)))

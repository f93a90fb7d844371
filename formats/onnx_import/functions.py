"""ONNX ops that the importer has no handler for, but that ONNX defines as a function of
other ops (``Attention``, ``RMSNormalization``, ``RotaryEmbedding``, ``Swish``, ...): the
node is replaced by the function's body, as ONNX's own ``*_expanded`` test cases do, and
the body's ops are imported like any other.

The body is the schema's function for the largest opset version at most the model's
(a context-dependent one gets the node's input types from shape inference).  A body
written at another opset than the model's is brought to the model's opset by ONNX's
version converter (which rewrites the ops whose definition changed in between, such as
attributes that became inputs); where it cannot, the node is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

from petab_sciml.errors import NetworkError

MAX_DEPTH = 4
"""Function bodies that use other functions are expanded this many levels deep."""

EXPANDED_VARIANTS: dict[str, Callable[[Any], bool]] = {
    # the layer has no Mean / InvStdDev outputs; the function body computes them
    "LayerNormalization": lambda node: sum(1 for name in node.output if name) > 1,
}
"""Ops with a handler whose node is still expanded where the predicate holds: variants
the handler's layer cannot compute."""


def expand_functions(model: Any, handled: Container[str], opset: int,
                     source: str | None = None) -> Any:
    """``model`` with every default-domain node whose op is not in ``handled`` and that
    ONNX defines as a function replaced by that function's body (recursively, up to
    :data:`MAX_DEPTH` levels); the model itself when there is none."""
    for _ in range(MAX_DEPTH):
        todo = [i for i, node in enumerate(model.graph.node)
                if _is_default(node.domain) and _expanded(node, handled)
                and (schema := _schema(node.op_type, opset)) is not None
                and _has_function(schema, opset)]
        if not todo:
            return model
        model = _expand(model, set(todo), opset, source)
    return model


def _expanded(node: Any, handled: Container[str]) -> bool:
    variant = EXPANDED_VARIANTS.get(node.op_type)
    return node.op_type not in handled or (variant is not None and variant(node))


def _is_default(domain: str) -> bool:
    return domain in ("", "ai.onnx")


def _schema(op_type: str, opset: int) -> Any:
    import onnx

    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except Exception:   # noqa: BLE001 - onnx raises SchemaError for unknown ops
        return None


def _version(versions: Any, opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _has_function(schema: Any, opset: int) -> bool:
    return (_version(schema.function_opset_versions, opset) is not None
            or _version(schema.context_dependent_function_opset_versions, opset) is not None)


def _expand(model: Any, which: set[int], opset: int, source: str | None) -> Any:
    import onnx

    types = _value_types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for i, node in enumerate(model.graph.node):
        if i in which:
            out.graph.node.extend(_body(node, i, types, opset, source))
        else:
            out.graph.node.append(node)
    return out


def _value_types(model: Any) -> dict[str, Any]:
    """Types of the model's values (graph inputs, initializers, inferred values)."""
    import onnx
    from onnx import helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:   # noqa: BLE001 - fall back to what the model declares
        inferred = model
    types = {t.name: helper.make_tensor_type_proto(t.data_type, list(t.dims))
             for t in model.graph.initializer}
    for vi in (list(inferred.graph.input) + list(inferred.graph.value_info)
               + list(inferred.graph.output)):
        types[vi.name] = vi.type
    return types


def _function(node: Any, types: dict[str, Any], opset: int, source: str | None) -> Any:
    from onnx import FunctionProto, TypeProto

    schema = _schema(node.op_type, opset)
    proto = FunctionProto()
    plain = _version(schema.function_opset_versions, opset)
    if plain is not None:
        proto.ParseFromString(schema.get_function_with_opset_version(plain))
        return schema, proto
    version = _version(schema.context_dependent_function_opset_versions, opset)
    missing = [name for name in node.input if name and name not in types]
    if missing:
        raise NetworkError(f"node {node.name or node.op_type!r}: ONNX op {node.op_type} "
                           f"(opset {opset}) is defined as a function of its input types, "
                           f"but the type of {missing[0]!r} is unknown", file=source)
    input_types = [(types[name] if name else TypeProto()).SerializeToString()
                   for name in node.input]
    proto.ParseFromString(schema.get_context_dependent_function_with_opset_version(
        version, node.SerializeToString(), input_types))
    return schema, proto


def _body(node: Any, index: int, types: dict[str, Any], opset: int,
          source: str | None) -> list[Any]:
    """The nodes of ``node``'s function body, its values renamed to the node's."""
    schema, proto = _function(node, types, opset, source)
    attributes = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in attributes and spec.default_value.name:
            attributes[name] = spec.default_value
    prefix = f"{node.name or node.op_type + '_' + str(index)}__"
    names = {formal: actual for formal, actual in zip(proto.input, node.input, strict=False)}
    names.update({formal: actual for formal, actual in zip(proto.output, node.output,
                                                           strict=False) if actual})

    def rename(name: str) -> str:
        return "" if not name else names.get(name, prefix + name)

    nodes = [_renamed(inner, k, rename, attributes, prefix) for k, inner in
             enumerate(proto.node)]
    body = [o.version for o in proto.opset_import if _is_default(o.domain)]
    if body and body[0] != opset:
        nodes = _converted(node, nodes, types, body[0], opset, source)
    return nodes


def _renamed(inner: Any, k: int, rename: Callable[[str], str], attributes: dict,
             prefix: str) -> Any:
    from onnx import AttributeProto, NodeProto

    node = NodeProto()
    node.CopyFrom(inner)
    node.name = prefix + (inner.name or f"{inner.op_type}_{k}")
    del node.input[:], node.output[:], node.attribute[:]
    node.input.extend(rename(n) for n in inner.input)
    node.output.extend(rename(n) for n in inner.output)
    for attr in inner.attribute:
        if attr.ref_attr_name:
            if attr.ref_attr_name in attributes:
                new = AttributeProto()
                new.CopyFrom(attributes[attr.ref_attr_name])
                new.name = attr.name
                node.attribute.append(new)
        else:
            node.attribute.append(attr)
    return node


def _converted(node: Any, nodes: list[Any], types: dict[str, Any], body_opset: int,
               opset: int, source: str | None) -> list[Any]:
    """``nodes`` (a body written at ``body_opset``) rewritten for ``opset`` by ONNX's
    version converter."""
    import onnx
    from onnx import helper

    inputs = [helper.make_value_info(n, types[n]) for n in dict.fromkeys(node.input)
              if n and n in types]
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph(nodes, "body", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", body_opset)])
    try:
        converted = onnx.version_converter.convert_version(model, opset)
    except Exception as exc:   # noqa: BLE001 - the converter raises several kinds
        raise NetworkError(
            f"node {node.name or node.op_type!r}: ONNX op {node.op_type} (opset {opset}) "
            f"is a function of ops at opset {body_opset}, which ONNX's version converter "
            f"cannot bring to opset {opset}: {str(exc).splitlines()[0][:200]}",
            file=source) from None
    return list(converted.graph.node)

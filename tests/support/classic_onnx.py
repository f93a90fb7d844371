"""Classic ONNX-zoo models with random weights, and their check against onnxruntime.

The ``onnx`` wheel ships "light" versions of nine classic model-zoo networks
(``onnx/backend/test/data/light``: AlexNet, DenseNet-121, Inception v1/v2, ResNet-50,
ShuffleNet, SqueezeNet, VGG-19, ZFNet-512): IR version 3, opset 9, every initializer also
listed as a graph input, LRN, Softmax before opset 13, with each weight replaced by a
``ConstantOfShape`` of its shape.  :func:`classic_model` turns the weights back into
random initializers (scaled so that activations stay of order one, still listed as graph
inputs, IR version 3), which makes them classic zoo files in every respect that matters to
an importer, with outputs that are not constant.

Run ``python tests/support/classic_onnx.py [name ...]`` for the table of all nine in both
backends (relative error of the output against onnxruntime); the test-suite runs the
smaller ones (``tests/formats/test_onnx_classic.py``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512")


def light_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _random_weight(rng: np.random.Generator, shape: tuple[int, ...], op: str, index: int
                   ) -> np.ndarray:
    if op == "BatchNormalization":  # scale, bias, mean, var
        if index in (1, 4):
            return rng.uniform(0.5, 1.5, shape)
        return rng.normal(0.0, 0.1, shape)
    if len(shape) >= 2:  # Conv / Gemm weights: He scaling on the fan-in
        if op == "Conv":
            return rng.normal(0.0, np.sqrt(1.5 / int(np.prod(shape[1:]))), shape)
        return rng.normal(0.0, np.sqrt(1.0 / min(shape)), shape)
    return rng.normal(0.0, 0.05, shape)  # biases


def classic_model(name: str, seed: int = 0):
    """The light zoo model ``name`` with random initializers instead of its
    ``ConstantOfShape`` weights (IR version 3: initializers listed as graph inputs)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(light_dir() / f"light_{name}.onnx"))
    graph = model.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    users = {}
    for node in graph.node:
        for k, inp in enumerate(node.input):
            users.setdefault(inp, (node.op_type, k))
    new_nodes, new_inits = [], []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in inits[node.input[0]])
            op, index = users.get(node.output[0], ("", 0))
            value = _random_weight(rng, shape, op, index).astype(np.float32)
            new_inits.append(numpy_helper.from_array(value, node.output[0]))
            continue
        new_nodes.append(node)
    used = {i for n in new_nodes for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    inputs = [vi for vi in graph.input if vi.name not in inits or vi.name in used]
    inputs += [helper.make_tensor_value_info(t.name, onnx.TensorProto.FLOAT, list(t.dims))
               for t in new_inits]
    # The input of the final Softmax (the logits) is an output too: probabilities of a
    # random network saturate or flatten out, logits show every difference.
    outputs = list(graph.output)
    softmax = [n for n in new_nodes if n.op_type == "Softmax" and n.output[0] in
               {o.name for o in outputs}]
    for node in softmax:
        outputs.append(helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT,
                                                     None))
    new_graph = helper.make_graph(new_nodes, graph.name, inputs, outputs, kept + new_inits)
    out = helper.make_model(new_graph, opset_imports=list(model.opset_import),
                            producer_name=model.producer_name)
    out.ir_version = 3
    return out


def data_input(model) -> tuple[str, tuple[int, ...]]:
    """Name and shape of the one graph input that is not an initializer."""
    inits = {t.name for t in model.graph.initializer}
    vi = next(i for i in model.graph.input if i.name not in inits)
    return vi.name, tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def relative_error(value: np.ndarray, reference: np.ndarray) -> float:
    """Largest absolute difference over the largest reference magnitude."""
    return float(np.max(np.abs(value - reference)) / np.max(np.abs(reference)))


def onnxruntime_outputs(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of ``model`` (the independent reference)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)


def outputs_against_onnxruntime(model: Any, feeds: dict[str, np.ndarray],
                                backends=("torch", "jax")
                                ) -> tuple[list[np.ndarray], dict[str, list], Any]:
    """``(onnxruntime's outputs, {backend: its outputs}, the import)`` of ``model`` at
    ``feeds`` (in graph-input order), each backend built from ``import_onnx`` in the
    import's dtype."""
    from petab_sciml.formats.onnx import import_onnx
    from petab_sciml.plugins import get_backend

    reference = onnxruntime_outputs(model, feeds)
    result = import_onnx(model)
    outputs = {}
    for name in backends:
        backend = get_backend(name)
        module = backend.build(result.network, dtype=result.dtype)
        module = backend.set_parameters(module, result.parameters)
        outputs[name] = backend.forward(module, list(feeds.values()))
    return reference, outputs, result


def compare(name: str, backends=("torch", "jax"), seed: int = 0) -> dict[str, float]:
    """Relative max error of each backend's output against onnxruntime's."""
    model = classic_model(name, seed)
    input_name, shape = data_input(model)
    x = np.random.default_rng(seed + 1).normal(size=shape).astype(np.float32)
    reference, outputs, _ = outputs_against_onnxruntime(model, {input_name: x}, backends)
    return {b: max(relative_error(o, r) for o, r in zip(out, reference))
            for b, out in outputs.items()}


def main(argv: list[str]) -> int:
    names = argv or list(MODELS)
    print(f"{'model':14} {'torch':>10} {'jax':>10} {'seconds':>8}")
    worst = 0.0
    for name in names:
        start = time.time()
        errors = compare(name)
        worst = max(worst, *errors.values())
        print(f"{name:14} {errors['torch']:10.2e} {errors['jax']:10.2e} "
              f"{time.time() - start:8.1f}", flush=True)
    print(f"worst relative error: {worst:.2e}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    raise SystemExit(main(sys.argv[1:]))

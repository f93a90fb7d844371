"""ONNX import: import time, and our forward time over onnxruntime's, on the largest model
of the ONNX backend test data (``pytorch-converted`` and ``pytorch-operator``).

Prints the model, its import time (median of several imports) and the forward time of
the imported network in the torch backend (and JAX, if installed) next to onnxruntime
on the same inputs, with the ratio ours / onnxruntime.  Both sides use one thread.
Run: python benchmarks/bench_onnx.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from petab_sciml.backends.torch import BACKEND as TORCH
from petab_sciml.formats.onnx import import_onnx

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def largest_model() -> Path:
    """The case whose model.onnx is the largest file (the most initializer data)."""
    cases = [p for g in ("pytorch-converted", "pytorch-operator")
             for p in (DATA / g).iterdir() if (p / "model.onnx").is_file()]
    return max(cases, key=lambda p: (p / "model.onnx").stat().st_size)


def load_inputs(case: Path) -> list[np.ndarray]:
    out = []
    for f in sorted((case / "test_data_set_0").glob("input_*.pb")):
        t = onnx.TensorProto()
        t.ParseFromString(f.read_bytes())
        out.append(numpy_helper.to_array(t))
    return out


def timed(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    ort.set_default_logger_severity(3)  # the test data's opset 6 makes it chatty
    case = largest_model()
    path = case / "model.onnx"
    inputs = load_inputs(case)
    model_proto = onnx.load(str(path))
    import_s = timed(lambda: import_onnx(path), args.repeats, warmup=1)
    result = import_onnx(path)
    net = result.network
    print(f"model: {case.parent.name}/{case.name} ({path.stat().st_size} bytes, "
          f"{len(model_proto.graph.node)} ONNX nodes, layers "
          f"{[layer.type for layer in net.layers.values()]}, "
          f"{net.parameter_count()} parameters, inputs {[x.shape for x in inputs]})")
    print(f"import time: {import_s * 1e3:.1f} ms (median of {args.repeats})")

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    ort_s = timed(lambda: sess.run(None, feeds), args.repeats)
    print(f"onnxruntime forward: {ort_s * 1e3:.2f} ms")

    model = TORCH.build(net, dtype=result.dtype)
    TORCH.set_parameters(model, result.parameters)
    model.eval()
    tensors = [torch.as_tensor(np.array(x)) for x in inputs]

    def torch_forward() -> object:
        with torch.no_grad():
            return model(*tensors)

    torch_s = timed(torch_forward, args.repeats)
    print(f"torch backend forward: {torch_s * 1e3:.2f} ms  "
          f"(ratio ours / onnxruntime: {torch_s / ort_s:.2f})")
    try:
        from petab_sciml.backends.jax import BACKEND as JAX
    except Exception:  # pragma: no cover - JAX not installed
        return
    jmodel = JAX.set_parameters(JAX.build(net, dtype=result.dtype), result.parameters)
    jax_s = timed(lambda: JAX.forward(jmodel, inputs), args.repeats)
    print(f"jax backend forward (numpy in/out): {jax_s * 1e3:.2f} ms  "
          f"(ratio ours / onnxruntime: {jax_s / ort_s:.2f})")


if __name__ == "__main__":
    main()

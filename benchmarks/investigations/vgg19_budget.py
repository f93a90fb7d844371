"""VGG19 (143.7M parameters, torchvision's architecture written out here: this project
does not install torchvision) exported by PyTorch at opset 13 converts with the default
budgets and matches onnxruntime (issue 33, point 2: initializers held by the file pass
the element budget).

    python benchmarks/investigations/vgg19_budget.py [--keep DIR]

Prints the file size, the import time, the largest relative difference of both backends'
outputs against onnxruntime's, and the default ``max_elements``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIG = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
          512, 512, 512, 512, "M"]


def vgg19():
    import torch
    from torch import nn

    layers, channels = [], 3
    for v in CONFIG:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU()]
            channels = v
    torch.manual_seed(0)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(),
                         nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                         nn.ReLU(), nn.Linear(4096, 1000)).eval()


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort
    import torch

    from petab_sciml.formats.onnx import import_onnx
    from petab_sciml.limits import current
    from petab_sciml.plugins import get_backend

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp())
    path = folder / "vgg19.onnx"
    model = vgg19()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    n = sum(p.numel() for p in model.parameters())
    torch.onnx.export(model, (x,), str(path), opset_version=13, dynamo=False,
                      input_names=["x"], output_names=["y"])
    print(f"parameters {n:,}; file {path.stat().st_size / 2**20:.0f} MiB; default "
          f"max_elements {current().max_elements:,}")
    start = time.perf_counter()
    result = import_onnx(str(path))
    print(f"import {time.perf_counter() - start:.1f} s")
    reference = ort.InferenceSession(str(path)).run(None, {"x": x.numpy()})[0]
    for name in ("torch", "jax"):
        backend = get_backend(name)
        net = backend.set_parameters(backend.build(result.network), result.parameters)
        got = backend.forward(net, [x.numpy()])[0]
        rel = float(np.max(np.abs(got - reference)) / np.max(np.abs(reference)))
        print(f"{name}: largest difference / largest output {rel:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

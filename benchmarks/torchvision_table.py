"""The torchvision table: real vision networks through every route PyTorch offers.

Each model (torchvision's architectures with random weights, and two small recurrent
networks) is written by PyTorch five ways: ONNX through the TorchScript-based exporter at
opsets 13 and 17, ONNX through the dynamo exporter, ``torch.jit.trace`` and
``torch.jit.script`` (saved and loaded back, as a user would hand them over).  Every
artifact is read by petab_sciml and run in the torch and JAX backends; it passes when both
give PyTorch's own output (of the original module, eval mode) to 1e-5 relative
(max |ours - PyTorch| / max |PyTorch|).  An artifact PyTorch itself cannot write is listed
with PyTorch's error and not counted.

Needs torchvision, which does not import beside the project's pinned torch wheel; run it
in a separate environment, e.g.::

    python -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1
    /tmp/tv/bin/pip install -e '.[torch,jax,onnx]'
    /tmp/tv/bin/python benchmarks/torchvision_table.py [--only NAME ...] [--json out.json]

The results are recorded in docs/formats.md.  The test-suite covers each failure class
this table found with small modules compared against PyTorch itself
(tests/formats/test_torchscript_patterns.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

TOL = 1e-5
ROUTES = ("onnx13", "onnx17", "dynamo", "trace", "script")


# ----------------------------------------------------------------------------- models
def _torchvision(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kwargs)
    return build


def _vit() -> Any:
    from torchvision.models import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=10)


def _lstm_classifier() -> Any:
    import torch
    from torch import nn

    class LSTMClassifier(nn.Module):
        """Two-layer bidirectional LSTM over a sequence, last step to a Linear."""

        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)
            self.head = nn.Linear(32, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out, (h, c) = self.lstm(x)
            return self.head(out[:, -1]) + h.sum(0).mean(-1, keepdim=True)

    return LSTMClassifier()


def _gru_encoder() -> Any:
    import torch
    from torch import nn

    class GRUEncoder(nn.Module):
        """A GRU from an explicit zero state (torch.zeros with the batch size of the
        input), the final state through a Linear."""

        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 12, num_layers=2)
            self.head = nn.Linear(12, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h0 = torch.zeros(2, x.size(1), 12)
            out, h = self.gru(x, h0)
            return self.head(h[-1]) + out.mean(0)[:, :3]

    return GRUEncoder()


MODELS: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
    "resnet18": (_torchvision("resnet18"), (2, 3, 64, 64)),
    "mobilenet_v3_small": (_torchvision("mobilenet_v3_small"), (2, 3, 64, 64)),
    "squeezenet1_1": (_torchvision("squeezenet1_1"), (2, 3, 64, 64)),
    "shufflenet_v2_x0_5": (_torchvision("shufflenet_v2_x0_5"), (2, 3, 64, 64)),
    "efficientnet_b0": (_torchvision("efficientnet_b0"), (2, 3, 64, 64)),
    "googlenet": (_torchvision("googlenet", aux_logits=False, init_weights=True),
                  (2, 3, 64, 64)),
    "regnet_y_400mf": (_torchvision("regnet_y_400mf"), (2, 3, 64, 64)),
    "vit": (_vit, (2, 3, 32, 32)),
    "lstm_classifier": (_lstm_classifier, (2, 7, 8)),
    "gru_encoder": (_gru_encoder, (7, 2, 8)),
}
"""name -> (module factory, input shape)."""


def build(name: str) -> tuple[Any, Any]:
    """The eval-mode module (seeded random weights, random BatchNorm statistics, random
    values for parameters initialised to zeros, such as ViT's head) and its input."""
    import torch

    factory, shape = MODELS[name]
    torch.manual_seed(0)
    module = factory().eval()
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
                sub.running_mean.normal_(0.0, 0.1)
                sub.running_var.uniform_(0.5, 1.5)
        for param in module.parameters():  # zero-initialised heads give zero outputs
            if not param.any():
                param.normal_(0.0, 0.05)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    return module, x


# ----------------------------------------------------------------------------- routes
@contextlib.contextmanager
def _quiet():
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def write(route: str, module: Any, x: Any, folder: Path) -> Path:
    """The artifact of ``route`` (raises PyTorch's error if PyTorch cannot write it)."""
    import torch

    with _quiet():
        if route in ("onnx13", "onnx17"):
            path = folder / f"{route}.onnx"
            torch.onnx.export(module, (x,), str(path), dynamo=False,
                              opset_version=int(route[4:]))
        elif route == "dynamo":
            path = folder / "dynamo.onnx"
            torch.onnx.export(module, (x,), dynamo=True).save(str(path))
        else:
            path = folder / f"{route}.pt"
            archive = torch.jit.trace(module, (x,)) if route == "trace" \
                else torch.jit.script(module)
            torch.jit.save(archive, str(path))
    return path


def read(route: str, path: Path) -> tuple[Any, Any, str]:
    """(network, parameters, dtype) of an artifact, read by petab_sciml."""
    if route in ("onnx13", "onnx17", "dynamo"):
        from petab_sciml.formats.onnx import import_onnx

        result = import_onnx(path)
        return result.network, result.parameters, result.dtype
    from petab_sciml.formats import torchscript

    network, params = torchscript.read_with_parameters(path, trust_code=True)
    return network, params, "float32"


def relative_error(got: Any, ref: Any) -> float:
    got = [np.asarray(g, dtype=np.float64) for g in got]
    ref = [np.asarray(r, dtype=np.float64) for r in ref]
    if len(got) != len(ref) or any(g.shape != r.shape for g, r in zip(got, ref)):
        return float("inf")
    return max(float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), 1e-30))
               for g, r in zip(got, ref))


def check(name: str, routes: tuple[str, ...]) -> list[dict[str, Any]]:
    import torch

    from petab_sciml.plugins import get_backend

    module, x = build(name)
    with torch.no_grad():
        out = module(x)
    ref = [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for route in routes:
            row: dict[str, Any] = {"model": name, "route": route}
            start = time.time()
            try:
                path = write(route, module, x, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - recorded
                row["status"] = "not written"
                row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                rows.append(row)
                print(f"{name:20} {route:8} PyTorch cannot write it: {row['error'][:150]}",
                      flush=True)
                continue
            try:
                network, params, dtype = read(route, path)
                for backend_name in ("torch", "jax"):
                    backend = get_backend(backend_name)
                    model = backend.build(network, dtype=dtype)
                    model = backend.set_parameters(model, params)
                    got = backend.forward(model, [x.numpy()])
                    row[backend_name] = relative_error(got, ref)
                ok = row["torch"] <= TOL and row["jax"] <= TOL
                row["status"] = "pass" if ok else "fail"
                row["layers"] = len(network.layers)
                row["nodes"] = len(network.nodes)
            except Exception as exc:  # noqa: BLE001 - recorded
                row["status"] = "fail"
                row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                row["traceback"] = traceback.format_exc()
            row["seconds"] = round(time.time() - start, 1)
            rows.append(row)
            detail = (f"torch {row.get('torch', float('nan')):.1e} "
                      f"jax {row.get('jax', float('nan')):.1e}") if "torch" in row else \
                row.get("error", "")[:200]
            print(f"{name:20} {route:8} {row['status']:5} {detail} ({row['seconds']} s)",
                  flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table: one row per model, one column per route."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    routes = [r for r in ROUTES if any(row["route"] == r for row in rows)]
    lines = ["| model | " + " | ".join(routes) + " |",
             "|---|" + "---|" * len(routes)]
    for model in models:
        cells = []
        for route in routes:
            row = next((r for r in rows if r["model"] == model and r["route"] == route),
                       None)
            if row is None:
                cells.append("")
            elif row["status"] == "pass":
                cells.append(f"pass ({max(row['torch'], row['jax']):.0e})")
            elif row["status"] == "not written":
                cells.append("n/a (PyTorch)")
            else:
                cells.append("FAIL")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    written = [r for r in rows if r["status"] != "not written"]
    passed = sum(r["status"] == "pass" for r in written)
    lines.append("")
    lines.append(f"{passed} / {len(written)} artifacts pass in both backends (1e-5 "
                 f"relative); {len(rows) - len(written)} not written by PyTorch.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="model names")
    parser.add_argument("--routes", nargs="*", default=list(ROUTES))
    parser.add_argument("--json", help="write the rows (with errors) to this file")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for name in args.only or list(MODELS):
        rows += check(name, tuple(args.routes))
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print()
    print(table(rows))
    not_written = [r for r in rows if r["status"] == "not written"]
    for r in not_written:
        print(f"- {r['model']} / {r['route']}: {r['error']}")
    return 0 if all(r["status"] != "fail" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

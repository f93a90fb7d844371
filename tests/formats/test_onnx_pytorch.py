"""ONNX files written by PyTorch's exporters import with PyTorch's outputs and names.

Every module of ``test_cases/generate.py`` is exported with the dynamo exporter (as is,
and without its optimizer: ``optimize=False``) and with the TorchScript-based exporter;
the import must give PyTorch's outputs to 1e-5 (relative and absolute), and for
unoptimized dynamo exports every parameter must come back under its PyTorch name
(module path -> PEtab id as :mod:`petab_sciml.formats.torch_fx` names them) with its
PyTorch value.  Where PyTorch's exporter itself fails or writes a wrong graph (checked
with onnxruntime), the case is skipped with the reason.

Also here: the three networks of the PEtab SciML discussion, whose exports must import
as lifted layers, and one optimizer step on them that must give the same parameters in
both backends and in PyTorch.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import io
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")

from petab_sciml.backends.torch import BACKEND as TORCH  # noqa: E402
from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats.onnx import import_onnx  # noqa: E402
from petab_sciml.formats.torch_fx import module_path_id  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOL = 1e-5

EXPORTER_FAILS = {
    ("bilinear", "ts"): "TorchScript exporter: aten::bilinear is not supported",
    ("squeeze", "ts"): "TorchScript exporter: squeeze of a tuple of dims raises",
    ("amax_amin", "dynamo"): "dynamo exporter: amin() without dim raises (onnxscript's "
                             "aten_amin requires dim)",
    ("reshape_as_rounding", "ts"): "TorchScript exporter: 'Exporting the operator "
                                   "aten::trunc to ONNX opset version 20 is not supported'",
    ("trigonometric", "ts"): "TorchScript exporter: 'Exporting the operator aten::atanh "
                             "to ONNX opset version 20 is not supported'",
    ("lstm_proj_state", "ts"): "TorchScript exporter: 'Unsupported: ONNX export of operator "
                               "LSTM, LSTMs with projections'",
    "functional_pools_1d_3d": "both exporters refuse an adaptive 3-d pool whose output "
                              "size (2) does not divide the input size (5): dynamo 'No ONNX "
                              "function found for aten._adaptive_avg_pool3d', TorchScript "
                              "'Unsupported: ONNX export of operator adaptive_avg_pool3d, "
                              "output size that are not factor of input size'",
}
"""PyTorch exporters failing on a module (the export raises)."""

EXPORTER_WRONG = {
    "avgpool2d": "both exporters drop divisor_override (onnxruntime disagrees with PyTorch)",
    ("softplus", "ts"): "TorchScript exporter drops softplus' threshold (onnxruntime "
                        "disagrees with PyTorch)",
    ("rounding_division", "ts"): "TorchScript exporter writes floor_divide (and //) as a "
                                 "cast to int64 and back, i.e. truncation (onnxruntime "
                                 "disagrees with PyTorch on negative quotients)",
    ("activation_layers", "ts"): "TorchScript exporter drops nn.Softplus' threshold "
                                 "(onnxruntime disagrees with PyTorch)",
}
"""Exports whose ONNX graph computes something else than PyTorch (verified: onnxruntime
gives the same as our import, not PyTorch's outputs)."""

EXPORTER_INVALID = {
    ("lstm_proj_state", "dynamo"): "dynamo exporter: writes an ONNX LSTM of hidden_size "
                                   "proj_size with the cell state of hidden_size (onnxruntime "
                                   "refuses it: 'Input initial_c must have shape {1,2,3}')",
}
"""Exports that are not valid models: onnxruntime refuses to run them, and the import
refuses with a message."""

VARIANTS = ("dynamo_unoptimized", "dynamo", "torchscript")
"""dynamo: ``torch.onnx.export(dynamo=True)``, i.e. the unoptimized program after
``ONNXProgram.optimize()`` (onnxscript's optimizer: constant folding, BatchNorm fusion)."""


def _generate() -> Any | None:
    path = REPO / "test_cases" / "generate.py"
    if not path.is_file():  # pragma: no cover
        return None
    name = "petab_sciml_reference_cases_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


GENERATE = _generate()
CASES = list(GENERATE.CASES) if GENERATE is not None else []


@pytest.fixture(scope="module", autouse=True)
def _fast_dynamo():
    """Speed the dynamo exporter up for a test session: its op registry and the set of
    composite-implicit ops are rebuilt on every export but never change."""
    patches: list[tuple[Any, str, Any]] = []
    try:
        from torch.export import decomp_utils, exported_program
        from torch.onnx._internal.exporter import _registration
    except ImportError:  # pragma: no cover - other torch versions
        yield
        return
    original = _registration.ONNXRegistry.__dict__.get("from_torchlib")
    if isinstance(original, classmethod):
        cache: dict[str, Any] = {}

        def cached(cls, *args, **kwargs):
            key = repr((args, sorted(kwargs.items())))
            if key not in cache:
                cache[key] = original.__func__(cls, *args, **kwargs)
            return cache[key]

        patches.append((_registration.ONNXRegistry, "from_torchlib", classmethod(cached)))
    collect = getattr(exported_program, "_collect_all_valid_cia_ops", None)
    if collect is not None:
        ops = functools.cache(collect)
        for mod in (exported_program, decomp_utils):
            if getattr(mod, "_collect_all_valid_cia_ops", None) is collect:
                patches.append((mod, "_collect_all_valid_cia_ops", ops))
    saved = [(obj, name, obj.__dict__[name]) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


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


def export(module: Any, inputs: list[Any], path: Path, **kwargs: Any) -> None:
    """torch.onnx.export with its console output and warnings silenced."""
    with _quiet():
        torch.onnx.export(module, tuple(inputs), str(path), **kwargs)


def export_all(module: Any, inputs: list[Any], folder: Path
               ) -> dict[str, Path | Exception]:
    """The three exports of ``module`` (or the exception an exporter raised)."""
    out: dict[str, Path | Exception] = {}
    try:
        with _quiet():
            program = torch.onnx.export(module, tuple(inputs), dynamo=True, optimize=False)
            program.save(str(folder / "dynamo_unoptimized.onnx"))
            program.optimize()
            program.save(str(folder / "dynamo.onnx"))
        out["dynamo_unoptimized"] = folder / "dynamo_unoptimized.onnx"
        out["dynamo"] = folder / "dynamo.onnx"
    except Exception as exc:
        out["dynamo_unoptimized"] = out["dynamo"] = exc
    try:
        export(module, inputs, folder / "torchscript.onnx", dynamo=False)
        out["torchscript"] = folder / "torchscript.onnx"
    except Exception as exc:
        out["torchscript"] = exc
    return out


def run_import(path: Path, inputs: list[np.ndarray]) -> tuple[Any, list[np.ndarray]]:
    result = import_onnx(path)
    model = TORCH.build(result.network, dtype=result.dtype)
    TORCH.set_parameters(model, result.parameters)
    return result, list(TORCH.forward(model, inputs))


def onnxruntime_outputs(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, inputs)))


def pytorch_names(module: Any) -> dict[str, np.ndarray]:
    """``group.array`` -> value for every parameter and buffer, in IR naming."""
    out = {}
    for key, value in module.state_dict().items():
        path, _, array = key.rpartition(".")
        group = module_path_id(path) if path else "params"
        out[f"{group}.{array}"] = value.detach().numpy()
    return out


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=TOL, atol=TOL)


@pytest.mark.skipif(GENERATE is None, reason="test_cases/generate.py not found")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.slow
def test_pytorch_export_imports(case: Any, tmp_path: Path):
    module, inputs = GENERATE.build(case, 1)
    module = copy.deepcopy(module).eval()
    with torch.no_grad():
        ref = module(*inputs)
    ref = [r.numpy() for r in (ref if isinstance(ref, (tuple, list)) else (ref,))]
    x = [t.numpy() for t in inputs]
    reasons = []
    exports = export_all(module, inputs, tmp_path)
    for variant in VARIANTS:
        kind = "ts" if variant == "torchscript" else "dynamo"
        path = exports[variant]
        if isinstance(path, Exception):
            exc = path
            reason = EXPORTER_FAILS.get((case.name, kind)) or EXPORTER_FAILS.get(case.name)
            if reason is None and "adaptive" in case.name:
                reason = "PyTorch exporter: adaptive pooling whose output size does not " \
                         "divide the input size"
            assert reason, f"{variant}: PyTorch export failed unexpectedly: {exc}"
            reasons.append(f"{variant}: {reason}")
            continue
        invalid = EXPORTER_INVALID.get((case.name, kind))
        if invalid is not None:
            with pytest.raises(NetworkError):
                run_import(path, x)
            with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error types
                onnxruntime_outputs(path, x)
            reasons.append(f"{variant}: {invalid}")
            continue
        result, got = run_import(path, x)
        ours_ok = len(got) == len(ref) and all(close(g, r) for g, r in zip(got, ref))
        if not ours_ok:
            reason = EXPORTER_WRONG.get((case.name, kind)) or EXPORTER_WRONG.get(case.name)
            assert reason, f"{variant}: imported outputs differ from PyTorch's"
            # The file itself computes something else: onnxruntime agrees with us.
            rt = onnxruntime_outputs(path, x)
            assert all(close(g, r) for g, r in zip(got, rt)), variant
            reasons.append(f"{variant}: {reason}")
            continue
        if variant == "dynamo_unoptimized":
            names = pytorch_names(module)
            for group, arrays in result.parameters.items():
                if group == "constants":
                    continue
                for array, value in arrays.items():
                    key = f"{group}.{array}"
                    assert key in names, f"{key} is not a PyTorch name ({sorted(names)})"
                    np.testing.assert_array_equal(value, names[key], err_msg=key)
    if reasons:
        pytest.skip("; ".join(reasons))


# ----------------------------------------------------------------------------- discussion
def _discussion_nets() -> dict[str, tuple[Any, tuple[int, ...], set[str]]]:
    nn = torch.nn
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(),
                        nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 2))
    cnn = nn.Sequential(nn.Conv1d(4, 4, 3), nn.ReLU(), nn.MaxPool1d(2), nn.Flatten(),
                        nn.Linear(16, 2))
    drop = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Dropout(0.2), nn.Linear(5, 5),
                         nn.Tanh(), nn.Dropout(0.2), nn.Linear(5, 2))
    return {
        "mlp": (mlp, (4, 2), {"Linear"}),
        "conv": (cnn, (3, 4, 10), {"Conv1d", "MaxPool1d", "Flatten", "Linear"}),
        "dropout": (drop, (4, 2), {"Linear", "Dropout"}),
    }


def _jax_backend():
    try:
        from petab_sciml.backends.jax import BACKEND
    except Exception:  # pragma: no cover
        return None
    return BACKEND


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("name", ["mlp", "conv", "dropout"])
def test_discussion_networks(name: str, exporter: str, tmp_path: Path):
    module, shape, layer_types = _discussion_nets()[name]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "net.onnx"
    # Dropout is only kept in training-mode exports.
    if exporter == "dynamo":
        module.train(name == "dropout")
        export(module, [x], path, dynamo=True)
    else:
        mode = torch.onnx.TrainingMode.TRAINING if name == "dropout" else \
            torch.onnx.TrainingMode.EVAL
        export(module, [x], path, dynamo=False, training=mode,
               do_constant_folding=name != "dropout")
    result = import_onnx(path)
    net = result.network
    assert {layer.type for layer in net.layers.values()} == layer_types
    assert {n.function for n in net.nodes if n.op == "call_function"} <= {"tanh", "relu"}
    if name == "dropout":
        assert [layer.config["p"] for layer in net.layers.values()
                if layer.type == "Dropout"] == [0.2, 0.2]

    # One SGD step on sum(outputs) (eval mode) in both backends and in PyTorch.
    lr = 0.1
    module.eval()
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    opt.zero_grad()
    module(x).sum().backward()
    opt.step()
    expected = pytorch_names(module)
    model = TORCH.build(net)
    TORCH.set_parameters(model, result.parameters)
    grads = TORCH.gradients(model, [x.numpy()])
    updated = {f"{g}.{a}": result.parameters[g][a] - lr * grads[g][a]
               for g in grads for a in grads[g]}
    assert updated
    for key, value in updated.items():
        assert key in expected, f"{key} is not a PyTorch name ({sorted(expected)})"
        np.testing.assert_allclose(value, expected[key], rtol=1e-5, atol=1e-6, err_msg=key)
    jax = _jax_backend()
    if jax is None:
        pytest.skip("JAX backend not available")
    jmodel = jax.set_parameters(jax.build(net), result.parameters)
    jgrads = jax.gradients(jmodel, [x.numpy()])
    for g, arrays in grads.items():
        for a in arrays:
            jupdated = result.parameters[g][a] - lr * jgrads[g][a]
            np.testing.assert_allclose(jupdated, updated[f"{g}.{a}"], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{g}.{a}")

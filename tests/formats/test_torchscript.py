"""TorchScript archives -> IR, checked against PyTorch itself.

Every network of ``test_cases/`` (the modules of ``test_cases/generate.py``) is passed
through ``torch.jit.script`` and through ``torch.jit.trace``, saved, and read back in
*fresh processes* that never import the module classes.  There the archive is lifted to
the IR and run in the torch and JAX backends; outputs must equal PyTorch's outputs of the
original module (computed here) to 1e-6 (absolute, relative above 1), and layer types and
arguments must equal those of the case's ``net.yaml``.

The worker processes run in parallel (JAX compiles every network once); the helpers here
are shared with the other format tests.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import operator
import os
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
CASES_DIR = REPO / "test_cases"
TOL = 1e-6

SCRIPT_UNSUPPORTED = {
    "adaptivemaxpool2d": "nn.AdaptiveMaxPool2d((3, None)): TorchScript types output_size as "
                         "List[int] and rejects None",
    "adaptiveavgpool2d_unbatched": "nn.AdaptiveAvgPool2d((None, 3)): same TorchScript "
                                   "limitation",
    "activation_modules": "nn.Hardtanh(-1, 2) with int bounds: TorchScript expects floats",
    "functional_pools_1d_3d": "F.adaptive_avg_pool3d(x, (1, 2, None)): TorchScript types "
                              "output_size as List[int] and rejects None",
}
"""Cases PyTorch itself cannot script (the trace path still covers them)."""



# ----------------------------------------------------------------------------- shared helpers
def load_generate() -> Any | None:
    """``test_cases/generate.py`` as a module (None if it is missing)."""
    path = CASES_DIR / "generate.py"
    if not path.is_file():
        return None
    name = "petab_sciml_reference_cases_generate"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def case_folder(index: int, case: Any) -> Path:
    return CASES_DIR / f"{index:03d}_{case.name}"


def reference_outputs(case: Any, module: Any, inputs: list[Any], train: bool) -> list[np.ndarray]:
    module = copy.deepcopy(module)
    module.train(train)
    with torch.no_grad():
        result = module(*inputs)
    result = result if isinstance(result, (tuple, list)) else (result,)
    return [r.detach().numpy() for r in result]


def run_mode(case: Any) -> bool:
    """Training mode for the comparison: the case's mode, but eval for dropout cases (the
    outputs are then deterministic)."""
    return case.mode == "train" and not case.dropout


def _fx_scriptable(module: Any) -> Any:
    """torch.fx GraphModule of ``module`` that TorchScript accepts (the reference modules
    call Python lambdas from forward, which TorchScript cannot compile)."""
    gm = torch.fx.symbolic_trace(module)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is operator.abs:
            node.target = torch.abs  # TorchScript has no builtin abs()
    gm.recompile()
    for name, child in module.named_children():
        setattr(gm, name, child)  # keep whole layers (fx copies only the used arrays)
    return gm


def _reset_script_state() -> None:
    torch.jit._recursive.concrete_type_store = torch.jit._recursive.ConcreteTypeStore()
    torch.jit._state._clear_class_state()


def script(module: Any) -> Any:
    """``torch.jit.script`` of ``module`` (of its fx GraphModule when the module itself is
    not scriptable)."""
    try:
        return torch.jit.script(module)
    except Exception:  # noqa: BLE001
        _reset_script_state()
        try:
            return torch.jit.script(_fx_scriptable(module))
        except Exception:
            _reset_script_state()
            raise


def trace(module: Any, inputs: list[Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(copy.deepcopy(module), tuple(inputs), check_trace=False)


def save(scripted: Any, path: Path) -> None:
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    path.write_bytes(buffer.getvalue())


def normalized_config(layer: Any) -> dict[str, Any]:
    """A layer's resolved arguments with equivalent spellings made equal (3 == [3, 3],
    stride None == kernel_size, tuples == lists); ignored arguments dropped."""
    spec = layer.spec
    out: dict[str, Any] = {}
    for arg in spec.args:
        if arg.ignored:
            continue
        value = layer.config[arg.name]
        if isinstance(value, tuple):
            value = list(value)
        base, _, n = arg.kind.partition(":")
        if base in ("ints", "ints?", "padding", "sizes?") and isinstance(value, int) and n:
            value = [value] * int(n)
        if base == "shape" and isinstance(value, int):
            value = [value]
        out[arg.name] = value
    if out.get("stride", 0) is None and "kernel_size" in out:
        out["stride"] = out["kernel_size"]
    return out


def layer_summary(network: Any) -> dict[str, Any]:
    return {lid: [layer.type, normalized_config(layer)] for lid, layer in network.layers.items()}


def max_error(got: Any, expected: Any) -> float:
    """max |got - expected| / max(1, |expected|) over all outputs (inf on shape mismatch)."""
    if len(got) != len(expected):
        return float("inf")
    worst = 0.0
    for g, e in zip(got, expected):
        g, e = np.asarray(g, dtype=np.float64), np.asarray(e, dtype=np.float64)
        if g.shape != e.shape:
            return float("inf")
        if g.size:
            worst = max(worst, float(np.max(np.abs(g - e) / np.maximum(1.0, np.abs(e)))))
    return worst


WORKER = r"""
import json, sys, traceback
import numpy as np

jobs = json.load(open(sys.argv[1]))
from petab_sciml.plugins import get_backend, get_format
from petab_sciml.formats import yaml as yaml_format
sys.path.insert(0, sys.argv[3])
from test_torchscript import layer_summary, max_error

backends = {name: get_backend(name) for name in ("torch", "jax")}
results, seen = {}, {}
for job in jobs:
    out = {}
    try:
        fmt = get_format(job["format"])
        reader = sys.modules[fmt.read.__module__]
        network, params = reader.read_with_parameters(job["path"], **job.get("options", {}))
        data = np.load(job["data"])
        inputs = [data[f"input{k}"] for k in range(job["n_inputs"])]
        expected = [data[f"output{k}"] for k in range(job["n_outputs"])]
        dump = yaml_format.dumps(network)
        key = json.dumps([layer_summary(network), network.inputs, [
            [n.name, n.op, n.target, list(n.args), dict(n.kwargs)] for n in network.nodes]],
            default=str)
        for name, backend in backends.items():
            memo = (name, key, job["data"], job["train"])
            if memo in seen:  # same IR, parameters and data as an earlier job (JAX compiles)
                out[name] = seen[memo]
                continue
            try:
                model = backend.build(network)
                model = backend.set_parameters(model, params)
                got = backend.forward(model, inputs, train=job["train"])
                out[name] = seen[memo] = max_error(got, expected)
            except Exception as exc:
                out[name + "_error"] = f"{type(exc).__name__}: {exc}"
        out["layers"] = layer_summary(network)
        if job.get("yaml"):
            out["yaml_layers"] = layer_summary(yaml_format.read(job["yaml"]))
        out["loaded_modules"] = sorted(m for m in sys.modules if "reference_cases" in m)
        out["network"] = dump
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()
    results[job["key"]] = out
json.dump(results, open(sys.argv[2], "w"))
"""


def run_workers(jobs: list[dict[str, Any]], folder: Path, n_workers: int = 4
                ) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` in fresh Python processes (in parallel); results by job key."""
    folder.mkdir(parents=True, exist_ok=True)
    worker = folder / "worker.py"
    worker.write_text(WORKER)
    n_workers = max(1, min(n_workers, len(jobs), os.cpu_count() or 1))  # one per core
    procs = []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONWARNINGS"] = "ignore"
    env["PETAB_SCIML_FRESH_WORKER"] = "1"
    for i in range(n_workers):
        chunk = jobs[i * len(jobs) // n_workers:(i + 1) * len(jobs) // n_workers]
        job_file, out_file = folder / f"jobs{i}.json", folder / f"results{i}.json"
        job_file.write_text(json.dumps(chunk))
        procs.append((subprocess.Popen(
            [sys.executable, str(worker), str(job_file), str(out_file),
             str(Path(__file__).resolve().parent)],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT), out_file))
    results: dict[str, dict[str, Any]] = {}
    for proc, out_file in procs:
        output, _ = proc.communicate(timeout=600)
        if proc.returncode != 0 or not out_file.is_file():
            raise AssertionError(f"worker failed ({proc.returncode}):\n"
                                 f"{output.decode(errors='replace')[-4000:]}")
        results.update(json.loads(out_file.read_text()))
    return results


def save_data(path: Path, inputs: list[Any], outputs: list[np.ndarray]) -> None:
    arrays = {f"input{k}": np.asarray(x) for k, x in enumerate(inputs)}
    arrays.update({f"output{k}": o for k, o in enumerate(outputs)})
    np.savez(path, **arrays)


def check_result(result: Mapping[str, Any], *, tol: float = TOL, layers: bool = True
                 ) -> None:
    assert "error" not in result, result.get("traceback", result.get("error"))
    errors = {k: v for k, v in result.items() if k.endswith("_error")}
    assert not errors, errors
    assert not result["loaded_modules"], "the fresh process imported the module classes"
    assert result["torch"] <= tol, f"torch backend differs from PyTorch by {result['torch']}"
    assert result["jax"] <= tol, f"JAX backend differs from PyTorch by {result['jax']}"
    if layers and "yaml_layers" in result:
        assert result["layers"] == result["yaml_layers"]


# ----------------------------------------------------------------------------- the cases
# Worker processes import this module for its helpers only: never the module classes.
GENERATE = None if os.environ.get("PETAB_SCIML_FRESH_WORKER") else load_generate()
CASES = list(enumerate(GENERATE.CASES, start=1)) if GENERATE is not None else []
KINDS = ("script", "trace")


@pytest.fixture(scope="module")
def lifted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Archives of every case, lifted and run in fresh processes."""
    folder = tmp_path_factory.mktemp("torchscript")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jobs, failures = _archive_jobs(folder)
    results = run_workers(jobs, folder / "work")
    return {"results": results, "failures": failures}


def _archive_jobs(folder: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    jobs, failures = [], {}
    for index, case in CASES:
        module, inputs = GENERATE.build(case, 1)
        train = run_mode(case)
        data = folder / f"{case.name}.npz"
        expected = reference_outputs(case, module, inputs, train)
        save_data(data, [x.numpy() for x in inputs], expected)
        for kind in KINDS:
            key = f"{case.name}:{kind}"
            try:
                archive = script(copy.deepcopy(module)) if kind == "script" else trace(
                    module, inputs)
            except Exception as exc:  # noqa: BLE001
                failures[key] = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
                continue
            path = folder / f"{case.name}.{kind}.pt"
            save(archive, path)
            yaml_file = case_folder(index, case) / "net.yaml"
            jobs.append({
                "key": key, "format": "torchscript", "path": str(path), "data": str(data),
                "options": {"trust_code": True, "net_id": GENERATE.NET_ID,
                            "input_ids": case.input_ids},
                "n_inputs": len(case.inputs), "n_outputs": len(expected),
                "train": train, "yaml": str(yaml_file) if yaml_file.is_file() else None,
            })
    return jobs, failures


@pytest.mark.skipif(GENERATE is None, reason="test_cases/generate.py not found")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[c.name for _, c in CASES])
@pytest.mark.slow
def test_case_through_torchscript(case: Any, kind: str, lifted: dict[str, Any]) -> None:
    key = f"{case.name}:{kind}"
    if key in lifted["failures"]:
        if kind == "script" and case.name in SCRIPT_UNSUPPORTED:
            pytest.xfail(f"PyTorch cannot script it: {SCRIPT_UNSUPPORTED[case.name]}")
        pytest.fail(f"torch.jit.{kind} failed: {lifted['failures'][key]}")
    check_result(lifted["results"][key])


# ----------------------------------------------------------------------------- unit tests
def test_refuses_without_trust_before_touching_the_file(tmp_path: Path) -> None:
    from petab_sciml.formats import torchscript
    from petab_sciml.formats.pytorch_file import UntrustedCodeError

    missing = tmp_path / "model.pt"
    with pytest.raises(UntrustedCodeError) as info:
        torchscript.read(missing)
    message = str(info.value)
    assert str(missing) in message and "runs code" in message
    assert "trust_code=True" in message and "--trust-code" in message


def test_registered_as_code_running_format() -> None:
    from petab_sciml.plugins import get_format

    fmt = get_format("torchscript")
    assert fmt.runs_code and fmt.write is None and ".pt" in fmt.extensions


def _lift(module: Any, **options: Any) -> Any:
    from petab_sciml.formats.torchscript import network_from_torchscript

    return network_from_torchscript(module, **options)


def test_scripted_functions_and_modules_are_lifted() -> None:
    import torch.nn.functional as F
    from torch import nn

    def helper(x: torch.Tensor, k: float) -> torch.Tensor:
        return F.tanhshrink(x) * k

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.act = nn.LeakyReLU(0.3)
            self.scale = nn.Parameter(torch.full((3,), 0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.fc(x)) * self.scale

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()
            self.drop = nn.Dropout(0.2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.dropout(helper(F.softsign(self.block(x)), 2.0), 0.1, self.training)
            return self.drop(y.view(y.size(0), -1))[:, 1:]

    module = Net().eval()
    network, params = _lift(torch.jit.script(module), net_id="net")
    assert {lid: layer.type for lid, layer in network.layers.items()} == {
        "block_fc": "Linear", "block_act": "LeakyReLU", "dropout": "Dropout",
        "drop": "Dropout"}
    assert network.layers["dropout"].config["p"] == 0.1
    assert network.layers["block_act"].config["negative_slope"] == pytest.approx(0.3)
    functions = [n.function for n in network.nodes if n.function]
    assert "softsign" in functions and "getitem" in functions
    # torch.nn.functional calls inside user functions are inlined with them
    assert "tanh" in functions and "sub" in functions
    assert "flatten" in functions  # view(size(0), -1)
    assert set(params) == {"block_fc", "block"} and "scale" in params["block"]
    from petab_sciml.plugins import get_backend

    backend = get_backend("torch")
    model = backend.set_parameters(backend.build(network), params)
    x = torch.randn(4, 3)
    got = backend.forward(model, [x.numpy()])[0]
    np.testing.assert_allclose(got, module(x).detach().numpy(), atol=1e-6)


def test_control_flow_on_training_is_refused() -> None:
    from torch import nn

    from petab_sciml.errors import NetworkError

    class Net(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                return x * 2
            return x

    with pytest.raises(NetworkError, match="training flag"):
        _lift(torch.jit.script(Net()), net_id="net")


def test_unsupported_op_names_the_file(tmp_path: Path) -> None:
    from torch import nn

    from petab_sciml.errors import NetworkError
    from petab_sciml.formats import torchscript

    class Net(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.logcumsumexp(x, 0)

    path = tmp_path / "net.pt"
    save(torch.jit.script(Net()), path)
    with pytest.raises(NetworkError) as info:
        torchscript.read(path, trust_code=True)
    assert str(path) in str(info.value) and "aten::logcumsumexp" in str(info.value)


class _SizedSplits(torch.nn.Module if torch is not None else object):
    """split by a list of sizes, split_with_sizes and chunk (issue 33): the pieces are
    static in scripted and traced graphs alike."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.split(x, [2, 3], dim=1)
        f, g = x.split_with_sizes([1, 4], dim=1)
        q, k = x.chunk(2, dim=0)
        return a * b[:, :2] + f * g[:, :2].tanh() + (q - k).sum()


class _SizeDependentSplits(torch.nn.Module if torch is not None else object):
    """split into pieces of one size and unbind: the number of pieces depends on the
    input's size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, d, e = x.split(2, dim=1)
        rows = x.unbind(0)
        return c.mean() * d.sum(1, keepdim=True) + e + rows[0][0] * rows[-1][4]


def _agree_with_pytorch(module, compiled, x) -> None:
    from petab_sciml.plugins import get_backend

    network, params = _lift(compiled, net_id="net")
    expected = module(x).detach().numpy()
    for name in ("torch", "jax"):
        backend = get_backend(name)
        model = backend.set_parameters(backend.build(network), params)
        got = backend.forward(model, [x.numpy()])[0]
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("how", ["script", "trace"])
def test_split_by_sizes_and_chunk_in_both_backends(how: str) -> None:
    module = _SizedSplits().eval()
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(3))
    compiled = torch.jit.script(module) if how == "script" else torch.jit.trace(module, x)
    _agree_with_pytorch(module, compiled, x)


def test_split_by_one_size_and_unbind_traced_in_both_backends() -> None:
    module = _SizeDependentSplits().eval()
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(4))
    _agree_with_pytorch(module, torch.jit.trace(module, x), x)


def test_split_by_one_size_scripted_names_the_size_it_needs() -> None:
    """A scripted graph carries no sizes, so the number of pieces is unknown."""
    from petab_sciml.errors import NetworkError

    with pytest.raises(NetworkError, match="size of dimension 1"):
        _lift(torch.jit.script(_SizeDependentSplits()), net_id="net")

"""ONNX's operator conformance suite (the node test cases that ``onnx`` ships as code,
``onnx.backend.test.case.node``) through ``import_onnx`` and both backends.

    python tests/support/onnx_conformance.py [--write-docs] [--write-baseline]
        [--json OUT] [--limit N]

Each case is a one-node (or expanded) model with input and expected output arrays.  As
in exported networks, integer and bool graph inputs (axes, shapes, indices) become
initializers holding the test's values; float inputs stay graph inputs.  The outcome of
a case in a backend is one of

* ``pass``: every output within the case's tolerances (``rtol``/``atol``, the ONNX
  runner's, default 1e-3 / 1e-7) of the expected one, for every data set;
* ``refused``: ``import_onnx``, ``build`` or ``forward`` raised a ``PetabSciMLError``
  (a clear refusal naming the op);
* ``crash``: any other exception (a defect: it should be a refusal);
* ``wrong``: outputs computed but different from the expected ones (a defect).

The *float scope* is the cases whose graph inputs (after the integer ones became
initializers) and outputs are all float16/32/64 tensors, and that onnxruntime passes
with the same check.  ``--write-docs`` writes ``docs/onnx_conformance.md``: the counts
and a per-op table with each refusal's reason.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "onnx_conformance.md"
BASELINE = REPO / "tests" / "formats" / "onnx_conformance_baseline.json"
"""Per case that some backend does not refuse, its outcome per backend, as last written by
``--write-baseline``: ``tests/formats/test_onnx_conformance.py`` fails when a case that
passed there stops passing, or a wrong result or crash appears that is not listed."""
BACKENDS = ("torch", "jax")
FLOAT_KINDS = (np.float16, np.float32, np.float64)


@dataclass
class CaseResult:
    """What one node test case gave: its op, whether it is in the float scope, and per
    backend its outcome and (for refusals, crashes, wrong results) a one-line reason."""

    name: str
    op: str
    opset: int
    in_scope: bool
    scope_reason: str = ""
    outcome: dict[str, str] = field(default_factory=dict)
    reason: dict[str, str] = field(default_factory=dict)
    gradient: dict[str, str] = field(default_factory=dict)
    """Per backend, for passing cases checked with ``gradients=True``: ``agree``
    (float64 vector-Jacobian product within ``testcases.FD_TOLERANCE`` of central finite
    differences), ``disagree``, ``kinked`` (too few directions avoid a kink or jump) or
    ``error``."""
    fd_error: dict[str, float] = field(default_factory=dict)


def node_cases() -> list[Any]:
    """ONNX's node test cases, as ``onnx`` itself defines them (no data files)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases(None) if c.kind == "node"]


def _opset(model: Any) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
               default=0)


def _op(model: Any) -> str:
    """The op a case tests: its first node's (``*_expanded`` variants are renamed by
    :func:`name_expanded_after_their_op`)."""
    return model.graph.node[0].op_type if model.graph.node else "?"


def name_expanded_after_their_op(results: list[CaseResult]) -> None:
    """The ``*_expanded`` variants are graphs of other ops: name each after the op of the
    case it expands (``Celu (expanded)``)."""
    ops = {r.name: r.op for r in results if "_expanded" not in r.name}
    for r in results:
        if "_expanded" in r.name:
            stem = r.name.split("_expanded")[0]
            r.op = f"{ops.get(stem, r.op.removesuffix(' (expanded)'))} (expanded)"


SHAPE_INPUTS = {"Resize": (1, 2, 3), "Upsample": (1,), "OneHot": (1,)}
"""Float inputs that set an op's output shape (Resize's roi and scales, Upsample's
scales, OneHot's depth): like integer shapes, exporters write them as constants
(``torch.onnx.export`` of ``F.interpolate``, ``nn.Upsample``), and a shape computed
from the network's values is one no static-shape network has.  They become initializers
too."""


def with_integer_inputs_as_initializers(case: Any, data_set: tuple) -> tuple[Any, list, list]:
    """``(model, float_inputs, expected_outputs)``: the case's model with its integer and
    bool inputs, and the float inputs of :data:`SHAPE_INPUTS`, turned into initializers
    holding ``data_set``'s values."""
    import onnx
    from onnx import numpy_helper

    inputs, outputs = (_as_arrays(part) for part in data_set)
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph = model.graph
    shape_inputs = {n.input[i] for n in graph.node for i in SHAPE_INPUTS.get(n.op_type, ())
                    if i < len(n.input) and n.input[i]}
    keep, floats = [], []
    for value_info, array in zip(list(graph.input), inputs, strict=False):
        array = np.asarray(array) if not isinstance(array, list) else array
        if isinstance(array, np.ndarray) and (array.dtype.kind in "iub"
                                              or value_info.name in shape_inputs):
            graph.initializer.append(numpy_helper.from_array(array, value_info.name))
        else:
            keep.append(value_info)
            floats.append(array)
    del graph.input[:]
    graph.input.extend(keep)
    return model, floats, list(outputs)


def _as_arrays(values: list) -> list:
    """A data set's values as numpy arrays (some cases store ``TensorProto``s)."""
    from onnx import TensorProto, numpy_helper

    return [numpy_helper.to_array(v) if isinstance(v, TensorProto) else v for v in values]


def _is_float(array: Any) -> bool:
    return isinstance(array, np.ndarray) and array.dtype.type in FLOAT_KINDS


def _close(got: Any, expected: Any, rtol: float, atol: float) -> bool:
    got = np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        return False
    if expected.dtype.kind == "f":
        return bool(np.allclose(got.astype(np.float64), expected.astype(np.float64),
                                rtol=rtol, atol=atol, equal_nan=True))
    return bool(np.array_equal(got, expected))


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return re.sub(r"\s+", " ", text)[:300]


def _onnxruntime_passes(model: Any, floats: list, expected: list, rtol: float,
                        atol: float) -> bool:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model.SerializeToString(), options)
        feeds = {i.name: a for i, a in zip(session.get_inputs(), floats, strict=True)}
        got = session.run(None, feeds)
    except Exception:   # noqa: BLE001 - onnxruntime's refusal of any kind
        return False
    return len(got) == len(expected) and all(
        _close(g, e, rtol, atol) for g, e in zip(got, expected, strict=True))


def run_case(case: Any, backends: tuple[str, ...] = BACKENDS,
             gradients: bool = False) -> CaseResult:
    """Import ``case`` and run it in ``backends``; see the module docstring.  With
    ``gradients``, passing float-scope cases also get :attr:`CaseResult.gradient`."""
    from petab_sciml.errors import PetabSciMLError
    from petab_sciml.plugins import get_backend

    rtol = case.rtol if case.rtol is not None else 1e-3
    atol = case.atol if case.atol is not None else 1e-7
    prepared = [with_integer_inputs_as_initializers(case, d) for d in case.data_sets]
    result = CaseResult(case.name, _op(case.model), _opset(case.model), in_scope=True)
    if not prepared:
        result.in_scope, result.scope_reason = False, "no data set"
    elif not all(_is_float(a) for _, floats, outs in prepared for a in [*floats, *outs]):
        result.in_scope, result.scope_reason = False, "non-float inputs or outputs"
    elif not all(_onnxruntime_passes(m, f, o, rtol, atol) for m, f, o in prepared):
        result.in_scope, result.scope_reason = False, "onnxruntime does not pass"
    imports, import_error = _import_all(prepared)
    for name in backends:
        outcome, reason = "pass", ""
        try:
            if import_error is not None:   # the same for every backend
                raise import_error
            backend = get_backend(name)
            for (_, floats, expected), imported in zip(prepared, imports, strict=True):
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    dtype = "float64" if any(np.asarray(a).dtype == np.float64
                                             for a in floats) else "float32"
                    net = backend.set_parameters(
                        backend.build(imported.network, dtype=dtype), imported.parameters)
                    got = backend.forward(net, [np.asarray(a) for a in floats])
                if len(got) != len(expected):
                    outcome, reason = "wrong", f"{len(got)} outputs, {len(expected)} expected"
                    break
                bad = [i for i, (g, e) in enumerate(zip(got, expected)) if
                       not _close(g, e, rtol, atol)]
                if bad:
                    g, e = np.asarray(got[bad[0]]), np.asarray(expected[bad[0]])
                    with np.errstate(all="ignore"):
                        diff = (float(np.nanmax(np.abs(g.astype(float) - e.astype(float))))
                                if g.shape == e.shape else f"shape {g.shape} vs {e.shape}")
                    outcome, reason = "wrong", f"output {bad[0]}: max abs diff {diff}"
                    break
        except PetabSciMLError as exc:
            outcome, reason = "refused", _reason(exc)
        except Exception as exc:   # noqa: BLE001 - every other exception is a defect
            outcome, reason = "crash", _reason(exc)
        result.outcome[name], result.reason[name] = outcome, reason
        if gradients and outcome == "pass" and result.in_scope:
            result.gradient[name], err = _gradient(name, imports[0], prepared[0][1])
            if err is not None:
                result.fd_error[name] = err
    return result


def _import_all(prepared: list) -> tuple[list, Exception | None]:
    """Each data set's model imported once for all backends: ``(imports, error)``."""
    from petab_sciml.formats.onnx import import_onnx

    imports = []
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            for model, _, _ in prepared:
                imports.append(import_onnx(model))
    except Exception as exc:   # noqa: BLE001 - classified per backend by run_case
        return [], exc
    return imports, None


def _gradient(backend_name: str, imported: Any, floats: list) -> tuple[str, float | None]:
    """The float64 vector-Jacobian product of the imported network against central
    finite differences (``testcases.vjp_finite_difference_error``)."""
    from petab_sciml.errors import PetabSciMLError
    from petab_sciml.plugins import get_backend
    from petab_sciml.testcases import FD_TOLERANCE, vjp_finite_difference_error

    backend = get_backend(backend_name)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            params = {g: {a: np.asarray(v, np.float64) for a, v in arrays.items()}
                      for g, arrays in imported.parameters.items()}
            net = backend.set_parameters(backend.build(imported.network, dtype="float64"),
                                         params)
            err = vjp_finite_difference_error(
                backend, net, [np.asarray(a, np.float64) for a in floats])
    except PetabSciMLError:
        return "kinked", None
    except Exception:   # noqa: BLE001 - reported as a count
        return "error", None
    return ("agree" if err <= FD_TOLERANCE else "disagree"), err


def run_all(limit: int | None = None, backends: tuple[str, ...] = BACKENDS,
            progress: bool = False, gradients: bool = False,
            block: tuple[int, int] | None = None) -> list[CaseResult]:
    """Every case (the first ``limit``; of those, block ``k`` of ``n`` contiguous blocks
    where ``block=(k, n)``) in this process."""
    cases = node_cases()[:limit]
    if block is not None:
        k, n = block
        size = -(-len(cases) // n)
        cases = cases[k * size:(k + 1) * size]
    results = []
    for i, case in enumerate(cases):
        results.append(run_case(case, backends, gradients))
        if progress and i % 100 == 0:
            print(f"{i}/{len(cases)} {case.name}", file=sys.stderr, flush=True)
    name_expanded_after_their_op(results)
    return results


def run_in_processes(blocks: int, limit: int | None = None, gradients: bool = False,
                     at_once: int = 2) -> list[CaseResult]:
    """:func:`run_all` in ``blocks`` child processes, ``at_once`` at a time: a single
    process that compiles every case in JAX (and its gradient) runs out of memory
    mappings near case 1,250 (LLVM's 'Cannot allocate memory', then a crash)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"block{k}.json" for k in range(blocks)]
        waiting = list(range(blocks))
        running: list[subprocess.Popen] = []
        while waiting or running:
            while waiting and len(running) < at_once:
                k = waiting.pop(0)
                argv = [sys.executable, str(Path(__file__).resolve()), "--block",
                        f"{k}/{blocks}", "--json", str(outs[k])]
                argv += (["--limit", str(limit)] if limit else []) + \
                    (["--gradients"] if gradients else [])
                running.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
            done = running.pop(0)
            if done.wait() != 0:
                raise RuntimeError(f"{' '.join(done.args)} failed ({done.returncode})")
        results = [CaseResult(**r) for out in outs for r in json.loads(out.read_text())]
    name_expanded_after_their_op(results)
    return results


def baseline(results: list[CaseResult]) -> dict:
    """What :data:`BASELINE` holds for ``results``."""
    import onnx

    return {"onnx": onnx.__version__,
            "cases": {r.name: r.outcome for r in results
                      if any(o != "refused" for o in r.outcome.values())}}


def regressions(results: list[CaseResult], known: dict) -> list[str]:
    """The cases of ``results`` that stopped passing, or that give a wrong result or a
    crash the baseline ``known`` does not list, each as one line."""
    found = []
    for r in results:
        before = known["cases"].get(r.name, {})
        for name, outcome in r.outcome.items():
            was = before.get(name, "refused")
            if (was == "pass" and outcome != "pass") or \
                    (outcome in ("wrong", "crash") and outcome != was):
                found.append(f"{r.name} ({r.op}, {name}): {was} -> {outcome}: "
                             f"{r.reason.get(name, '')}")
    return found


def summary(results: list[CaseResult]) -> dict:
    """Counts per backend, in the float scope and over all cases."""
    out: dict = {"cases": len(results),
                 "float_scope": sum(r.in_scope for r in results), "backends": {}}
    for name in BACKENDS:
        scope = Counter(r.outcome.get(name) for r in results if r.in_scope)
        every = Counter(r.outcome.get(name) for r in results)
        out["backends"][name] = {"float_scope": dict(scope), "all": dict(every)}
        grads = Counter(r.gradient.get(name) for r in results if r.gradient)
        if grads:
            out["backends"][name]["gradients"] = dict(grads)
    return out


def _short(reason: str) -> str:
    reason = re.sub(r"^(PetabSciMLError|NetworkError|[A-Za-z]+Error): ", "", reason)
    if "; supported ops" in reason:
        return "no such op in the importer"
    reason = re.sub(r"^node '[^']*': ONNX op '?[A-Za-z]+'? \(opset \d+\): ", "", reason)
    reason = re.sub(r"\[[^\]]*\]|'[^']*'|\"[^\"]*\"|\d+", "…", reason)
    return reason[:120]


def docs_page(results: list[CaseResult]) -> str:
    """``docs/onnx_conformance.md``: counts and the per-op table."""
    import onnx

    s = summary(results)
    scope = s["float_scope"]
    lines = [
        "# ONNX operator conformance",
        "",
        "Generated by `python tests/support/onnx_conformance.py --write-docs` from the node",
        f"test cases of the installed `onnx` ({onnx.__version__}: {s['cases']} cases);",
        "do not edit by hand. `tests/formats/test_onnx_conformance.py` runs the same cases",
        "and fails on any case that stops passing and on any wrong result.",
        "",
        "Integer and bool graph inputs become initializers (as in exported networks),",
        "and so do the float inputs that set an op's output shape (Resize's `roi` and",
        "`scales`, Upsample's `scales`, OneHot's `depth`: exporters write them as",
        "constants, and a shape computed from the network's values is one no static-shape",
        "network has); other",
        "float inputs stay graph inputs. The *float scope* is the cases whose inputs and",
        "outputs are float tensors and that onnxruntime passes with the same check",
        "(the case's `rtol`/`atol`, default 1e-3 / 1e-7).",
        "",
        "| | float scope: pass | refused | crash | wrong | all cases: pass | refused | crash"
        " | wrong |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in BACKENDS:
        f, a = s["backends"][name]["float_scope"], s["backends"][name]["all"]
        cols = [f.get(k, 0) for k in ("pass", "refused", "crash", "wrong")] + \
            [a.get(k, 0) for k in ("pass", "refused", "crash", "wrong")]
        pct = 100 * cols[0] / scope if scope else 0
        lines.append(f"| {name} | {cols[0]} of {scope} ({pct:.0f} %) | "
                     + " | ".join(str(c) for c in cols[1:]) + " |")
    if any(r.gradient for r in results):
        lines += ["", "Gradients (`--gradients`): in every passing float-scope case, each "
                  "backend's float64", "vector-Jacobian product (seeded random cotangents, "
                  "parameters and inputs together)", "against central finite differences "
                  "along random directions (`testcases.FD_TOLERANCE`", "relative; `kinked`: "
                  "too few directions avoid a kink or jump, as at `Floor` or `Sign`).", ""]
        for name in BACKENDS:
            counts = s["backends"][name].get("gradients", {})
            lines.append(f"* {name}: " + ", ".join(f"{k} {v}" for k, v in
                                                    sorted(counts.items())))
    lines += ["", "## Per op (float scope)", "",
              "Cases passed per backend, the opsets the cases use, and the reasons of the",
              "cases that do not pass (PyTorch's; JAX's where they differ).", "",
              "| op | opsets | cases | torch | jax | why not |", "|---|---|---:|---:|---:|---|"]
    by_op: dict[str, list[CaseResult]] = defaultdict(list)
    for r in results:
        if r.in_scope:
            by_op[r.op].append(r)
    for op in sorted(by_op, key=str.lower):
        rs = by_op[op]
        opsets = sorted({r.opset for r in rs})
        passed = {b: sum(r.outcome.get(b) == "pass" for r in rs) for b in BACKENDS}
        why = Counter()
        for r in rs:
            for b in BACKENDS:
                if r.outcome.get(b) != "pass":
                    why[f"{r.outcome.get(b)}: {_short(r.reason.get(b, ''))}"] += 1
                    break
        text = "; ".join(f"{k} ({n})" for k, n in why.most_common(3)).replace("|", "/")
        lines.append(f"| {op} | {', '.join(map(str, opsets))} | {len(rs)} | "
                     f"{passed['torch']} | {passed['jax']} | {text} |")
    outside = Counter(r.scope_reason for r in results if not r.in_scope)
    lines += ["", "## Outside the float scope", ""]
    lines += [f"* {reason}: {n} cases" for reason, n in outside.most_common()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--gradients", action="store_true",
                    help="also check passing cases' gradients against finite differences")
    ap.add_argument("--processes", type=int, default=4,
                    help="run the cases in this many child processes, one after another")
    ap.add_argument("--block", help="K/N: only block K of N, in this process")
    args = ap.parse_args(argv)
    if args.block:
        k, n = (int(x) for x in args.block.split("/"))
        results = run_all(args.limit, progress=True, gradients=args.gradients, block=(k, n))
    elif args.processes > 1:
        results = run_in_processes(args.processes, args.limit, args.gradients)
    else:
        results = run_all(args.limit, progress=True, gradients=args.gradients)
    print(json.dumps(summary(results), indent=1))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=0))
    if args.write_docs:
        DOC.write_text(docs_page(results))
    if args.write_baseline:
        BASELINE.write_text(json.dumps(baseline(results), indent=0, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())

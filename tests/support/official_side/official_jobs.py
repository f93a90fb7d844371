"""Runs INSIDE the throw-away environment that holds the official ``petab_sciml`` package
(never in ours: both packages are imported as ``petab_sciml``).

Usage: python official_jobs.py JOBS.json  -> prints one JSON result per job (a list).
Job ops:
  resave  load ``src`` with the official reader, write it with the official writer to
          ``dst``; result: the model's dump
  export  load ``src``, build the PyTorch module, export it back with
          ``NNModel.from_pytorch_module`` and write that to ``dst``; result: dump
  load    load ``src``; result: dump, and whether ``to_pytorch_module`` works; with
          ``inputs``/``outputs`` (and ``params``, ``eval``) array files also the largest
          absolute difference between the module's outputs and the reference outputs
"""

import json
import sys
import traceback

import h5py
import numpy as np


def _official():
    import petab_sciml

    if not hasattr(petab_sciml, "NNModelStandard") or "site-packages" not in petab_sciml.__file__:
        raise RuntimeError(f"not the official package: {petab_sciml.__file__}")
    from petab_sciml.standard.nn_model import NNModel, NNModelStandard

    return NNModel, NNModelStandard


def _arrays(path, group):
    out = []
    with h5py.File(path, "r") as h5:
        for key in sorted(h5[group], key=lambda k: [int(t) if t.isdigit() else t for t in
                                                     __import__("re").split(r"(\d+)", k)]):
            (name,) = list(h5[group][key])
            out.append(np.asarray(h5[group][key][name][()]))
    return out


def _run_module(module, job):
    import torch

    state = {}
    if job.get("params"):
        with h5py.File(job["params"], "r") as h5:
            net = h5["parameters"][next(iter(h5["parameters"]))]
            for layer in net:
                for array in net[layer]:
                    state[f"{layer}.{array}"] = torch.as_tensor(
                        np.asarray(net[layer][array][()]))
        module.load_state_dict(state, strict=False)
    module = module.double()
    if job.get("eval"):
        module.eval()
    inputs = [torch.as_tensor(a, dtype=torch.float64) for f in job["inputs"]
              for a in _arrays(f, "inputs")]
    with torch.no_grad():
        got = module(*inputs)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    expected = _arrays(job["outputs"], "outputs")
    return max(float(np.max(np.abs(g.numpy() - e))) for g, e in zip(got, expected))


def run(job):
    NNModel, NNModelStandard = _official()
    model = NNModelStandard.load_data(job["src"])
    result = {"dump": model.model_dump()}
    if job["op"] == "resave":
        NNModelStandard.save_data(model, job["dst"])
    elif job["op"] == "export":
        exported = NNModel.from_pytorch_module(model.to_pytorch_module(), model.nn_model_id)
        NNModelStandard.save_data(exported, job["dst"])
        result["dump"] = exported.model_dump()
    elif job["op"] == "load":
        try:
            module = model.to_pytorch_module()
            result["module"] = "ok"
        except Exception as exc:
            result["module"] = f"{type(exc).__name__}: {exc}"
            return result
        if job.get("inputs"):
            result["max_abs_error"] = _run_module(module, job)
    return result


def main():
    jobs = json.load(open(sys.argv[1]))
    results = []
    for job in jobs:
        try:
            results.append(run(job))
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}",
                            "trace": traceback.format_exc(limit=3)})
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()

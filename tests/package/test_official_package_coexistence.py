"""Living beside the official ``petab_sciml`` package (installed in a throw-away
environment, see tests/support/official_package.py):

* the official suite's networks go official reader/writer -> our reader -> our writer ->
  official reader with identical layers, arguments and forward nodes;
* we read what the official package exports from PyTorch, and compute the same outputs;
* the official reader builds and runs what ``convert --portable`` writes from our
  reference cases, matching PyTorch's reference outputs; what has no portable form is
  refused with the node named.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from petab_sciml import testcases
from petab_sciml.convert import convert
from petab_sciml.errors import NetworkError
from petab_sciml.formats import yaml as nn_yaml
from tests.support.suite import all_suite_network_files, ml_import_cases, requires_suite

SUITE_NETS = all_suite_network_files()
OUR_CASES = sorted(testcases.discover([testcases.bundled_cases()]))

OFFICIAL_READER_BUGS = {
    # The suite writes F.logsigmoid as "log_sigmoid", which torch.nn.functional lacks:
    # the official reader fails on the suite's own file, and on ours alike.
    "ml_model_import/030": "AttributeError",
}


@requires_suite
@pytest.mark.slow
def test_suite_networks_round_trip_through_the_official_package(official_env, tmp_path):
    jobs = [{"op": "resave", "src": str(f), "dst": str(tmp_path / f"official_{i}.yaml")}
            for i, f in enumerate(SUITE_NETS)]
    first = official_env.run(jobs)
    assert all("error" not in r for r in first), [r for r in first if "error" in r][:3]
    for i in range(len(SUITE_NETS)):   # our reader, our writer
        nn_yaml.write(nn_yaml.read(tmp_path / f"official_{i}.yaml"), tmp_path / f"ours_{i}.yaml")
    second = official_env.run([{"op": "load", "src": str(tmp_path / f"ours_{i}.yaml")}
                               for i in range(len(SUITE_NETS))])
    for path, before, after in zip(SUITE_NETS, first, second):
        assert "error" not in after, (path, after)
        for key in ("nn_model_id", "inputs", "layers", "forward"):
            assert after["dump"][key] == before["dump"][key], (path, key)
    assert len(SUITE_NETS) >= 60


@pytest.mark.slow
@requires_suite
def test_we_read_official_pytorch_exports(official_env, tmp_path):
    cases = ml_import_cases()
    results = official_env.run([{"op": "export", "src": str(c / "net.yaml"),
                                 "dst": str(tmp_path / f"export_{i}.yaml")}
                                for i, c in enumerate(cases)])
    failed = []
    for i, (case_dir, result) in enumerate(zip(cases, results)):
        name = f"ml_model_import/{case_dir.name}"
        if "error" in result:
            assert OFFICIAL_READER_BUGS.get(name, "-") in result["error"], (name, result)
            continue
        case = dataclasses.replace(testcases.load_case(case_dir),
                                   net_file=tmp_path / f"export_{i}.yaml")
        outcome = testcases.run_case(case, "torch")
        if not outcome.passed:
            failed.append((name, outcome.error or outcome.max_abs_error))
    assert failed == []


def _portable_jobs(tmp_path):
    jobs, refused = [], {}
    for folder in OUR_CASES:
        case = testcases.load_case(folder)
        dst = tmp_path / f"{folder.name}.yaml"
        try:
            convert(case.net_file, dst, portable=True)
        except NetworkError as exc:
            refused[folder.name] = str(exc)
            continue
        job = {"op": "load", "src": str(dst), "name": folder.name, "tol": case.tol}
        if not case.dropout:  # a mean over random masks is no single forward pass
            job.update(inputs=[str(f) for f in case.inputs[0]], outputs=str(case.outputs[0]),
                       params=str(case.params[0]) if case.params[0] else None,
                       eval=case.mode == "eval")
        jobs.append(job)
    return jobs, refused


@pytest.mark.slow
def test_official_reader_runs_our_portable_output(official_env, tmp_path):
    jobs, refused = _portable_jobs(tmp_path)
    results = official_env.run(jobs)
    for job, result in zip(jobs, results):
        assert result.get("module") == "ok", (job["name"], result)
        if "max_abs_error" in result:
            assert result["max_abs_error"] <= max(job["tol"] or 0, 1e-5), (job["name"], result)
    checked = sum("max_abs_error" in r for r in results)
    print(f"portable: {len(jobs)} of {len(OUR_CASES)} cases, {checked} run against "
          f"PyTorch's reference outputs; refused: {len(refused)}")
    assert len(jobs) >= 63 and checked >= 61, (len(jobs), checked)
    for name, message in refused.items():
        assert "no portable form" in message and ("forward node '" in message
                                                  or "layer '" in message), (name, message)


def test_portable_refuses_naming_each_node(tmp_path):
    case = testcases.bundled_cases() / "066_add" / "net.yaml"
    with pytest.raises(NetworkError) as info:
        convert(case, tmp_path / "out.yaml", portable=True)
    assert "forward node 'add' (call_function add) is not a specification function" \
        in str(info.value)
    assert not (tmp_path / "out.yaml").exists()


def test_portable_writes_activation_layers_as_their_functions(tmp_path):
    """nn.Softplus(beta=2) -> F.softplus(x, beta=2.0): what the official reader builds
    (torch.nn.functional.<target>(*args, **kwargs)) computes what the layer computed."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Softplus(beta=2.0),
                                 torch.nn.LeakyReLU(0.2), torch.nn.Hardtanh(-0.5, 0.5),
                                 torch.nn.ReLU())
    from petab_sciml.formats.torch_fx import network_from_module

    nn_yaml.write(network_from_module(module, "net"), tmp_path / "net.yaml")
    convert(tmp_path / "net.yaml", tmp_path / "portable.yaml", portable=True)
    network = nn_yaml.read(tmp_path / "portable.yaml")
    assert [layer.type for layer in network.layers.values()] == ["Linear"]
    calls = [(n.target, dict(n.kwargs)) for n in network.nodes if n.op == "call_function"]
    assert calls == [("softplus", {"beta": 2.0}), ("leaky_relu", {"negative_slope": 0.2}),
                     ("hardtanh", {"min_val": -0.5, "max_val": 0.5}), ("relu", {})]
    x = torch.randn(5, 3)
    y = module[0](x)
    for target, kwargs in calls:   # the official reader's construction, by hand
        y = getattr(F, target)(y, **kwargs)
    with torch.no_grad():
        torch.testing.assert_close(y, module(x))


def test_plain_convert_warns_about_our_extensions(tmp_path):
    result = convert(testcases.bundled_cases() / "066_add" / "net.yaml", tmp_path / "a.yaml")
    assert any("uses petab-sciml extensions of the NN model YAML" in w
               and "forward node 'add'" in w for w in result.warnings)
    clean = convert(testcases.bundled_cases() / "001_linear" / "net.yaml", tmp_path / "b.yaml")
    assert clean.warnings == []


def test_avgpool1d_is_written_with_pytorch_arguments_only(tmp_path):
    """The official reader calls torch.nn.AvgPool1d(**args): no divisor_override."""
    torch = pytest.importorskip("torch")
    from petab_sciml.formats.torch_fx import network_from_module

    module = torch.nn.Sequential(torch.nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True))
    nn_yaml.write(network_from_module(module, "net"), tmp_path / "net.yaml")
    network = nn_yaml.read(tmp_path / "net.yaml")
    for layer in network.layers.values():
        getattr(torch.nn, layer.type)(**layer.args)  # what the official reader does
        assert "divisor_override" not in layer.args


def test_import_warns_once_when_the_official_distribution_is_installed(tmp_path):
    dist = tmp_path / "petab_sciml-0.0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: petab-sciml\nVersion: 0.0.3\n")
    code = "import warnings; warnings.simplefilter('default'); import petab_sciml"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    lines = [ln for ln in out.stderr.splitlines() if "UserWarning" in ln]
    assert len(lines) == 1 and "official 'petab-sciml' distribution (0.0.3)" in lines[0]
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "petab-sciml" not in quiet.stderr

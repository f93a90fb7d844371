"""Official suite: every problem-import and initialization problem validates without
errors, and the initialization cases load to exactly the reference parameters in both
backends."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from petab_sciml.problem import load_problem, validate_problem
from tests.support.suite import SUITE, requires_suite


def _problems() -> list:
    if SUITE is None or not SUITE.is_dir():
        return []
    root = SUITE / "test_cases"
    return sorted(root.glob("sciml_problem_import/*/petab/problem.yaml")) + \
        sorted(root.glob("initialization/*/petab/problem.yaml"))


def _init_cases() -> list:
    if SUITE is None or not SUITE.is_dir():
        return []
    return sorted(p for p in (SUITE / "test_cases" / "initialization").iterdir() if p.is_dir())


def _backend_available(name: str) -> bool:
    from petab_sciml.plugins import get_backend

    try:
        get_backend(name)
        return True
    except Exception:
        return False


@requires_suite
def test_suite_has_problems():
    assert len(_problems()) >= 20
    assert len(_init_cases()) >= 2


@requires_suite
@pytest.mark.parametrize("problem", _problems(), ids=lambda p: f"{p.parents[2].name}/"
                         f"{p.parents[1].name}")
def test_suite_problem_validates(problem):
    report = validate_problem(problem)
    assert report.issues.errors == [], "\n".join(map(str, report.issues))
    assert report.issues.warnings == [], "\n".join(map(str, report.issues))


def _reference(case) -> dict:
    import yaml

    solutions = yaml.safe_load((case / "solutions.yaml").read_text())
    out = {}
    for net, name in solutions["parameter_files"].items():
        with h5py.File(case / name) as h5:
            out[net] = {lay: {arr: h5[f"parameters/{net}/{lay}/{arr}"][()]
                              for arr in h5[f"parameters/{net}/{lay}"]}
                        for lay in h5[f"parameters/{net}"]}
    return out


@requires_suite
@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("case", _init_cases(), ids=lambda p: p.name)
def test_initialization_matches_reference_exactly(case, backend):
    if not _backend_available(backend):
        pytest.skip(f"backend {backend} not available")
    problem = load_problem(case / "petab" / "problem.yaml", backend=backend)
    reference = _reference(case)
    for net, layers in reference.items():
        got = problem.backend.get_parameters(problem.models[net])
        plain = problem.initial_parameters(net)
        for lay, arrays in layers.items():
            for arr, ref in arrays.items():
                assert np.array_equal(np.asarray(got[lay][arr]), ref), (net, lay, arr)
                assert np.array_equal(plain[lay][arr], ref), (net, lay, arr)


@requires_suite
def test_initialization_001_layer_zero_and_rest_from_file():
    """Independent of the reference file: layer1 is 0 (the more specific row wins),
    the other layers equal the array file."""
    case = SUITE / "test_cases" / "initialization" / "001" / "petab"
    problem = load_problem(case / "problem.yaml")
    values = problem.initial_parameters("net1")
    assert not values["layer1"]["weight"].any() and not values["layer1"]["bias"].any()
    with h5py.File(case / "net1_ps.hdf5") as h5:
        assert np.array_equal(values["layer2"]["weight"], h5["parameters/net1/layer2/weight"][()])
    assert problem.trainable("net1")["layer1"]["weight"].all()


@requires_suite
def test_frozen_layer_in_torch_and_masks():
    case = SUITE / "test_cases" / "sciml_problem_import" / "023" / "petab"
    problem = load_problem(case / "problem.yaml", backend="torch")
    model = problem.models["net1"]
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    assert grads == {"layer1.weight": False, "layer1.bias": False, "layer2.weight": True,
                     "layer2.bias": True, "layer3.weight": True, "layer3.bias": True}
    mask = problem.trainable("net1")
    assert not mask["layer1"]["weight"].any() and mask["layer2"]["weight"].all()
    assert problem.hybridization("net1") == "simulation"


@requires_suite
def test_priors_per_element_032():
    case = SUITE / "test_cases" / "sciml_problem_import" / "032" / "petab"
    problem = load_problem(case / "problem.yaml")
    resolved = problem.parameters["net1"]
    assert [str(p) for p in resolved.priors] == ["normal(0, 1)"]
    assert (resolved.prior_index["layer2"]["weight"] == 0).all()
    lower, upper = problem.bounds("net1")
    assert np.isneginf(lower["layer1"]["bias"]).all() and np.isposinf(upper["layer1"]["bias"]).all()
    assert problem.plain_parameters["alpha"].prior.distribution == "uniform"


@requires_suite
def test_problem_is_plain_data_for_a_simulator():
    case = SUITE / "test_cases" / "sciml_problem_import" / "008" / "petab"
    problem = load_problem(case / "problem.yaml")
    for net in ("net1", "net2"):
        values = problem.initial_parameters(net)
        assert all(isinstance(a, np.ndarray) and a.dtype == np.float64
                   for arrays in values.values() for a in arrays.values())
    assert problem.parameters["net2"].shapes["layer2"]["weight"] == (10, 5)

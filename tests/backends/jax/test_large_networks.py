"""Large networks inside the ODE (issue 18), at sizes a test can afford.

* the JAX Linear and Bilinear products read the weight where it lies (no transposed copy
  in the compiled code) and agree with PyTorch on every batch shape;
* what gets traced does not grow with the network: the compiled objective (Simulator
  path) and the native model's loss and projection embed the same constants at hidden
  width 8 and 64, i.e. weights enter as arguments, never as constants;
* projection onto network bounds (scalar, element-wise and unbounded) matches numpy.

Speed is measured by ``benchmarks/bench_width.py``, not here.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
pytest.importorskip("diffrax")
pytest.importorskip("libsbml")

import jax.numpy as jnp  # noqa: E402

from petab_sciml.backends.jax import ops  # noqa: E402
from petab_sciml.backends.jax.model import check_dtype  # noqa: E402
from tests.support.problems.widened import write_widened_problem  # noqa: E402
from tests.support.suite import requires_suite  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "lotka_volterra_ude"


# --------------------------------------------------------------------------- products
@pytest.mark.parametrize("shape", [(7,), (1, 7), (2, 7), (3, 4, 7)])
def test_linear_matches_torch_on_every_batch_shape(shape):
    check_dtype("float64")
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=shape), rng.normal(size=(5, 7)), rng.normal(size=5)
    expected = torch.nn.functional.linear(*(torch.as_tensor(a) for a in (x, w, b)))
    got = ops.linear(jnp.asarray(x), jnp.asarray(w), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(got), expected.numpy(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("weight", [(2, 3, 4), (4, 16, 20)])   # einsum, dot_generals
@pytest.mark.parametrize("shape", [(), (1,), (4,), (2, 3)])
def test_bilinear_matches_torch_on_every_batch_shape(shape, weight):
    check_dtype("float64")
    rng = np.random.default_rng(2)
    x1, x2 = rng.normal(size=shape + weight[1:2]), rng.normal(size=shape + weight[2:])
    w, b = rng.normal(size=weight), rng.normal(size=weight[0])
    expected = torch.nn.functional.bilinear(*(torch.as_tensor(a) for a in (x1, x2, w, b)))
    got = ops.bilinear(*(jnp.asarray(a) for a in (x1, x2, w, b)))
    np.testing.assert_allclose(np.asarray(got), expected.numpy(), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("s1", "s2", "message"), [
    ((5, 3), (4,), "input dimensions do not match: got 2 and 1"),
    ((2, 3), (3, 4), "input batch dimensions do not match at dim 0: got 2 and 3"),
])
def test_bilinear_refuses_mismatched_inputs_like_torch(s1, s2, message):
    w = jnp.zeros((2, 3, 4))
    with pytest.raises(ValueError, match=re.escape(message)):
        ops.bilinear(jnp.zeros(s1), jnp.zeros(s2), w)
    layer = torch.nn.Bilinear(3, 4, 2)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        layer(torch.zeros(s1), torch.zeros(s2))


@pytest.mark.parametrize("batch", [None, 1, 3])
def test_linear_gradient_has_no_transposed_weight_copy(batch):
    """``x @ W.T`` made XLA copy the transposed 64x64 weight on every call."""
    check_dtype("float64")
    w = jnp.ones((64, 48))
    x = jnp.ones((48,) if batch is None else (batch, 48))
    fn = jax.jit(jax.grad(lambda w, x: jnp.sum(jnp.tanh(ops.linear(x, w))), (0, 1)))
    text = fn.lower(w, x).compile().as_text()
    moved = [line for line in text.splitlines()
             if re.search(r"= f64\[48,64\]\{[01],[01]\} (transpose|copy)\(", line)
             or re.search(r"= f64\[64,48\]\{0,1\}", line)]
    assert not moved, moved


# --------------------------------------------------------------------------- constants
def _constant_elements(text: str) -> int:
    """Elements of the non-splat dense constants of a StableHLO module."""
    total = 0
    for payload, shape in re.findall(r"dense<([^>]*)>\s*:\s*tensor<([^>]*)>", text):
        if not (payload.startswith("[") or payload.startswith('"0x')):
            continue   # a splat (one value broadcast)
        dims = [int(d) for d in shape.split("x")[:-1]]
        total += int(np.prod(dims)) if dims else 1
    return total


@pytest.fixture(scope="module")
def widened(tmp_path_factory):
    out = {}
    for width in (8, 64):
        folder = tmp_path_factory.mktemp(f"width{width}")
        write_widened_problem(width, folder, EXAMPLE)
        out[width] = folder / "problem.yaml"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sensitivity", ["forward", "reverse"])
def test_objective_embeds_no_network_sized_constants(widened, sensitivity):
    from petab_sciml.problem import load_problem

    sizes = {}
    for width, path in widened.items():
        sim = load_problem(path, backend="jax").simulator(cache=False,
                                                          sensitivity=sensitivity)
        ex = sim.executor
        lowered = jax.jit(ex.value_and_grad_fn()).lower(*ex.arguments(sim.plan.w0))
        sizes[width] = _constant_elements(lowered.as_text())
    # 8 -> 64 hidden units: 108 -> 4,420 parameters, and not one more constant
    assert sizes[8] == sizes[64], sizes


@pytest.mark.slow
def test_native_model_embeds_no_network_sized_constants(widened, tmp_path):
    import equinox as eqx

    from petab_sciml.backends.jax import problem as jp
    from petab_sciml.problem import load_problem

    sizes = {}
    for width in (8, 64):
        # a frozen and a bounded element of one array: element-sized constants
        folder = tmp_path / f"w{width}"
        shutil.copytree(widened[width].parent, folder)
        with open(folder / "mapping.tsv", "a") as f:
            f.write("net1_w01\tnet1.parameters[layer2].weight[0, 1]\n"
                    "net1_w02\tnet1.parameters[layer2].weight[0, 2]\n")
        with open(folder / "parameters.tsv", "a") as f:
            f.write("net1_w01\tlin\t-1\t1\t0.25\tfalse\n"
                    "net1_w02\tlin\t-1\t1\t0.5\ttrue\n")
        model = load_problem(folder / "problem.yaml", backend="jax").model(
            sensitivity="reverse")
        loss = eqx.filter_jit(eqx.filter_value_and_grad(jp.loss, has_aux=True))
        project = eqx.filter_jit(jp.project)
        sizes[width] = (_constant_elements(loss.lower(model).as_text()),
                        _constant_elements(project.lower(model).as_text()))
    assert sizes[8] == sizes[64], sizes


# --------------------------------------------------------------------------- projection
def test_projection_onto_network_bounds_matches_numpy(tmp_path):
    """Layer-wide bounds (scalars), element bounds (arrays) and a frozen element."""
    from petab_sciml.backends.jax import problem as jp
    from petab_sciml.problem import load_problem

    folder = tmp_path / "bounded"
    shutil.copytree(EXAMPLE, folder)
    with open(folder / "mapping.tsv", "a") as f:
        f.write("net1_l1\tnet1.parameters[layer1]\n"
                "net1_w01\tnet1.parameters[layer2].weight[0, 1]\n"
                "net1_w10\tnet1.parameters[layer2].weight[1, 0]\n")
    table = (folder / "parameters.tsv").read_text()
    table += ("net1_l1\tlin\t-0.5\t0.5\tarray\ttrue\n"
              "net1_w01\tlin\t-0.1\t0.2\t0.15\ttrue\n"
              "net1_w10\tlin\t-inf\tinf\t0.3\tfalse\n")
    (folder / "parameters.tsv").write_text(table)
    problem = load_problem(folder / "problem.yaml", backend="jax")
    plan = problem.simulator(cache=False).plan
    model = problem.model()
    rng = np.random.default_rng(3)
    far = jax.tree_util.tree_map(lambda a: a + 3.0 * rng.normal(size=a.shape), model)
    got = np.asarray(jp.vector(jp.project(far)))
    w = np.asarray(jp.vector(far))
    free = plan.free_mask()
    expected = np.where(free, np.clip(w, plan.w_lower, plan.w_upper), plan.w0)
    n = plan.n_mech
    np.testing.assert_array_equal(got[n:], expected[n:])
    # the three kinds of bounds were all exercised
    lo = np.asarray(plan.w_lower[n:])
    assert np.isinf(lo).any() and (lo == -0.5).any() and (lo == -0.1).any()
    assert (~free).any()


# --------------------------------------------------------------------------- unchanged
def _ml_cases_with_changed_products() -> list[str]:
    """ML-import suite cases with a layer whose product form issue 18 touched: Bilinear,
    and Linear above ``ops.TRANSPOSED_PRODUCT_MAX`` (smaller Linear layers compute
    ``x @ W.T`` in the same expression as before)."""
    from tests.backends.jax.test_networks import CASES, SuiteCase

    found = []
    for name in CASES:
        for layer in SuiteCase(name).network.layers.values():
            size = layer.config.get("in_features", 0) * layer.config.get("out_features", 0)
            if layer.type == "Bilinear" or (layer.type == "Linear"
                                            and size > ops.TRANSPOSED_PRODUCT_MAX):
                found.append(name)
                break
    return found


def _relative(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b), initial=0.0) / max(np.max(np.abs(b), initial=0.0),
                                                         1e-300))


@requires_suite
def test_ml_suite_results_unchanged_by_product_forms(monkeypatch):
    """Outputs and gradients (float64, every data set) of the ML-import suite cases whose
    products changed, against the same networks computed with the previous forms
    (``x @ W.T``, ``einsum``): 1e-12 relative."""
    from petab_sciml.backends.jax import BACKEND
    from tests.backends.jax.test_networks import SuiteCase
    from tests.simulation.test_official_suite import _previous_bilinear, _previous_linear

    names = _ml_cases_with_changed_products()
    assert names, "no suite case has a Bilinear layer any more"

    def run(name):
        c = SuiteCase(name)   # a new Network object: new traces
        net = BACKEND.build(c.network, dtype="float64")
        out = []
        for i in range(3):
            params = c.params(i)
            if params is not None:
                net = BACKEND.set_parameters(net, params)
            inputs = [np.asarray(x, np.float64) for x in c.inputs(i)]
            out.append((BACKEND.forward(net, inputs), BACKEND.gradients(net, inputs)))
        return out

    ours = {name: run(name) for name in names}
    with monkeypatch.context() as m:
        m.setattr(ops, "linear", _previous_linear)
        m.setattr(ops, "bilinear", _previous_bilinear)
        before = {name: run(name) for name in names}
    for name in names:
        for (out_a, grad_a), (out_b, grad_b) in zip(ours[name], before[name]):
            for a, b in zip(out_a, out_b, strict=True):
                assert _relative(a, b) <= 1e-12, name
            for group, arrays in grad_b.items():
                for array, b in arrays.items():
                    assert _relative(grad_a[group][array], b) <= 1e-12, (name, group, array)


# --------------------------------------------------------------------------- pytree S
@pytest.mark.slow
def test_forward_sensitivities_as_pytree_match_the_single_matrix(monkeypatch):
    """From ``LARGE_NETWORK_PARAMETERS`` on, forward sensitivities keep ``p`` and ``S`` as
    pytrees; here forced on the 54-parameter example and compared with the single-matrix
    form (verified against the suite's references): same solve, summation order apart."""
    from petab_sciml.backends.jax import xla_options
    from petab_sciml.problem import load_problem

    def evaluate():
        sim = load_problem(EXAMPLE / "problem.yaml", backend="jax").simulator(
            cache=False, sensitivity="forward")
        return sim.evaluate(grad=True)

    matrix = evaluate()
    monkeypatch.setattr(xla_options, "LARGE_NETWORK_PARAMETERS", 0)
    tree = evaluate()
    assert matrix.ok and tree.ok
    np.testing.assert_allclose(tree.value, matrix.value, rtol=1e-9)
    np.testing.assert_allclose(tree.simulations, matrix.simulations, rtol=1e-9, atol=1e-12)
    scale = np.max(np.abs(matrix.grad_flat))
    np.testing.assert_allclose(tree.grad_flat, matrix.grad_flat, rtol=0, atol=1e-7 * scale)


# --------------------------------------------------------------------------- numpy API
@pytest.mark.slow
def test_numpy_api_hands_over_the_compiled_results_unchanged(widened):
    """The numpy API packs ``p`` into a vector it reuses between calls and returns the
    gradient as views of the compiled function's output (no copies for large networks):
    earlier results stay intact after later calls, and each equals the compiled function
    called directly on its own copy of ``w``."""
    import jax.numpy as jnp

    from petab_sciml.problem import load_problem

    sim = load_problem(widened[8], backend="jax").simulator(cache=False,
                                                            sensitivity="reverse")
    plan, ex = sim.plan, sim.executor
    assert plan.all_free
    p0 = sim.parameters()
    p1 = {"mech": p0["mech"] * 1.05, "nets": p0["nets"]}
    first = sim.evaluate(p0)
    second = sim.evaluate(p1)
    flat = sim.evaluate(plan.w0 * 1.01)
    mech_only = sim.evaluate({"mech": p0["mech"]})   # arrays not passed keep nominal values
    for ev, w in ((first, plan.w0), (second, plan.pack(p1)), (flat, plan.w0 * 1.01),
                  (mech_only, plan.w0)):
        out, grad = ex.compiled("value_and_grad")(jnp.array(w), jnp.asarray(plan.theta0),
                                                  ex.data)
        assert ev.value == float(out["value"])
        assert np.array_equal(ev.simulations, np.asarray(out["simulations"]))
        assert np.array_equal(ev.grad_flat, np.asarray(grad))
        unpacked = plan.unpack(np.asarray(grad))
        assert np.array_equal(ev.grad["mech"], unpacked["mech"])
        for layer, arrays in unpacked["nets"]["net1"].items():
            for name, value in arrays.items():
                assert np.array_equal(ev.grad["nets"]["net1"][layer][name], value)
    assert first.value != second.value

"""The native trainable problem: an equinox Module (JAX) and a torch.nn.Module (PyTorch).

Checked against the numpy-in, numpy-out objective (itself checked against the official
suite's references in test_simulation_suite.py), against each other, and for what a
training loop relies on: jit/grad/vmap, optax and torch.optim, frozen elements, bounds,
the dropout column, dtype changes and writing the trained problem back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.suite import REPO, SUITE, requires_suite

pytest.importorskip("libsbml")
jax = pytest.importorskip("jax")
eqx = pytest.importorskip("equinox")
optax = pytest.importorskip("optax")
torch = pytest.importorskip("torch")

from petab_sciml.backends.jax import problem as jp  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402

EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"


def _suite_problems() -> list[Path]:
    if SUITE is None or not SUITE.is_dir():
        return []
    from petab_sciml.testcases import PROBLEM_CATEGORIES, discover_problems

    roots = [SUITE / "test_cases" / c for c in PROBLEM_CATEGORIES
             if (SUITE / "test_cases" / c).is_dir()]
    return [p / "petab" / "problem.yaml" if (p / "petab").is_dir() else p / "problem.yaml"
            for p in discover_problems(roots)]


CASES = _suite_problems()


def _id(path: Path) -> str:
    return f"{path.parents[2].name}-{path.parents[1].name}"


def _rel(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    scale = max(np.abs(b).max(initial=0.0), 1e-12)
    return float(np.abs(a - b).max(initial=0.0) / scale)


def _flat(tree: dict) -> np.ndarray:
    parts = [np.asarray(tree["mech"], float).ravel()]
    for layers in tree["nets"].values():
        for arrays in layers.values():
            parts += [np.asarray(v, float).ravel() for v in arrays.values()]
    return np.concatenate(parts)


def _jax_grad_tree(model, grads) -> dict:
    """Gradient of the native JAX model in the exchange format (``mech`` linear-scale
    chain rule undone: all suite cases are ``lin``)."""
    nets = {}
    for net in model.spec.plan.networks:
        layers = {}
        for s in net.arrays:
            g = (grads.nets[net.id][s.layer][s.array] if s.ir_trainable
                 else np.zeros(s.shape))
            layers.setdefault(s.layer, {})[s.array] = np.asarray(g)
        nets[net.id] = layers
    return {"mech": np.asarray(grads.mech), "nets": nets}


def _torch_grad_tree(module) -> dict:
    nets = {}
    for net in module.plan.networks:
        state = module.nets[net.id].state_dict(keep_vars=True)
        layers = {}
        for s in net.arrays:
            g = state[s.key].grad
            layers.setdefault(s.layer, {})[s.array] = (np.zeros(s.shape) if g is None
                                                       else g.detach().numpy())
        nets[net.id] = layers
    g = module.mech.grad
    return {"mech": np.zeros(module.mech.shape) if g is None else g.numpy(), "nets": nets}


# --------------------------------------------------------------------------- every case
@requires_suite
@pytest.mark.parametrize("path", CASES, ids=_id)
@pytest.mark.slow
def test_native_models_equal_value_and_grad(path):
    """Loss and gradient of the native JAX model, the native torch module (eager) and
    ``value_and_grad`` of each backend agree to 1e-6 relative on every suite problem."""
    for backend in ("jax", "torch"):
        problem = load_problem(path, backend=backend)
        sim = problem.simulator(**({"cache": False} if backend == "jax" else {}))
        value, grad = sim.value_and_grad(sim.parameters())
        if backend == "jax":
            model = problem.model()
            # jitted, as a user trains it (eager diffrax takes ~3x as long here)
            loss_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(jp.loss, has_aux=True))
            (native, _), g = loss_and_grad(model)
            native_grad = _jax_grad_tree(model, g)
        else:
            module = problem.model(compile=False).eval()
            loss = module()
            loss.backward()
            native, native_grad = loss.item(), _torch_grad_tree(module)
        assert abs(float(native) - value) <= 1e-6 * abs(value), (backend, native, value)
        assert _rel(_flat(native_grad), _flat(grad)) <= 1e-6, backend


@requires_suite
@pytest.mark.parametrize("path", CASES, ids=_id)
def test_save_validate_load_round_trip(path, tmp_path):
    """Save with changed values -> validate (exit 0) -> load gives identical values."""
    from click.testing import CliRunner

    from petab_sciml.cli import main

    problem = load_problem(path, backend="jax", simulation=True)
    values = problem.simulator(cache=False).parameters()
    rng = np.random.default_rng(0)
    values["mech"] = values["mech"] * (1 + 0.01 * rng.standard_normal(values["mech"].shape))
    for layers in values["nets"].values():
        for arrays in layers.values():
            for k in arrays:
                arrays[k] = arrays[k] + 1e-3 * rng.standard_normal(arrays[k].shape)
    out = problem.save(values, tmp_path / "saved")
    result = CliRunner().invoke(main, ["validate", str(out)])
    assert result.exit_code == 0, result.output
    again = load_problem(out, backend="jax").simulator(cache=False).parameters()
    assert np.array_equal(_flat(again), _flat(values))


# --------------------------------------------------------------------------- JAX
@pytest.fixture(scope="module")
def example_jax():
    return load_problem(EXAMPLE, backend="jax")


def test_jax_model_is_a_pytree_of_estimated_values(example_jax):
    model = example_jax.model()
    leaves = jax.tree_util.tree_leaves(model)
    sim = example_jax.simulator(cache=False)
    # mech (3) + every trainable array of net1, in PyTorch layout
    assert model.parameter_ids == sim.parameter_ids == ("alpha", "beta", "delta")
    assert model.nets["net1"]["layer1"]["weight"].shape == (5, 2)
    assert sum(x.size for x in leaves) == sim.plan.n_w


@pytest.mark.slow
def test_jax_jit_grad_vmap_and_optax(example_jax):
    model = example_jax.model()
    step_loss = eqx.filter_jit(eqx.filter_value_and_grad(jp.loss, has_aux=True))
    (value, aux), grads = step_loss(model)
    ref_value, ref_grad = example_jax.value_and_grad(example_jax.parameters())
    assert float(value) == pytest.approx(ref_value, rel=1e-9)
    assert _rel(np.asarray(grads.mech), ref_grad["mech"]) <= 1e-6
    assert aux["simulations"].shape == (len(example_jax.plan.measurements.value),)

    # a batch of starts in one call: the lanes are solved as one system (one step size,
    # each lane's local error within the tolerances) and differentiated in reverse mode,
    # so each start equals a tight-tolerance solve of it alone to the solver's accuracy
    # (rtol = atol = 1e-8: measured up to 1.4e-7 on values and gradients; a start solved
    # alone is off by up to 6e-8), not bit for bit; a start whose solution
    # overflows (prey growing as exp(100 t)) fails alone
    starts = [jax.tree_util.tree_map(lambda x, s=s: x * (1 + 0.05 * s), model)
              for s in range(4)]
    starts[1] = eqx.tree_at(lambda m: m.mech, starts[1], jax.numpy.asarray([100.0, 0, 0]))
    batch = jp.stack(starts)
    (values, aux), grads = eqx.filter_jit(eqx.filter_vmap(
        eqx.filter_value_and_grad(jp.loss, has_aux=True)))(batch)
    assert np.isinf(values[1]) and not aux["ok"][1]
    tight = example_jax.model(rtol=1e-12, atol=1e-12)
    for s in (0, 2, 3):
        assert aux["ok"][s]
        alone = eqx.tree_at(lambda m: (m.mech, m.nets), tight, (starts[s].mech, starts[s].nets))
        (ref_value, _), ref_grads = step_loss(alone)
        assert _rel(values[s], ref_value) <= 1e-6
        lane = [np.ravel(g[s]) for g in jax.tree_util.tree_leaves(grads)]
        alone = [np.ravel(g) for g in jax.tree_util.tree_leaves(ref_grads)]
        assert _rel(np.concatenate(lane), np.concatenate(alone)) <= 1e-6
    # a vmap over a vmap: one system of all lanes, the same values
    nested = eqx.filter_jit(eqx.filter_vmap(eqx.filter_vmap(lambda m: jp.loss(m)[0])))(
        jax.tree_util.tree_map(lambda x: x.reshape((2, 2) + x.shape[1:]), batch))
    np.testing.assert_allclose(np.asarray(nested).ravel(), np.asarray(values), rtol=1e-12)

    # an optax optimizer on the model itself
    opt = optax.adam(1e-3)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state):
        (value, _), grads = eqx.filter_value_and_grad(jp.loss, has_aux=True)(model)
        updates, state = opt.update(grads, state, model)
        return jp.project(eqx.apply_updates(model, updates)), state, value

    losses = []
    for _ in range(5):
        model, state, value = step(model, state)
        losses.append(float(value))
    assert losses[-1] < losses[0]


def _frozen_element_problem(tmp_path: Path) -> Path:
    """The example with net1.layer1.weight[0, 1] and layer2.bias[3] frozen and a log10
    mechanistic parameter."""
    folder = tmp_path / "frozen"
    shutil.copytree(EXAMPLE.parent, folder)
    with open(folder / "mapping.tsv", "a") as f:
        f.write("net1_w01\tnet1.parameters[layer1].weight[0, 1]\n"
                "net1_b3\tnet1.parameters[layer2].bias[3]\n")
    table = (folder / "parameters.tsv").read_text().replace("alpha\tlin", "alpha\tlog10")
    table += "net1_w01\tlin\t-inf\tinf\t0.25\tfalse\nnet1_b3\tlin\t-inf\tinf\t-0.5\tfalse\n"
    (folder / "parameters.tsv").write_text(table)
    return folder / "problem.yaml"


@pytest.mark.slow
def test_frozen_elements_do_not_move(tmp_path):
    path = _frozen_element_problem(tmp_path)
    problem = load_problem(path, backend="jax")
    model = problem.model()
    assert model.parameter_ids[0] == "alpha"
    assert float(model.mech[0]) == pytest.approx(np.log10(1.1))
    # adamw also decays weights: projection resets the frozen ones
    opt = optax.adamw(1e-2, weight_decay=0.1)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    grad_fn = eqx.filter_jit(eqx.filter_grad(lambda m: jp.loss(m)[0]))
    g = grad_fn(model)
    assert float(g.nets["net1"]["layer1"]["weight"][0, 1]) == 0.0
    assert float(g.nets["net1"]["layer2"]["bias"][3]) == 0.0
    for _ in range(3):
        updates, state = opt.update(grad_fn(model), state, model)
        model = jp.project(eqx.apply_updates(model, updates))
    values = model.values()
    assert values["nets"]["net1"]["layer1"]["weight"][0, 1] == 0.25
    assert values["nets"]["net1"]["layer2"]["bias"][3] == -0.5
    assert values["nets"]["net1"]["layer1"]["weight"][0, 0] != \
        problem.parameters()["nets"]["net1"]["layer1"]["weight"][0, 0]

    tproblem = load_problem(path, backend="torch")
    module = tproblem.model(compile=False)
    assert float(module.mech[0]) == pytest.approx(np.log10(1.1))
    opt_t = torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(2):
        opt_t.zero_grad()
        module().backward()
        w = module.nets["net1"].layer1.weight
        assert w.grad[0, 1].item() == 0.0
        opt_t.step()
        module.project_()
    tv = module.values()
    assert tv["nets"]["net1"]["layer1"]["weight"][0, 1] == 0.25
    assert tv["nets"]["net1"]["layer2"]["bias"][3] == -0.5


def _table_bounds() -> list[float]:
    """[upper bound of alpha, lower bound of beta], read from the example's table."""
    import csv

    with open(EXAMPLE.parent / "parameters.tsv", newline="") as f:
        rows = {r["parameterId"]: r for r in csv.DictReader(f, delimiter="\t")}
    return [float(rows["alpha"]["upperBound"]), float(rows["beta"]["lowerBound"])]


def test_bounds_by_projection_in_both_backends(example_jax):
    expected = _table_bounds()
    model = example_jax.model()
    far = jax.tree_util.tree_map(lambda x: x, model)
    far = eqx.tree_at(lambda m: m.mech, far, model.mech.at[0].set(100.0).at[1].set(-3.0))
    projected = jp.project(far)
    np.testing.assert_allclose(np.asarray(projected.mech[:2]), expected)
    module = load_problem(EXAMPLE, backend="torch").model(compile=False)
    with torch.no_grad():
        module.mech[0] = 100.0
        module.mech[1] = -3.0
    module.project_()
    np.testing.assert_allclose(module.mech.detach().numpy()[:2], expected)


def _dropout_problem(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "dropout"
    shutil.copytree(EXAMPLE.parent, folder)
    table = (folder / "parameters.tsv").read_text().splitlines()
    table[0] += "\tdropout"
    table[1:] = [row + ("\t0.3" if row.startswith("net1_ps") else "\t") for row in table[1:]]
    (folder / "parameters.tsv").write_text("\n".join(table) + "\n")
    return folder / "problem.yaml", EXAMPLE


@pytest.mark.slow
def test_dropout_column_only_in_training_mode(tmp_path):
    path, plain = _dropout_problem(tmp_path)
    reference = float(jp.loss(load_problem(plain, backend="jax").model())[0])
    model = load_problem(path, backend="jax").model()
    assert float(jp.loss(model)[0]) == pytest.approx(reference, rel=1e-12)
    trained = [float(jp.loss(model, key=jax.random.PRNGKey(k), train=True)[0])
               for k in range(3)]
    assert all(abs(t - reference) > 1e-6 * abs(reference) for t in trained)
    assert len(set(trained)) == 3
    with pytest.raises(Exception, match="PRNG key"):
        jp.loss(model, train=True)

    tref = load_problem(plain, backend="torch").model(compile=False).eval()().item()
    module = load_problem(path, backend="torch").model(
        compile=False, generator=torch.Generator().manual_seed(0))
    assert module.training  # torch's convention: modules start in training mode
    values = [module().item() for _ in range(2)]
    assert all(abs(v - tref) > 1e-6 * abs(tref) for v in values)
    assert module.eval()().item() == pytest.approx(tref, rel=1e-12)
    assert tref == pytest.approx(reference, rel=1e-6)


# --------------------------------------------------------------------------- PyTorch
@pytest.mark.slow
def test_torch_module_parameters_optimizer_and_dtype():
    problem = load_problem(EXAMPLE, backend="torch")
    module = problem.model(compile=False)
    names = [n for n, _ in module.named_parameters()]
    assert names[0] == "mech" and module.parameter_ids == ("alpha", "beta", "delta")
    assert "nets.net1.layer1.weight" in names
    assert isinstance(module.nets["net1"].layer1, torch.nn.Linear)
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    first = None
    for _ in range(3):
        opt.zero_grad()
        loss = module()
        loss.backward()
        assert module.mech.grad is not None and module.nets["net1"].layer1.weight.grad.any()
        opt.step()
        sched.step()
        first = loss.item() if first is None else first
    assert loss.item() < first
    value64 = module.eval()().item()
    module32 = module.to(torch.float32)
    value32 = module32().item()
    assert module32.mech.dtype == torch.float32
    assert value32 == pytest.approx(value64, rel=1e-3)


@requires_suite
@pytest.mark.slow
def test_torch_compiled_equals_eager():
    """The compiled solve (torch.compile) gives the eager loss and gradient."""
    path = next(p for p in CASES if _id(p) == "sciml_problem_import-004")
    problem = load_problem(path, backend="torch")
    grads = []
    for compile_ in (False, True):
        module = problem.model(compile=compile_).eval()
        loss = module()
        loss.backward()
        grads.append((loss.item(), _flat(_torch_grad_tree(module))))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-10)
    assert _rel(grads[1][1], grads[0][1]) <= 1e-8


@requires_suite
def test_torch_stages_unrolled_by_default_without_network_in_rhs():
    """``unroll_stages=None`` (the default): compiled solves unroll their Runge-Kutta
    stages when the right-hand side is symbolic formulas (suite 002: pre-initialization
    network, 004: network in an observable) and loop over them with a network in the
    right-hand side (001); an explicit value is kept.  Nothing is compiled here."""
    by_case = {_id(p): p for p in CASES}
    for case, unrolled in (("001", False), ("002", True), ("004", True)):
        module = load_problem(by_case[f"sciml_problem_import-{case}"],
                              backend="torch").model()
        assert module.executor.options.unroll_stages is unrolled, case
    forced = load_problem(by_case["sciml_problem_import-004"],
                          backend="torch").model(unroll_stages=False)
    assert forced.executor.options.unroll_stages is False


@requires_suite
@pytest.mark.slow
def test_adam_curves_agree_across_frameworks():
    """100 steps of optax Adam and torch.optim.Adam from the same start and learning rate
    give the same loss curve to 1e-4 relative (suite case 004: network in an
    observable, solved eagerly in torch)."""
    path = next(p for p in CASES if _id(p) == "sciml_problem_import-004")
    steps, lr = 100, 1e-3
    model = load_problem(path, backend="jax").model()
    opt = optax.adam(lr)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state):
        value, grads = eqx.filter_value_and_grad(lambda m: jp.loss(m)[0])(model)
        updates, state = opt.update(grads, state, model)
        return jp.project(eqx.apply_updates(model, updates)), state, value

    jax_curve = []
    for _ in range(steps):
        model, state, value = step(model, state)
        jax_curve.append(float(value))

    module = load_problem(path, backend="torch").model(compile=False).eval()
    topt = torch.optim.Adam(module.parameters(), lr=lr)
    torch_curve = []
    for _ in range(steps):
        topt.zero_grad()
        loss = module()
        loss.backward()
        topt.step()
        module.project_()
        torch_curve.append(loss.item())
    jax_curve, torch_curve = np.array(jax_curve), np.array(torch_curve)
    assert jax_curve[-1] < jax_curve[0]
    rel = np.abs(jax_curve - torch_curve) / np.abs(jax_curve)
    assert rel.max() <= 1e-4, rel.max()

"""Weight and bias cotangents summed over a ``vmap`` batch
(``ops.batch_summed_weight_cotangents``, ``JaxOptions.summed_weight_cotangents``).

References: JAX's own derivative rules (the same functions without the switch) and the
unbatched solve path.  The switch must change nothing but the order of a sum in
gradients of a sum over the batch, for every form of ``ops.linear`` (small ordered,
transposed, large ``dot_general``), with shared and with per-row weights, and through a
``jax.custom_vjp`` mapped over the batch (how diffrax's reverse pass sees it)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("diffrax")

import jax.numpy as jnp  # noqa: E402

from petab_sciml.backends.jax import ops  # noqa: E402

pytestmark = pytest.mark.usefixtures("restore_x64")

# (out, in): ordered (small), transposed (<= 1,024 weights, > 64 inputs), dot_general
SHAPES = [(6, 4), (4, 200), (150, 130)]


def _switched(fn):
    def run(*args):
        with ops.batch_summed_weight_cotangents():
            return fn(*args)
    return run


def _arrays(shape, rows=7, starts=3):
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(sum(shape))
    out, inp = shape
    return (jnp.asarray(rng.normal(size=(out, inp)) / np.sqrt(inp)),
            jnp.asarray(rng.normal(size=out)),
            jnp.asarray(rng.normal(size=(rows, inp))),
            jnp.asarray(rng.normal(size=(starts, out, inp)) / np.sqrt(inp)),
            jnp.asarray(rng.normal(size=(starts, out))))


def _loss(weight, bias, xs):
    """A sum over a ``vmap`` batch of rows, weight and bias shared."""
    def one(x):
        return jnp.tanh(ops.linear(x, weight, bias))
    return jnp.sum(jax.vmap(one)(xs) ** 2)


def _max_rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(1e-300, np.max(np.abs(b))))


def _switch_changes_nothing(grad, *args) -> None:
    """``grad(*args)`` with and without the switch: same shapes, same values to 1e-13."""
    ref, got = grad(*args), _switched(grad)(*args)
    for r, g in zip(ref, got):
        assert g.shape == r.shape
        assert _max_rel(g, r) < 1e-13


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_gradient_of_a_batch_sum_is_unchanged(shape):
    weight, bias, xs, _, _ = _arrays(shape)
    _switch_changes_nothing(jax.grad(_loss, argnums=(0, 1)), weight, bias, xs)
    # values bit for bit
    assert float(_switched(_loss)(weight, bias, xs)) == float(_loss(weight, bias, xs))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_per_row_weights_keep_their_own_cotangents(shape):
    """``vmap`` over starts, each with its own weight and bias (batched arrays), of the
    gradient of a sum over rows: every start keeps its own gradient."""
    _, _, xs, weights, biases = _arrays(shape)
    _switch_changes_nothing(jax.vmap(jax.grad(_loss, argnums=(0, 1)), in_axes=(0, 0, None)),
                            weights, biases, xs)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_weights_batched_with_the_rows_are_not_summed(shape):
    """Per-row gradients where every row has its own weight and bias (batched at the
    same ``vmap`` level as the rows): nothing may be summed."""
    _, _, xs, weights, biases = _arrays(shape, rows=3)

    def one(w, b, x):
        return jnp.sum(jnp.tanh(ops.linear(x, w, b)) ** 2)

    _switch_changes_nothing(jax.vmap(jax.grad(one, argnums=(0, 1))), weights, biases, xs)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_through_a_custom_vjp_mapped_over_the_batch(shape):
    """The case the switch is for: a ``custom_vjp`` (as diffrax's checkpointed loop) whose
    backward pass JAX maps over the batch.  Plain rules give each row its own weight
    cotangent there, summed afterwards; the switch sums inside: same gradient."""
    weight, bias, xs, _, _ = _arrays(shape)

    def layer(w, b, x):
        return jnp.tanh(ops.linear(x, w, b))

    @jax.custom_vjp
    def block(w, b, x):
        return layer(w, b, x)

    def block_fwd(w, b, x):
        return layer(w, b, x), (w, b, x)

    def block_bwd(res, ct):
        return jax.vjp(layer, *res)[1](ct)

    block.defvjp(block_fwd, block_bwd)

    def loss(w, b, xs):
        return jnp.sum(jax.vmap(lambda x: block(w, b, x))(xs) ** 2)

    _switch_changes_nothing(jax.grad(loss, argnums=(0, 1)), weight, bias, xs)


def test_per_example_gradients_of_a_shared_weight_are_outside_the_contract():
    """Why only the objective's gradient switches it on: ``vmap`` of ``grad`` with a
    shared weight asks for per-row gradients, and under the switch every row gets the
    batch's sum instead (this also shows that the switch is in effect)."""
    weight, bias, xs, _, _ = _arrays((150, 130))

    def one(w, x):
        return jnp.sum(jnp.tanh(ops.linear(x, w, bias)) ** 2)

    per_row = jax.vmap(jax.grad(one), in_axes=(None, 0))
    plain = np.asarray(per_row(weight, xs))
    switched = np.asarray(_switched(per_row)(weight, xs))
    assert _max_rel(plain.sum(0), np.asarray(jax.grad(_loss)(weight, bias, xs))) < 1e-13
    assert np.max(np.abs(switched - plain.sum(0)[None])) < 1e-12
    assert np.max(np.abs(switched - plain)) > 1e-3


@pytest.fixture(scope="module")
def five_state(tmp_path_factory):
    """The 5-state problem (a 5-96-96-1 network in the right-hand side, reverse mode),
    6 experiments with their own initial conditions and time grids, evaluated with
    summed cotangents, with JAX's own rules, and unbatched (one solve after another)."""
    pytest.importorskip("libsbml")
    jax.config.update("jax_enable_x64", True)
    from petab_sciml import load_problem
    from tests.support.problems.five_state import write_five_state

    problem = load_problem(write_five_state(tmp_path_factory.mktemp("five"), 6),
                           backend="jax")
    sims = {"summed": problem.simulator(cache=False),
            "rules": problem.simulator(cache=False, summed_weight_cotangents=False),
            "unbatched": problem.simulator(cache=False, batch_experiments=False)}
    assert sims["summed"].executor.sensitivity == "reverse"
    assert sims["summed"].executor.options.summed_weight_cotangents
    return {name: sim.evaluate() for name, sim in sims.items()}


@pytest.mark.slow
def test_five_state_problem_gradient_with_and_without_the_switch(five_state):
    got, ref = five_state["summed"], five_state["rules"]
    assert got.value == ref.value
    g, r = got.grad_flat, ref.grad_flat   # every entry estimated: the whole gradient
    assert np.all(np.isfinite(g))
    assert _max_rel(g, r) < 1e-12


@pytest.mark.slow
def test_five_state_problem_batched_equals_unbatched(five_state):
    """Issue 17: batched == unbatched to 1e-10.  With diffrax's step growth of up to
    10x per step they were 3.9e-9 (value) and 2.9e-10 (gradient) apart: growth factors
    computed from error estimates at rounding level (``simulation.steps.MAX_STEP_GROWTH``)."""
    got, alone = five_state["summed"], five_state["unbatched"]
    g, a = got.grad_flat, alone.grad_flat
    assert abs(got.value - alone.value) / abs(alone.value) < 1e-10
    assert np.max(np.abs(g - a) / np.maximum(1.0, np.abs(a))) < 1e-10

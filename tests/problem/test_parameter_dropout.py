"""The parameter table's ``dropout`` column: drop rate and scaling (statistical), exact
torch-vs-JAX equality with injected masks, no effect in eval mode, input axes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from petab_sciml.network import Network
from petab_sciml.problem.dropout import apply_numpy, dropout_targets, input_axis

torch = pytest.importorskip("torch")
from petab_sciml.backends.torch import BACKEND as TORCH  # noqa: E402
from petab_sciml.backends.torch.parameter_dropout import (  # noqa: E402
    ParameterDropout,
    apply_parameter_dropout,
)


def _mlp(n_in=400, n_hidden=3) -> Network:
    layers = [{"layer_id": "l1", "layer_type": "Linear",
               "args": {"in_features": n_in, "out_features": n_hidden}},
              {"layer_id": "l2", "layer_type": "Linear",
               "args": {"in_features": n_hidden, "out_features": 2}}]
    nodes = [{"name": "x", "op": "placeholder", "target": "x"},
             {"name": "h", "op": "call_module", "target": "l1", "args": ["x"]},
             {"name": "a", "op": "call_function", "target": "tanh", "args": ["h"]},
             {"name": "o", "op": "call_module", "target": "l2", "args": ["a"]},
             {"name": "output", "op": "output", "target": "output", "args": ["o"]}]
    return Network.build("nn", ["x"], layers, nodes)


SPEC = {"l1": {"weight": 0.3, "bias": 0.5}}


def test_input_axes():
    assert input_axis("Linear", "weight", 2) == 1
    assert input_axis("Conv2d", "weight", 4) == 1
    assert input_axis("ConvTranspose2d", "weight", 4) == 0
    assert input_axis("Linear", "bias", 1) == 0
    assert input_axis(None, "scale", 0) is None
    t = dropout_targets(_mlp(), SPEC)
    assert [(x.name, x.axis, x.n_slices, x.mask_shape) for x in t] == [
        ("l1.weight", 1, 400, (1, 400)), ("l1.bias", 0, 3, (3,))]


def test_torch_drop_rate_and_scaling():
    net = _mlp()
    module = TORCH.build(net, dtype="float64")
    wrapped = ParameterDropout(module, SPEC, generator=torch.Generator().manual_seed(1))
    wrapped.train()
    w = module.l1.weight.detach().numpy()
    x = torch.ones(400, dtype=torch.float64)
    dropped, total = 0, 0
    for _ in range(200):
        wrapped(x)
        keep = wrapped.last_masks["l1"]["weight"].numpy()
        dropped += int((~keep).sum())
        total += keep.size
    rate = dropped / total
    sigma = math.sqrt(0.3 * 0.7 / total)
    assert abs(rate - 0.3) < 5 * sigma
    # the effective weight: kept input columns scaled by 1/(1-p), dropped ones zero
    params = {"l1.weight": module.l1.weight, "l1.bias": module.l1.bias}
    masks = {"l1": {"weight": wrapped.last_masks["l1"]["weight"],
                    "bias": torch.tensor([True, False, True])}}
    eff = apply_parameter_dropout(params, dropout_targets(net, SPEC), masks)
    keep = masks["l1"]["weight"].numpy()
    assert np.array_equal(eff["l1.weight"].detach().numpy()[:, ~keep], np.zeros((3, (~keep).sum())))
    np.testing.assert_allclose(eff["l1.weight"].detach().numpy()[:, keep], w[:, keep] / 0.7,
                               rtol=1e-15)
    assert eff["l1.bias"].detach().numpy()[1] == 0


def test_torch_mean_output_is_unbiased_for_first_layer():
    net = _mlp(n_in=50, n_hidden=4)
    module = TORCH.build(net, dtype="float64", seed=3)
    wrapped = ParameterDropout(module, {"l1": {"weight": 0.25}},
                               generator=torch.Generator().manual_seed(0))
    x = torch.linspace(-1, 1, 50, dtype=torch.float64)
    # E[W_eff] = W, so the mean pre-activation matches the eval one
    n = 4000
    total = torch.zeros(4, dtype=torch.float64)
    w, b = module.l1.weight, module.l1.bias
    with torch.no_grad():
        for _ in range(n):
            keep = _draw(wrapped)["l1"]["weight"]
            total += (w * keep.to(w.dtype) / 0.75) @ x + b
    mean = total / n
    expected = w @ x + b
    assert torch.allclose(mean, expected, atol=0.05)


def _draw(wrapped):
    from petab_sciml.backends.torch.parameter_dropout import sample_masks

    return sample_masks(wrapped.targets, wrapped.generator)


def test_torch_eval_mode_is_identity():
    net = _mlp()
    module = TORCH.build(net, dtype="float32")
    wrapped = ParameterDropout(module, SPEC)
    wrapped.eval()
    x = torch.randn(5, 400)
    with torch.no_grad():
        assert torch.equal(wrapped(x), module(x))


def test_torch_gradients_reach_the_module():
    net = _mlp()
    module = TORCH.build(net, dtype="float64")
    wrapped = ParameterDropout(module, SPEC, generator=torch.Generator().manual_seed(0))
    wrapped.train()
    wrapped(torch.ones(400, dtype=torch.float64)).sum().backward()
    keep = wrapped.last_masks["l1"]["weight"]
    grad = module.l1.weight.grad
    assert grad is not None
    assert torch.all(grad[:, ~keep] == 0) and torch.any(grad[:, keep] != 0)


def test_injected_masks_match_numpy_reference():
    net = _mlp()
    module = TORCH.build(net, dtype="float32")
    rng = np.random.default_rng(0)
    targets = dropout_targets(net, SPEC)
    masks = {"l1": {"weight": rng.random(400) > 0.3, "bias": np.array([1, 0, 1], bool)}}
    params = TORCH.get_parameters(module)
    ref = apply_numpy(params, targets, masks)
    got = apply_parameter_dropout({f"{lay}.{a}": torch.as_tensor(v) for lay, arr in
                                   params.items() for a, v in arr.items()}, targets, masks)
    for t in targets:
        assert np.array_equal(got[t.name].numpy(), ref[t.layer][t.array])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_and_jax_equal_with_injected_masks(dtype):
    jax = pytest.importorskip("jax")
    previous = bool(jax.config.jax_enable_x64)
    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    try:
        _torch_vs_jax(dtype)
    finally:
        jax.config.update("jax_enable_x64", previous)


def _torch_vs_jax(dtype):
    from petab_sciml.backends.jax.parameter_dropout import dropout_parameters

    net = _mlp()
    module = TORCH.build(net, dtype=dtype)
    params = TORCH.get_parameters(module)
    targets = dropout_targets(net, SPEC)
    rng = np.random.default_rng(1)
    masks = {"l1": {"weight": rng.random(400) > 0.3, "bias": rng.random(3) > 0.5}}
    jax_params = dropout_parameters(params, targets, masks=masks)
    torch_params = apply_parameter_dropout(
        {f"{lay}.{a}": torch.as_tensor(v) for lay, arr in params.items()
         for a, v in arr.items()}, targets, masks)
    for t in targets:
        j = np.asarray(jax_params[t.layer][t.array])
        assert j.dtype == np.dtype(dtype)
        assert np.array_equal(j, torch_params[t.name].numpy())      # bitwise equal
    # and through both backends' forward passes
    try:
        from petab_sciml.backends.jax import BACKEND as JAX

        jmodel = JAX.set_parameters(JAX.build(net, dtype=dtype),
                                    {k: {a: np.asarray(v) for a, v in d.items()}
                                     for k, d in jax_params.items()})
    except Exception as exc:  # pragma: no cover - JAX backend not installed/finished
        pytest.skip(f"JAX backend unavailable: {exc}")
    wrapped = ParameterDropout(module, SPEC)
    wrapped.set_masks(masks)
    wrapped.train()
    x = rng.normal(size=(7, 400)).astype(dtype)
    with torch.no_grad():
        t_out = wrapped(torch.as_tensor(x)).numpy()
    (j_out,) = JAX.forward(jmodel, [x], train=False)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(np.asarray(j_out), t_out, rtol=tol, atol=tol)


def test_jax_drop_rate_eval_and_jit():
    jax = pytest.importorskip("jax")
    from petab_sciml.backends.jax.parameter_dropout import dropout_parameters, sample_masks

    net = _mlp()
    targets = dropout_targets(net, SPEC)
    params = {"l1": {"weight": np.ones((3, 400), np.float32), "bias": np.ones(3, np.float32)},
              "l2": {"weight": np.ones((2, 3), np.float32), "bias": np.ones(2, np.float32)}}
    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    kept = jax.vmap(lambda k: sample_masks(targets, k)["l1"]["weight"])(keys)
    total = kept.size
    rate = 1 - float(np.asarray(kept).mean())
    assert abs(rate - 0.3) < 5 * math.sqrt(0.21 / total)
    fn = jax.jit(lambda p, k: dropout_parameters(p, targets, key=k))
    out = fn(params, keys[0])
    w = np.asarray(out["l1"]["weight"])
    assert set(np.unique(w)) <= {0.0, np.float32(1 / 0.7)}
    assert np.all(w == w[0])                       # whole input columns dropped together
    same = dropout_parameters(params, targets, key=keys[0], train=False)
    assert all(np.array_equal(same[lay][a], params[lay][a]) for lay in params
               for a in params[lay])

"""``format: equinox``: an equinox module in a Python file, traced to a jaxpr and lifted
into the IR, gives equinox's own outputs in both backends; the trust gate holds; a
primitive without an IR form is named."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("equinox")
pytest.importorskip("torch")

from petab_sciml.errors import NetworkError, UntrustedCodeError  # noqa: E402
from petab_sciml.formats import equinox_file  # noqa: E402
from petab_sciml.plugins import get_backend, get_format  # noqa: E402

CONV_MLP = '''
import equinox as eqx
import jax
import jax.numpy as jnp

INPUT_SHAPES = [(2, 3, 8, 8)]


class Net(eqx.Module):
    conv: eqx.nn.Conv2d
    mlp: eqx.nn.MLP
    scale: jax.Array

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.conv = eqx.nn.Conv2d(3, 4, 3, stride=2, padding=1, key=k1)
        self.mlp = eqx.nn.MLP(64, 2, 16, 2, activation=jax.nn.gelu, key=k2)
        self.scale = jnp.array([0.5, 2.0])

    def __call__(self, x):
        y = jax.nn.relu(jax.vmap(self.conv)(x)).reshape(x.shape[0], -1)
        out = jax.vmap(self.mlp)(y)
        return jnp.tanh(out) * self.scale + jax.nn.softplus(out).sum(-1, keepdims=True)
'''

UDE = '''
import equinox as eqx
import jax
import jax.numpy as jnp


class UDE(eqx.Module):
    """An unbatched network, as equinox users write them (two inputs)."""

    layers: list
    input_shapes = [(2,), (1,)]

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(3, 5, key=k1), eqx.nn.Linear(5, 2, key=k2)]

    def __call__(self, x, t):
        h = jnp.tanh(self.layers[0](jnp.concatenate([x, t])))
        return jax.nn.sigmoid(self.layers[1](h)) - x ** 2
'''

UNSUPPORTED = '''
import equinox as eqx
import jax.numpy as jnp

INPUT_SHAPES = [(3,)]


class Net(eqx.Module):
    def __call__(self, x):
        return jnp.arctan(x)
'''


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "net.py"
    path.write_text(text)
    return path


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"eqx_test_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)(key=jax.random.PRNGKey(0))


@pytest.fixture(params=[False, True], ids=["x32", "x64"])
def jax_x64(request):
    """JAX with 64-bit types off and on (a float64 JAX model turns them on for the rest
    of the process); restored afterwards."""
    previous = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_enable_x64", previous)


@pytest.mark.slow
@pytest.mark.parametrize("text, name, shapes", [(CONV_MLP, "Net", [(2, 3, 8, 8)]),
                                                (UDE, "UDE", [(2,), (1,)])],
                         ids=["conv_mlp", "ude"])
def test_equinox_module_matches_equinox(tmp_path: Path, text: str, name: str,
                                        shapes: list, jax_x64: bool) -> None:
    """With x64 on, equinox makes float64 parameters: the module is traced and lifted in
    its own dtype."""
    path = _write(tmp_path, text)
    network, params = equinox_file.read_with_parameters(path, trust_code=True)
    assert network.id == name
    float_dtype = np.dtype(np.float64 if jax_x64 else np.float32)
    assert {a.dtype for arrays in params.values() for a in arrays.values()} == {float_dtype}
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=s).astype(np.float32) for s in shapes]
    # equinox's own result, in the dtype of the module's parameters
    expected = np.asarray(_module(path, name)(*(x.astype(float_dtype) for x in inputs)))
    for backend_name in ("torch", "jax"):
        backend = get_backend(backend_name)
        model = backend.set_parameters(backend.build(network), params)
        (got,) = backend.forward(model, inputs)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=backend_name)
    # every array of the module is a trainable parameter, named by its path
    names = {f"{g}.{a}" for g, arrays in network.parameter_arrays().items() for a in arrays}
    if name == "UDE":
        assert names == {"layers_0.weight", "layers_0.bias", "layers_1.weight",
                         "layers_1.bias"}
    else:
        assert "params.scale" in names and any(n.endswith(".weight") for n in names)
        assert {layer.type for layer in network.layers.values()} == {"Conv2d"}


def test_gradients_agree_between_backends(tmp_path: Path) -> None:
    path = _write(tmp_path, UDE)
    network, params = equinox_file.read_with_parameters(path, trust_code=True)
    inputs = [np.array([0.3, -0.2], np.float32), np.array([0.5], np.float32)]
    grads = {}
    for name in ("torch", "jax"):
        backend = get_backend(name)
        grads[name] = backend.gradients(backend.set_parameters(backend.build(network), params),
                                        inputs)
    for group, arrays in grads["torch"].items():
        for array, value in arrays.items():
            np.testing.assert_allclose(grads["jax"][group][array], value, rtol=1e-5,
                                       atol=1e-6)


def test_refused_without_trust(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = _write(tmp_path, f"open({str(marker)!r}, 'w').close()\n" + UDE)
    with pytest.raises(UntrustedCodeError, match="trust_code=True"):
        equinox_file.read(path)
    assert not marker.exists()
    fmt = get_format("equinox")
    assert fmt.runs_code and fmt.write is None


def test_unsupported_primitive_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, UNSUPPORTED)
    with pytest.raises(NetworkError, match="jaxpr primitive 'atan' has no IR form"):
        equinox_file.read(path, trust_code=True)


def test_input_shapes_are_required(tmp_path: Path) -> None:
    path = _write(tmp_path, UNSUPPORTED.replace("INPUT_SHAPES = [(3,)]", ""))
    with pytest.raises(NetworkError, match="input shapes are needed"):
        equinox_file.read(path, trust_code=True)

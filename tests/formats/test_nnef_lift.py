"""Lifting NNEF operations that nnef_tools conversions do not exercise: hand-written graphs
(comparisons cast to scalars, select with numbers, reversed partial slices, prelu, pad,
reductions over no axes, NNEF broadcasting) read without metadata and compared with the
nnef_tools PyTorch interpreter or an independent numpy reference."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nnef = pytest.importorskip("nnef")
pytest.importorskip("nnef_tools")

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats import nnef as nnef_format  # noqa: E402
from petab_sciml.plugins import get_backend  # noqa: E402
from tests.formats.test_nnef import _interpret  # noqa: E402
from tests.formats.test_nnef import _write_graph as write_graph  # noqa: E402

TOL = 1e-5


def _write_graph(folder: Path, body: str, inputs: str,
                 variables: dict[str, np.ndarray] | None = None, outputs: str = "out",
                 header: str = "") -> Path:
    return write_graph(folder, f"version 1.0;\n{header}\ngraph net( {inputs} ) -> "
                               f"( {outputs} )\n{{\n{body}\n}}\n", variables or {})


def _lift(folder: Path) -> tuple[Any, dict]:
    return nnef_format.read_with_parameters(folder, metadata=False)


def _run(network: Any, params: dict, inputs: list[np.ndarray], backend: str) -> list:
    b = get_backend(backend)
    model = b.set_parameters(b.build(network), params)
    out = b.forward(model, inputs, train=False)
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def _check(folder: Path, inputs: list[np.ndarray], expected: list[np.ndarray],
           backends: tuple[str, ...] = ("torch", "jax")) -> Any:
    network, params = _lift(folder)
    for backend in backends:
        got = _run(network, params, inputs, backend)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape, f"{backend}: shape {g.shape} instead of {e.shape}"
            assert g.dtype != np.bool_, f"{backend}: a bool output where NNEF has scalars"
            np.testing.assert_allclose(g, e, atol=TOL, rtol=0, err_msg=backend)
    return network


def _functions(network: Any) -> set[str]:
    return {n.function for n in network.nodes if n.function}


def test_comparisons_cast_to_scalar_and_added(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [4, 5]);
    y = external<scalar>(shape = [4, 5]);
    a = cast<scalar>(gt(x, y));
    b = cast<scalar>(le(x, 0.25));
    c = cast<scalar>(lt(-0.5, x));
    d = cast<scalar>(ge(y, x));
    e = cast<scalar>(eq(x, 0.0));
    s = add(a, b);
    t = add(c, d);
    u = add(s, t);
    out = add(u, e);
    f = reshape(gt(x, 0.5), shape = [20]);
    g = reshape(lt(y, 0.5), shape = [20]);
    cf = cast<scalar>(f);
    cg = cast<scalar>(g);
    flat = add(cf, cg);
"""
    folder = _write_graph(tmp_path / "m", body, "x, y", outputs="out, flat")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    x[0, :2] = 0.0
    y = rng.standard_normal((4, 5)).astype(np.float32)
    y[1, 1] = x[1, 1]
    reference = ((x > y).astype(np.float32) + (x <= 0.25) + (-0.5 < x) + (y >= x)
                 + (x == 0.0))
    flat = ((x > 0.5).astype(np.float32) + (y < 0.5)).reshape(20)
    assert reference.max() >= 3 and flat.max() == 2  # bool + bool would not add up
    network = _check(folder, [x, y], [reference, flat])
    _check(folder, [x, y], _interpret(folder, [x, y]), ("torch",))
    assert {"gt", "le", "lt", "ge", "eq"} <= _functions(network)


def test_select_with_numbers_and_nnef_broadcasting(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [3, 4]);
    v = external<scalar>(shape = [3]);
    p = select(gt(x, 0.1), 1.5, -2.0);
    q = select(lt(x, 0.2), x, 3.0);
    r = select(ge(v, 0.0), x, 0.5);
    m = max(x, v);
    n = min(v, x);
    s = add(p, q);
    t = add(r, m);
    u = add(s, t);
    out = add(u, n);
"""
    folder = _write_graph(tmp_path / "m", body, "x, v")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    v = np.array([0.7, -0.3, 0.2], np.float32)
    col = v[:, None]  # NNEF broadcasting: [3] against [3, 4] is [3, 1]
    reference = (np.where(x > 0.1, 1.5, -2.0) + np.where(x < 0.2, x, 3.0)
                 + np.where(col >= 0.0, x, 0.5) + np.maximum(x, col) + np.minimum(col, x))
    network = _check(folder, [x, v], [reference.astype(np.float32)])
    _check(folder, [x, v], _interpret(folder, [x, v]), ("torch",))
    assert {"where", "maximum", "minimum"} <= _functions(network)


def test_reversed_partial_slices(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [5, 6, 7]);
    a = slice(x, axes = [0], begin = [3], end = [0], stride = [-2]);
    b = slice(x, axes = [1], begin = [-1], end = [-5], stride = [-1]);
    c = slice(x, axes = [2], begin = [7], end = [-8], stride = [-3]);
    d = slice(x, axes = [0, 2], begin = [1, 5], end = [4, 0], stride = [1, -2]);
    e = slice(x, axes = [-1, 0], begin = [-2, 4], end = [-100, -6], stride = [-2, -1]);
    f = slice(x, axes = [1], begin = [100], end = [-100], stride = [-1]);
    g = slice(x, axes = [1], begin = [2], end = [6], stride = [-1]);
"""
    folder = _write_graph(tmp_path / "m", body, "x", outputs="a, b, c, d, e, f, g")
    x = np.arange(5 * 6 * 7, dtype=np.float32).reshape(5, 6, 7)
    reference = [x[3:0:-2], x[:, 5:1:-1], x[:, :, [4, 1]], x[1:4, :, 5:0:-2],
                 x[::-1, :, 5::-2], x[:, ::-1], x[:, 2:6:-1]]
    network = _check(folder, [x], reference)
    _check(folder, [x], _interpret(folder, [x]), ("torch",))
    assert {"flip", "getitem"} <= _functions(network)


def test_prelu_per_channel_size_one_and_generic(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [2, 3, 3, 5]);
    w = variable<scalar>(shape = [3], label = 'act');
    w1 = variable<scalar>(shape = [1], label = 'act1');
    g = variable<scalar>(shape = [1, 1, 3, 1], label = 'gate');
    u = unsqueeze(w, axes = [1, 2]);
    alpha = unsqueeze(u, axes = [0]);
    a = prelu(x, alpha);
    b = prelu(x, w1);
    c = prelu(x, g);
    s = add(a, b);
    out = add(s, c);
"""
    rng = np.random.default_rng(3)
    w, w1 = rng.uniform(0.1, 0.5, 3), rng.uniform(0.5, 0.9, 1)
    g = rng.uniform(1.5, 2.5, (1, 1, 3, 1))  # not channels: no PReLU
    folder = _write_graph(tmp_path / "m", body, "x", {"act": w, "act1": w1, "gate": g})
    x = rng.standard_normal((2, 3, 3, 5)).astype(np.float32)

    def prelu(alpha: np.ndarray) -> np.ndarray:
        return np.where(x < 0, alpha.astype(np.float32) * x, x)

    reference = prelu(w.reshape(1, 3, 1, 1)) + prelu(w1) + prelu(g)
    network = _check(folder, [x], [reference])
    _check(folder, [x], _interpret(folder, [x]), ("torch",))
    layers = {lid: layer.type for lid, layer in network.layers.items()}
    assert sorted(layers.values()) == ["PReLU", "PReLU"], layers
    configs = sorted(layer.config["num_parameters"] for layer in network.layers.values())
    assert configs == [1, 3]
    _, params = _lift(folder)
    weights = {tuple(params[lid]["weight"].shape) for lid in layers}
    assert weights == {(3,), (1,)}


def test_prelu_rank_one_input_and_number(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [6]);
    w = variable<scalar>(shape = [1], label = 'act.weight');
    a = prelu(x, w);
    b = prelu(x, 0.3);
    out = add(a, b);
"""
    folder = _write_graph(tmp_path / "m", body, "x", {"act.weight": np.array([0.2])})
    x = np.linspace(-2, 2, 6, dtype=np.float32)
    reference = np.where(x < 0, np.float32(0.2) * x, x) + np.where(x < 0, 0.3 * x, x)
    network = _check(folder, [x], [reference.astype(np.float32)])
    assert {lid: layer.type for lid, layer in network.layers.items()} == {"act": "PReLU"}


_PAD_INPUT = (2, 3, 5, 6)


@pytest.mark.parametrize("padding,border,value", [
    ("[(0, 0), (0, 0), (1, 2), (2, 0)]", "constant", 0.5),
    ("[(0, 0), (0, 0), (0, 0), (2, 1)]", "reflect", 0.0),
    ("[(0, 0), (0, 0), (1, 1), (0, 2)]", "replicate", 0.0),
    ("[(0, 0), (0, 0), (-1, 2), (1, -2)]", "constant", -1.0),
    ("[(0, 0), (0, 0), (2, -1), (-2, 1)]", "reflect", 0.0),
    ("[(0, 0), (0, 0), (0, -2), (3, 0)]", "replicate", 0.0),
], ids=["constant", "reflect", "replicate", "constant_negative", "reflect_negative",
        "replicate_negative"])
def test_pad_borders(tmp_path: Path, padding: str, border: str, value: float) -> None:
    body = f"""
    x = external<scalar>(shape = {list(_PAD_INPUT)});
    out = pad(x, padding = {padding}, border = '{border}', value = {value});
"""
    folder = _write_graph(tmp_path / "m", body, "x")
    x = np.random.default_rng(4).standard_normal(_PAD_INPUT).astype(np.float32)
    pairs = eval(padding)  # noqa: S307 - the literal above
    mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[border]
    kwargs = {"constant_values": value} if border == "constant" else {}
    reference = np.pad(x, [(max(p, 0), max(q, 0)) for p, q in pairs], mode=mode, **kwargs)
    reference = reference[tuple(slice(-min(p, 0), n + q if q < 0 else None)
                                for (p, q), n in zip(pairs, reference.shape))]
    _check(folder, [x], [reference])
    _check(folder, [x], _interpret(folder, [x]), ("torch",))


def test_pad_of_every_dimension_and_reflect_even(tmp_path: Path) -> None:
    # beyond the interpreter (ranks 3-5, no padding of the first two axes): numpy only
    body = """
    x = external<scalar>(shape = [3, 4]);
    a = pad(x, padding = [(1, 0), (2, 1)], border = 'replicate');
    b = pad(x, padding = [(1, 2), (0, 0)], border = 'reflect');
    c = pad(x, padding = [(1, 1), (0, 1)], border = 'reflect-even');
    d = pad(x, padding = [(-1, 0), (0, 2)], value = 3.0);
"""
    folder = _write_graph(tmp_path / "m", body, "x", outputs="a, b, c, d")
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    reference = [np.pad(x, ((1, 0), (2, 1)), mode="edge"),
                 np.pad(x, ((1, 2), (0, 0)), mode="reflect"),
                 np.pad(x, ((1, 1), (0, 1)), mode="symmetric"),
                 np.pad(x[1:], ((0, 0), (0, 2)), constant_values=3.0)]
    _check(folder, [x], reference)


def test_pad_reflect_even_is_refused(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [2, 3, 5]);
    out = pad(x, padding = [(0, 0), (0, 0), (2, 2)], border = 'reflect-even');
"""
    folder = _write_graph(tmp_path / "m", body, "x")
    with pytest.raises(NetworkError) as info:
        _lift(folder)
    message = str(info.value)
    assert "'reflect-even'" in message and str(folder) in message and "pad" in message


def test_reductions_over_no_axes_and_some(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [2, 3, 4]);
    a = max_reduce(x, axes = []);
    b = min_reduce(x, axes = []);
    c = sum_reduce(x, axes = []);
    d = max_reduce(x, axes = [0, 2]);
    e = min_reduce(x, axes = [-1]);
"""
    folder = _write_graph(tmp_path / "m", body, "x", outputs="a, b, c, d, e")
    x = np.random.default_rng(6).standard_normal((2, 3, 4)).astype(np.float32)
    reference = [x, x, x, x.max(axis=(0, 2), keepdims=True), x.min(axis=2, keepdims=True)]
    network = _check(folder, [x], reference)
    _check(folder, [x], _interpret(folder, [x]), ("torch",))
    assert {"amax", "amin"} <= _functions(network)


_ERF_FRAGMENT = """extension KHR_enable_fragment_definitions;
extension KHR_enable_operator_expressions;

fragment erf( x: tensor<scalar> ) -> ( y: tensor<scalar> )
{
    t = 1.0 / (1.0 + 0.3275911 * abs(x));
    z = 1.0 - (((((1.061405429 * t + -1.453152027) * t) + 1.421413741) * t + -0.284496736)
        * t + 0.254829592) * t * exp(-x * x);
    y = sign(x) * z;
}
"""


def test_erf_sign_sin_cos_standalone_and_patterns(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [3, 5]);
    e = erf(x);
    s = sign(x);
    a = mul(e, s);
    h = div(x, 1.4142135623730951);
    f = erf(h);
    f1 = add(f, 1.0);
    g1 = mul(x, f1);
    gelu = mul(g1, 0.5);
    r = relu(abs(x));
    same = mul(s, r);
    t = add(sin(x), cos(x));
    b = add(a, gelu);
    c = add(b, same);
    d = add(c, t);
    out = add(d, h);
"""
    folder = _write_graph(tmp_path / "m", body, "x", header=_ERF_FRAGMENT)
    x = np.random.default_rng(7).uniform(-2.5, 2.5, (3, 5)).astype(np.float32)
    x[0, 0] = 0.0
    erf = np.vectorize(math.erf)
    reference = (erf(x) * np.sign(x) + x * (erf(x / math.sqrt(2)) + 1) * 0.5 + x
                 + np.sin(x) + np.cos(x) + x / math.sqrt(2))
    network = _check(folder, [x], [reference.astype(np.float32)])
    _check(folder, [x], _interpret(folder, [x]), ("torch",))
    functions = _functions(network)
    assert {"erf", "sign", "gelu", "sin", "cos"} <= functions
    # x / sqrt 2 is used beyond GELU; relu(abs(x)) only by the identity
    assert "relu" not in functions and "abs" not in functions and "div" in functions


def test_cast_of_a_scalar_stays_an_identity(tmp_path: Path) -> None:
    body = """
    x = external<scalar>(shape = [2, 3]);
    out = cast<scalar>(x);
"""
    folder = _write_graph(tmp_path / "m", body, "x")
    x = np.random.default_rng(8).standard_normal((2, 3)).astype(np.float32)
    network = _check(folder, [x], [x], ("torch",))
    assert not _functions(network)

"""PEtab math parsing and compilation to numpy / JAX / torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

sympy = pytest.importorskip("sympy")

from petab_sciml.expressions import (  # noqa: E402
    TIME,
    ExpressionError,
    compile_expressions,
    compile_jax,
    compile_numpy,
    compile_torch,
    free_symbol_names,
    parse,
)

# ------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("-2^2", -4),  # '^' binds tighter than unary minus
        ("2^3^2", 512),  # right-associative
        ("2^-1*4", 2),  # unary minus in the exponent binds only the next factor
        ("(-2)^2", 4),
        ("1 - 2 - 3", -4),
        ("8 / 4 / 2", 1),
        ("2 + 3 * 4^2", 50),
        ("(1 + 2) * 3", 9),
        ("1.5e2 + .5 + 2.", 152.5),
        ("3 ** 2", 9),  # PEtab v1 spelling accepted
        ("+3 - -2", 5),
        ("true + 1", 2),
        ("false * 7", 0),
        ("(1 < 2) + (2 <= 2) + (3 > 4) + (4 >= 4) + (1 == 1) + (1 != 1)", 4),
        ("piecewise(1, false, 2, true, 3)", 2),
        ("piecewise(1, 0, 2, 3, 5)", 2),  # numbers as conditions: != 0
        ("piecewise(7)", 7),
        ("log(8, 2)", 3),
        ("log2(8)", 3),
        ("log10(1000)", 3),
        ("ln(exp(2))", 2),
        ("log(exp(1))", 1),
        ("sqrt(16)", 4),
        ("abs(-3)", 3),
        ("sign(-2)", -1),
        ("min(3, 1, 2)", 1),
        ("max(3, 1)", 3),
        ("floor(2.5)", 2),
        ("ceil(2.1)", 3),
        ("pow(2, 10)", 1024),
    ],
)
def test_parse_numbers(text, value):
    assert float(parse(text)) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 < 2 && 2 < 1", False),
        ("true || false", True),
        ("!true", False),
        ("!0", True),
        ("1 < 2 || 1 > 2 && false", False),  # && and || share one level, left to right
        ("!(1 > 2)", True),
    ],
)
def test_parse_booleans(text, value):
    assert bool(parse(text)) is value


TRIG = {
    "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "sec": lambda x: 1 / math.cos(x), "csc": lambda x: 1 / math.sin(x),
    "cot": lambda x: 1 / math.tan(x),
    "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "sech": lambda x: 1 / math.cosh(x), "csch": lambda x: 1 / math.sinh(x),
    "coth": lambda x: 1 / math.tanh(x),
    "arcsin": math.asin, "arccos": math.acos, "arctan": math.atan,
    "arcsec": lambda x: math.acos(1 / x), "arccsc": lambda x: math.asin(1 / x),
    "arccot": lambda x: math.atan(1 / x),
    "arcsinh": math.asinh, "arccosh": math.acosh, "arctanh": math.atanh,
    "arcsech": lambda x: math.acosh(1 / x), "arccsch": lambda x: math.asinh(1 / x),
    "arccoth": lambda x: math.atanh(1 / x),
}  # fmt: skip
TRIG_ARG = {"arccosh": 1.7, "arcsec": 1.7, "arccsc": 1.7, "arccoth": 1.7}


@pytest.mark.parametrize("name", sorted(TRIG))
def test_trig_functions_parse_and_compile(name):
    x = TRIG_ARG.get(name, 0.4)
    expected = TRIG[name](x)
    expr = parse(f"{name}(x)")
    assert float(expr.subs(sympy.Symbol("x"), x)) == pytest.approx(expected, rel=1e-12)
    f = compile_numpy([expr], [["x"]])
    assert f(0.0, np.array([x]))[0] == pytest.approx(expected, rel=1e-12)


def test_identifiers_are_plain_symbols():
    expr = parse("gamma * beta + E + I + S + N + Q + lambda_ + zeta")
    assert free_symbol_names(expr) == {"gamma", "beta", "E", "I", "S", "N", "Q", "lambda_", "zeta"}
    assert parse("gamma") == sympy.Symbol("gamma")
    assert parse("time") == TIME
    assert parse("inf") == sympy.oo and parse("-inf") == -sympy.oo
    assert parse("Inf") == sympy.oo


def test_parse_passthrough_and_numbers():
    x = sympy.Symbol("x")
    assert parse(x) is x
    assert parse(2) == 2
    assert parse(0.1) == sympy.Float(0.1)
    assert float(parse("0.17301723066954827")) == 0.17301723066954827
    assert parse(np.float64(2.5)) == sympy.Float(2.5)
    assert parse(float("nan")) is sympy.nan


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1 +", "unexpected 'end of expression'"),
        ("(1", "expected ')'"),
        ("foo(1)", "unknown function 'foo'"),
        ("exp(1, 2)", "exp() takes 1"),
        ("piecewise(1, true)", "odd number"),
        ("__import__('os')", "unexpected character"),
        ("a; b", "unexpected character ';'"),
        ("x.y", "unexpected"),
        ("", "empty expression"),
        ("1 2", "unexpected '2'"),
        ("x ^", "unexpected"),
    ],
)
def test_parse_errors(text, fragment):
    with pytest.raises(ExpressionError) as err:
        parse(text, context="observables.tsv: obs1")
    assert fragment in str(err.value)
    assert "observables.tsv: obs1" in str(err.value)


# --------------------------------------------------------------------------- compiling

EXPRS = [
    "k1 * x1 - k2 * x1 * x2",
    "x1^2 + x2^-1 + sqrt(x1) + x1^0.3",
    "exp(-k1 * time) * log(x2) + log10(x1) + log(x1, 3)",
    "piecewise(x1, x1 > 1 && x2 < 3, 2 * x2, x1 <= 1 || !(k1 > 0), -1)",
    "min(x1, 0.5, k2) + max(0, x2 - 1)",
    "abs(x1 - 1) + sign(x2 - 2) + floor(x1 * 3) + ceil(x2)",
    "sec(x1) + arccot(x2) + tanh(k1) + arcsinh(x2)",
    "3.5",
    "k2",
    "x1 > 0.7",
    "pow(k1, x1)",
]
SYMS = [["x1", "x2"], ["k1", "k2"]]


def _reference(points_x, points_p, t):
    exprs = [parse(e) for e in EXPRS]
    out = np.empty(points_x.shape[:-1] + (len(exprs),))
    for idx in np.ndindex(points_x.shape[:-1]):
        subs = {
            sympy.Symbol("x1"): points_x[idx][0],
            sympy.Symbol("x2"): points_x[idx][1],
            sympy.Symbol("k1"): points_p[0],
            sympy.Symbol("k2"): points_p[1],
            TIME: t,
        }
        for j, e in enumerate(exprs):
            v = e.subs(subs)
            out[idx + (j,)] = float(1 if v is sympy.true else 0 if v is sympy.false else v)
    return out


@pytest.fixture(scope="module")
def points():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.2, 4.0, size=(3, 4, 2))
    p = np.array([0.7, 1.3])
    return x, p, 0.8, _reference(x, p, 0.8)


def test_compile_numpy(points):
    x, p, t, ref = points
    f = compile_numpy(EXPRS, SYMS)
    out = f(t, x, p)
    assert out.shape == (3, 4, len(EXPRS))
    np.testing.assert_allclose(out, ref, rtol=1e-12)


def test_compile_torch(points):
    torch = pytest.importorskip("torch")
    x, p, t, ref = points
    f = compile_torch(EXPRS, SYMS)
    out = f(torch.tensor(t, dtype=torch.float64), torch.tensor(x), torch.tensor(p))
    assert out.shape == (3, 4, len(EXPRS)) and out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    out32 = f(t, torch.tensor(x, dtype=torch.float32), torch.tensor(p, dtype=torch.float32))
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.numpy(), ref, rtol=2e-5, atol=1e-6)


@pytest.mark.slow
def test_compile_jax(points):
    jax = pytest.importorskip("jax")
    x, p, t, ref = points
    f = compile_jax(EXPRS, SYMS)
    with jax.enable_x64(True):
        out = jax.jit(f)(t, x, p)
        assert out.shape == (3, 4, len(EXPRS)) and out.dtype == np.float64
        np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-12)
        # vmap over the batch gives the same
        vm = jax.vmap(lambda xi: f(t, xi, p))(x.reshape(-1, 2))
        np.testing.assert_allclose(np.asarray(vm).reshape(ref.shape), ref, rtol=1e-12)
    out32 = f(t, x.astype(np.float32), p.astype(np.float32))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out32), ref, rtol=2e-5, atol=1e-6)


def _sympy_gradient(expr_text, x, p, t):
    e = parse(expr_text)
    syms = [sympy.Symbol(s) for s in ("x1", "x2", "k1", "k2")]
    subs = dict(zip(syms, [*x, *p])) | {TIME: t}
    return np.array([float(sympy.diff(e, s).subs(subs)) for s in syms])


GRAD_EXPRS = [EXPRS[0], EXPRS[1], EXPRS[2], EXPRS[6], "pow(k1, x1) * k2"]


@pytest.mark.parametrize("expr", GRAD_EXPRS)
def test_gradients_torch_and_jax(expr):
    x, p, t = np.array([1.3, 2.1]), np.array([0.7, 1.3]), 0.8
    ref = _sympy_gradient(expr, x, p, t)
    torch = pytest.importorskip("torch")
    ft = compile_torch([expr], SYMS)
    xt = torch.tensor(x, requires_grad=True)
    pt = torch.tensor(p, requires_grad=True)
    ft(torch.tensor(t, dtype=torch.float64), xt, pt)[0].backward()
    np.testing.assert_allclose(np.concatenate([xt.grad, pt.grad]), ref, rtol=1e-10)
    jax = pytest.importorskip("jax")
    fj = compile_jax([expr], SYMS)
    with jax.enable_x64(True):
        gx, gp = jax.jit(jax.grad(lambda a, b: fj(t, a, b)[0], argnums=(0, 1)))(x, p)
        np.testing.assert_allclose(np.concatenate([gx, gp]), ref, rtol=1e-10)


def test_extra_symbol_group_for_network_outputs():
    f = compile_numpy(
        ["alpha * prey - net1_output1 * predator", "2"],
        [["prey", "predator"], ["alpha"], ["net1_output1"]],
    )
    out = f(0.0, np.array([2.0, 3.0]), np.array([0.5]), np.array([4.0]))
    np.testing.assert_allclose(out, [0.5 * 2 - 4 * 3, 2.0])
    assert f.args == (("prey", "predator"), ("alpha",), ("net1_output1",))


def test_constant_outputs_broadcast_and_t_only():
    f = compile_numpy(["1", "k", "time * 2"], [["x"], ["k"]])
    out = f(1.5, np.zeros((5, 1)), np.array([3.0]))
    assert out.shape == (5, 3)
    np.testing.assert_allclose(out, np.tile([1.0, 3.0, 3.0], (5, 1)))
    g = compile_numpy(["time^2"], [])
    np.testing.assert_allclose(g(3.0), [9.0])
    empty = compile_numpy([], [["x"]])
    assert empty(0.0, np.zeros((2, 1))).shape == (2, 0)


def test_compile_errors():
    with pytest.raises(ExpressionError, match="not arguments: b, c"):
        compile_numpy(["a + b * c"], [["a"]])
    with pytest.raises(ExpressionError, match="appears twice"):
        compile_numpy(["a"], [["a"], ["a"]])
    with pytest.raises(ValueError, match="unknown backend"):
        compile_expressions(["a"], [["a"]], backend="tensorflow")
    with pytest.raises(ExpressionError, match="cannot compile"):
        compile_numpy([sympy.gamma(sympy.Symbol("a"))], [["a"]])


def test_symbol_names_never_reach_the_source():
    weird = sympy.Symbol("__import__('os').system('echo hacked')")
    f = compile_numpy([weird * 2], [[weird]])
    assert "import" not in f.source and "system" not in f.source
    np.testing.assert_allclose(f(0.0, np.array([1.5])), [3.0])


def test_piecewise_without_otherwise_is_nan():
    x = sympy.Symbol("x")
    f = compile_numpy([sympy.Piecewise((1, x > 0))], [[x]])
    out = f(0.0, np.array([[1.0], [-1.0]]))
    assert out[0, 0] == 1.0 and math.isnan(out[1, 0])

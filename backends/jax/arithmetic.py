"""Arithmetic, element-wise maths, comparisons and reductions of the catalogue in JAX,
with PyTorch semantics."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .function_registry import as_dims, implements


# --------------------------------------------------------------------------- arithmetic
@implements("add")
def _add(input, other, alpha, **_):
    return input + (other if alpha == 1 else alpha * other)


@implements("sub")
def _sub(input, other, alpha, **_):
    return input - (other if alpha == 1 else alpha * other)


@implements("mul")
def _mul(input, other, **_):
    return input * other


@implements("div")
def _div(input, other, rounding_mode=None, **_):
    if rounding_mode == "floor":
        return jnp.floor_divide(input, other) if _integral(input, other) \
            else jnp.floor(input / other)
    if rounding_mode == "trunc":
        return jnp.trunc(input / other)
    return input / other


def _integral(*values) -> bool:
    return all(jnp.issubdtype(jnp.result_type(v), jnp.integer) for v in values)


@implements("floor")
def _floor(input, **_):
    return jnp.floor(input)


@implements("ceil")
def _ceil(input, **_):
    return jnp.ceil(input)


@implements("round")
def _round(input, decimals=0, **_):
    if decimals == 0:
        return jnp.round(input)  # half to even, as PyTorch
    scale = 10.0 ** decimals
    return jnp.round(input * scale) / scale


@implements("trunc")
def _trunc(input, **_):
    return jnp.trunc(input)


@implements("cumsum")
def _cumsum(input, dim, **_):
    return jnp.cumsum(input, axis=dim)


@implements("floor_divide")
def _floor_divide(input, other, **_):
    return _div(input, other, "floor")


@implements("remainder")
def _remainder(input, other, **_):
    # PyTorch's value and gradients; an infinite divisor gives what torch.remainder gives
    # (x where the signs agree, else the divisor), where the formula's inf * 0 is nan
    formula = input - other * _div(input, other, "floor")
    return jnp.where(jnp.isinf(other), jnp.remainder(input, other), formula)


@implements("neg")
def _neg(input, **_):
    return -input


@implements("pow")
def _pow(input, exponent, **_):
    return jnp.power(input, exponent)


@implements("matmul")
def _matmul(input, other, **_):
    return jnp.matmul(input, other)


@implements("exp")
def _exp(input, **_):
    return jnp.exp(input)


@implements("log")
def _log(input, **_):
    return jnp.log(input)


@implements("sqrt")
def _sqrt(input, **_):
    return jnp.sqrt(input)


@jax.custom_jvp
def _abs_with_torch_gradient(x):
    return jnp.abs(x)


# PyTorch: d|x|/dx = sign(x), 0 at 0 (JAX's own abs takes 1 there)
_abs_with_torch_gradient.defjvp(
    lambda primals, tangents: (jnp.abs(primals[0]), jnp.sign(primals[0]) * tangents[0]))


@implements("abs")
def _abs(input, **_):
    return _abs_with_torch_gradient(input)


@implements("clamp")
def _clamp(input, min, max, **_):  # noqa: A002 - PyTorch's parameter names
    # PyTorch: min(max(x, min), max), gradient 1 inside the closed interval.
    y = input
    if min is not None:
        y = jnp.where(y < min, jnp.asarray(min, y.dtype), y)
    if max is not None:
        y = jnp.where(y > max, jnp.asarray(max, y.dtype), y)
    return y


# --------------------------------------------------------------------------- math
@implements("maximum")
def _maximum(input, other, **_):
    return jnp.maximum(input, other)  # ties: half the gradient to each, as in PyTorch


@implements("minimum")
def _minimum(input, other, **_):
    return jnp.minimum(input, other)


@implements("erf")
def _erf(input, **_):
    return jax.lax.erf(input)


@implements("sign")
def _sign(input, **_):
    # PyTorch: sign(nan) = 0 and sign(-0.) = 0 (jnp.sign keeps nan and -0.).
    x = input
    one = jnp.ones((), x.dtype)
    return jnp.where(x > 0, one, jnp.where(x < 0, -one, jnp.zeros((), x.dtype)))


@implements("sin")
def _sin(input, **_):
    return jnp.sin(input)


@implements("cos")
def _cos(input, **_):
    return jnp.cos(input)


def _elementwise(fn):
    return lambda input, **_: fn(input)


for _name, _fn in {"tan": jnp.tan, "asin": jnp.arcsin, "acos": jnp.arccos,
                   "atan": jnp.arctan, "sinh": jnp.sinh, "cosh": jnp.cosh,
                   "asinh": jnp.arcsinh, "acosh": jnp.arccosh, "atanh": jnp.arctanh}.items():
    implements(_name)(_elementwise(_fn))


# --------------------------------------------------------------------------- comparisons
@implements("gt")
def _gt(input, other, **_):
    return jnp.greater(input, other)


@implements("lt")
def _lt(input, other, **_):
    return jnp.less(input, other)


@implements("ge")
def _ge(input, other, **_):
    return jnp.greater_equal(input, other)


@implements("le")
def _le(input, other, **_):
    return jnp.less_equal(input, other)


@implements("eq")
def _eq(input, other, **_):
    return jnp.equal(input, other)


@implements("where")
def _where(condition, input, other, **_):
    condition = jnp.asarray(condition)
    if condition.dtype != jnp.bool_:
        raise TypeError(f"where: the condition must be a bool tensor (a comparison), got "
                        f"{condition.dtype}")
    if not isinstance(input, jax.Array) and not isinstance(other, jax.Array):
        # Two numbers: PyTorch's default dtype (float32), whatever the model's dtype.
        input, other = jnp.float32(input), jnp.float32(other)
    return jnp.where(condition, input, other)


# --------------------------------------------------------------------------- reductions
def _reduce_axes(dim):
    if dim is None:
        return None
    axes = as_dims(dim)
    return None if not axes else axes  # PyTorch reduces over everything for dim=[]


@implements("sum")
def _sum(input, dim, keepdim, **_):
    return jnp.sum(input, axis=_reduce_axes(dim), keepdims=keepdim)


@implements("mean")
def _mean(input, dim, keepdim, **_):
    return jnp.mean(input, axis=_reduce_axes(dim), keepdims=keepdim)


@implements("amax")
def _amax(input, dim, keepdim, **_):
    return jnp.max(input, axis=_reduce_axes(dim), keepdims=keepdim)


@implements("amin")
def _amin(input, dim, keepdim, **_):
    return jnp.min(input, axis=_reduce_axes(dim), keepdims=keepdim)


@implements("prod")
def _prod(input, dim, keepdim, **_):
    return jnp.prod(input, axis=dim, keepdims=keepdim)


"""PyTorch-semantics array operations in JAX shared by the layers and functions: the
weight products of Linear and Bilinear layers (:func:`linear`, :func:`bilinear`) and
their derivative rules, rank checks, the batch axis of unbatched inputs, ``flatten``.

Shapes are computed with Python integers at trace time, so nothing here costs anything
at run time beyond the XLA ops themselves.  Convolution and pooling maths live with
their layers (:mod:`.convolution`, :mod:`.pooling`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence

import jax
import jax.custom_batching
import jax.numpy as jnp

from petab_sciml.batch_invariance import takes_ordered_product


def check_rank(x: jax.Array, allowed: Sequence[int], what: str) -> None:
    """Raise like PyTorch when ``x`` has a rank the layer does not accept."""
    if x.ndim not in allowed:
        expected = " or ".join(f"{r}D" for r in allowed)
        raise ValueError(f"{what}: expected {expected} input, got {x.ndim}D input of shape "
                         f"{tuple(x.shape)}")


def batched(fn, x: jax.Array, unbatched_rank: int, *args, **kwargs):
    """Apply ``fn`` (which wants a batch axis) to ``x``, adding one if ``x`` is unbatched."""
    if x.ndim == unbatched_rank:
        return fn(x[None], *args, **kwargs)[0]
    return fn(x, *args, **kwargs)


# --------------------------------------------------------------------------- weight products
TRANSPOSED_PRODUCT_MAX = 1024
"""Weights of at most this many elements are multiplied as ``x @ weight.T`` (Bilinear:
``einsum``) or, Linear weights that
``petab_sciml.batch_invariance.takes_ordered_product`` calls small (the same limits
as the PyTorch backend's), by :func:`ordered_linear`; larger ones by
``dot_general``s that read the weight where it lies (:func:`linear`, :func:`bilinear`).
At this size all forms are equally fast; the limit keeps the last bits of small
networks' results as they are."""


def ordered_linear(x: jax.Array, weight: jax.Array,
                   bias: jax.Array | None = None) -> jax.Array:
    """``torch.nn.functional.linear`` as elementwise operations in one fixed order:
    ``y = x[..., 0] weight[:, 0] + x[..., 1] weight[:, 1] + ...``, then ``+ bias``.

    Contract: the value for one input row is the same bit for bit whether the row is
    computed alone, in a batch, or under ``jax.vmap`` (XLA emits a matrix-vector product
    for one state and a matrix-matrix product for a batch, summing in different orders;
    elementwise operations it compiles the same way for every batch size).  This is what
    keeps a batched solve of many experiments equal to each experiment solved alone
    when a small network in the right-hand side has kinks (ReLU, where a last-bit
    difference flips the step controller's accept / reject decisions).  One multiply-add
    per input feature: for small layers only.

    Derivatives: with respect to ``weight`` the ordinary matrix product; with respect to
    ``x`` the same fixed order while :func:`batch_invariant_jacobians` is active (the
    right-hand side Jacobians of forward sensitivities: they enter the sensitivities,
    which steer the step sizes), else the ordinary product too (reverse mode, whose
    derivatives steer nothing: there the ordered form's transpose costs one padded copy
    per input feature).
    """
    y = _ordered_product(x, weight)
    return y if bias is None else y + bias


_INVARIANT_JACOBIANS = [0]


@contextlib.contextmanager
def batch_invariant_jacobians() -> Iterator[None]:
    """While code is *traced* in this block, derivatives of :func:`ordered_linear` with
    respect to its input keep the batch-invariant order (re-entrant)."""
    _INVARIANT_JACOBIANS[0] += 1
    try:
        yield
    finally:
        _INVARIANT_JACOBIANS[0] -= 1


@jax.custom_jvp
def _ordered_product(x: jax.Array, weight: jax.Array) -> jax.Array:
    y = x[..., 0:1] * weight[:, 0]
    for i in range(1, weight.shape[1]):
        y = y + x[..., i:i + 1] * weight[:, i]
    return y


def _ordered_product_jvp(primals, tangents):
    from jax.custom_derivatives import SymbolicZero

    x, weight = primals
    dx, dweight = tangents
    y = _ordered_product(x, weight)
    parts = []
    if not isinstance(dx, SymbolicZero):
        # dot_general reads the weight where it lies (``x @ weight.T`` copies it)
        parts.append(_ordered_product(dx, weight) if _INVARIANT_JACOBIANS[0]
                     else _product(dx, weight))
    if not isinstance(dweight, SymbolicZero):
        parts.append(_product(x, dweight))
    return y, tangent_sum(y, parts)


def tangent_sum(primal: jax.Array, parts: list[jax.Array]) -> jax.Array:
    """The tangent of a custom JVP rule made of ``parts`` (one per operand whose tangent
    is not a symbolic zero): their sum, or zeros shaped like ``primal`` when none."""
    if not parts:
        return jnp.zeros_like(primal)
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


_ordered_product.defjvp(_ordered_product_jvp, symbolic_zeros=True)


def linear(x: jax.Array, weight: jax.Array, bias: jax.Array | None = None) -> jax.Array:
    """``torch.nn.functional.linear``: ``y[..., o] = sum_i x[..., i] weight[o, i] + bias[o]``
    for any number of leading (batch) axes, ``weight`` in PyTorch layout ``(out, in)``.

    Small weights (``petab_sciml.batch_invariance.takes_ordered_product``: at most 64
    inputs and 1,024 elements) go through :func:`ordered_linear`, whose results do not
    depend on the batch.  Large ones: one ``dot_general`` contracts ``weight``'s input
    axis where it lies.  Written as ``x @ weight.T`` instead, XLA's CPU backend copies the
    transposed weight on every call (and once more in the gradient), which dominates for
    a network inside an ODE right-hand side (one state vector at a time).  Weights up to
    :data:`TRANSPOSED_PRODUCT_MAX` elements with more inputs keep ``x @ weight.T``.
    """
    if weight.ndim == 2 and takes_ordered_product(weight.shape[1], weight.size):
        form = "ordered"
    elif weight.size <= TRANSPOSED_PRODUCT_MAX:
        form = "transposed"
    else:
        form = "dot"
    if _SUMMED_WEIGHT_COTANGENTS[0] and weight.ndim == 2:
        y = _product_summed_weight_cotangent(form, x, weight)
        return y if bias is None else _add_bias_summed_cotangent(y, bias)
    if form == "ordered":
        return ordered_linear(x, weight, bias)
    y = _PRODUCTS[form](x, weight)
    return y if bias is None else y + bias


def _product(x: jax.Array, weight: jax.Array) -> jax.Array:
    """``x @ weight.T`` as one ``dot_general`` over ``weight``'s input axis."""
    return jax.lax.dot_general(x, weight, (((x.ndim - 1,), (1,)), ((), ())))


_PRODUCTS = {"ordered": lambda x, weight: _ordered_product(x, weight),
             "transposed": lambda x, weight: jnp.matmul(x, weight.T),
             "dot": _product}
""":func:`linear`'s three forms of ``x @ weight.T`` (values differ in the last bits)."""


# ------------------------------------------------- weight cotangents summed over a batch
_SUMMED_WEIGHT_COTANGENTS = [0]


@contextlib.contextmanager
def batch_summed_weight_cotangents() -> Iterator[None]:
    """While code is *traced* in this block, :func:`linear` computes the cotangents of a
    weight and a bias that a ``jax.vmap`` batch shares (unbatched arrays) summed over the
    batch, as one product (weight) or one sum (bias), also inside the backward pass of a
    ``jax.custom_vjp`` that the batch is mapped over.  Its values, and the cotangent of
    its input (the ordinary product, as reverse mode has always had it), are unchanged.

    Why: diffrax's reverse pass (``RecursiveCheckpointAdjoint``) is a ``custom_vjp``
    loop; under ``vmap`` over experiments JAX maps its backward pass over the batch,
    so JAX's own rules give every experiment its own weight cotangent, one outer
    product per experiment and Runge-Kutta stage (elementwise work that costs as much
    per experiment in a large batch as for one).  Summed as one
    ``(batch, out)^T (batch, in)`` product it costs what the forward product does.

    Contract, and why this is a switch: the result is the *sum over the batch* of the
    per-element cotangents.  That is the gradient of anything that adds up the batch's
    outputs (``grad`` of a function with a ``vmap`` inside: the objective, a sum over
    experiments), but not per-element gradients (``vmap`` of ``grad`` or of ``vjp``
    with a shared weight: Jacobians, forward sensitivities).  Only
    ``JaxExecutor.value_and_grad_fn`` in reverse mode switches it on.  Values are those
    of the usual forms bit for bit; gradients differ from JAX's own by the order of
    the sum.  Re-entrant."""
    _SUMMED_WEIGHT_COTANGENTS[0] += 1
    try:
        yield
    finally:
        _SUMMED_WEIGHT_COTANGENTS[0] -= 1


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _product_summed_weight_cotangent(form: str, x: jax.Array,
                                     weight: jax.Array) -> jax.Array:
    return _PRODUCTS[form](x, weight)


def _summed_product_fwd(form, x, weight):
    return _PRODUCTS[form](x, weight), (x, weight)


def _summed_product_bwd(form, residuals, ct):
    del form
    x, weight = residuals
    ct_x = jax.lax.dot_general(ct, weight, (((ct.ndim - 1,), (0,)), ((), ())))
    return ct_x, _weight_cotangent(weight, ct, x)


_product_summed_weight_cotangent.defvjp(_summed_product_fwd, _summed_product_bwd)


@jax.custom_vjp
def _add_bias_summed_cotangent(y: jax.Array, bias: jax.Array) -> jax.Array:
    return y + bias


def _add_bias_fwd(y, bias):
    return y + bias, bias


def _add_bias_bwd(bias, ct):
    return ct, _bias_cotangent(bias, ct)


_add_bias_summed_cotangent.defvjp(_add_bias_fwd, _add_bias_bwd)


def _sum_leading(ct: jax.Array) -> jax.Array:
    return jnp.sum(ct, axis=tuple(range(ct.ndim - 1))) if ct.ndim > 1 else ct


@jax.custom_batching.custom_vmap
def _bias_cotangent(bias: jax.Array, ct: jax.Array) -> jax.Array:
    """The cotangent of ``bias`` in ``y + bias`` (``bias`` read only for whether a
    ``vmap`` batch shares it); see :func:`batch_summed_weight_cotangents`."""
    del bias
    return _sum_leading(ct)


@_bias_cotangent.def_vmap
def _bias_cotangent_vmap(axis_size, in_batched, bias, ct):
    bias_batched, ct_batched = in_batched
    ct = ct if ct_batched else jnp.broadcast_to(ct, (axis_size, *ct.shape))
    if bias_batched:
        return jax.vmap(_sum_leading)(ct), True
    return _sum_leading(ct), False


def _outer_summed(ct: jax.Array, x: jax.Array) -> jax.Array:
    """``sum over leading axes of ct[..., o] x[..., i]``: ``(out, in)``."""
    lead = tuple(range(ct.ndim - 1))
    return jax.lax.dot_general(ct, x, ((lead, lead), ((), ())))


@jax.custom_batching.custom_vmap
def _weight_cotangent(weight: jax.Array, ct: jax.Array, x: jax.Array) -> jax.Array:
    """The cotangent of ``weight`` in ``y = x @ weight.T`` (``weight`` is read only for
    whether a ``vmap`` batch shares it); see :func:`batch_summed_weight_cotangents`."""
    del weight
    return _outer_summed(ct, x)


@_weight_cotangent.def_vmap
def _weight_cotangent_vmap(axis_size, in_batched, weight, ct, x):
    weight_batched, ct_batched, x_batched = in_batched
    ct = ct if ct_batched else jnp.broadcast_to(ct, (axis_size, *ct.shape))
    x = x if x_batched else jnp.broadcast_to(x, (axis_size, *x.shape))
    if weight_batched:
        # each element of the batch has its own weight: its own cotangent
        return jax.vmap(_outer_summed)(ct, x), True
    # a weight shared by the batch: the batch axis is one more axis to sum over
    return _outer_summed(ct, x), False


def bilinear(x1: jax.Array, x2: jax.Array, weight: jax.Array,
             bias: jax.Array | None = None) -> jax.Array:
    """``torch.nn.functional.bilinear``: ``y[..., o] = x1[..., i] weight[o, i, j]
    x2[..., j] + bias[o]``, leading axes of ``x1`` and ``x2`` equal.

    ``weight`` seen as an ``(out * in1, in2)`` matrix (a free reshape) times ``x2`` with
    :func:`linear`, then contracted with ``x1`` over ``in1``, the leading axes as batch
    axes: two products that read the weight in its stored layout (``einsum`` copies
    large weights).  Weights up to :data:`TRANSPOSED_PRODUCT_MAX` elements keep the
    ``einsum``, and so the last bits of small networks' results.
    """
    if x1.ndim != x2.ndim:
        raise ValueError(f"bilinear(): input dimensions do not match: got {x1.ndim} and "
                         f"{x2.ndim}")
    for d, (n1, n2) in enumerate(zip(x1.shape[:-1], x2.shape[:-1])):
        if n1 != n2:
            raise ValueError(f"bilinear(): input batch dimensions do not match at dim {d}: "
                             f"got {n1} and {n2}")
    if weight.size <= TRANSPOSED_PRODUCT_MAX:
        y = jnp.einsum("...i,oij,...j->...o", x1, weight, x2)
        return y if bias is None else y + bias
    lead = x1.shape[:-1]
    n_out, n_in1, n_in2 = weight.shape
    a = x1.reshape((-1, n_in1))
    t = linear(x2.reshape((-1, n_in2)), weight.reshape((n_out * n_in1, n_in2)))
    t = t.reshape((-1, n_out, n_in1))
    y = jax.lax.dot_general(t, a, (((2,), (1,)), ((0,), (0,))))
    y = y.reshape(lead + (weight.shape[0],))
    return y if bias is None else y + bias


# --------------------------------------------------------------------------- misc
def flatten(x: jax.Array, start_dim: int, end_dim: int) -> jax.Array:
    """``torch.flatten`` (a 0-d input becomes 1-d)."""
    if x.ndim == 0:
        return x.reshape(1)
    nd = x.ndim
    s = start_dim + nd if start_dim < 0 else start_dim
    e = end_dim + nd if end_dim < 0 else end_dim
    if not (0 <= s < nd and 0 <= e < nd):
        raise ValueError(f"flatten: dimension out of range (start_dim={start_dim}, "
                         f"end_dim={end_dim}) for a {nd}D input")
    if s > e:
        raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:]
    return x.reshape(shape)


def norm_dim(dim: int, ndim: int, what: str) -> int:
    """Wrap a possibly negative dimension like PyTorch (a 0-d tensor has one dim)."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise ValueError(f"{what}: dimension {dim} out of range for a {ndim}D input")
    return dim % n

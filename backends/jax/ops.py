"""PyTorch-semantics array operations in JAX (NC(H)W layout, PyTorch index formulas).

Every function here takes *batched* channel-first arrays ``(N, C, *spatial)`` unless it
says otherwise; the layer modules add and remove the batch axis for unbatched inputs.
Shapes, window positions and divisors are computed with Python integers at trace time,
so nothing here costs anything at run time beyond the XLA ops themselves.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Iterator, Sequence

import jax
import jax.custom_batching
import jax.numpy as jnp
import numpy as np

from petab_sciml.batch_invariance import takes_ordered_product

_CONV_DIMS = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"),
              3: ("NCDHW", "OIDHW", "NCDHW")}
_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


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
``einsum``), what this backend always did, or, Linear weights that
``petab_sciml.batch_invariance.takes_ordered_product`` calls small (the same limits
as the PyTorch backend's), by :func:`ordered_linear`; larger ones by
``dot_general``s that read the weight where it lies (:func:`linear`, :func:`bilinear`).
At this size all forms are equally fast."""


def ordered_linear(x: jax.Array, weight: jax.Array,
                   bias: jax.Array | None = None) -> jax.Array:
    """``torch.nn.functional.linear`` as elementwise operations in one fixed order:
    ``y = x[..., 0] weight[:, 0] + x[..., 1] weight[:, 1] + ...``, then ``+ bias``.

    Contract: the value for one input row is the same bit for bit whether the row is
    computed alone, in a batch, or under ``jax.vmap`` (XLA emits a matrix-vector product
    for one state and a matrix-matrix product for a batch, summing in different orders;
    elementwise operations it compiles the same way for every batch size).  This is what
    keeps a batched solve of many experiments equal to each experiment solved alone
    when a small network in the right-hand side has kinks (ReLU: suite case 038, where a
    last-bit difference flips the step controller's accept / reject decisions and moves
    the objective by 5e-9).  One multiply-add per input feature: for small layers only.

    Derivatives: with respect to ``weight`` the ordinary matrix product; with respect to
    ``x`` the same fixed order while :func:`batch_invariant_jacobians` is active (the
    right-hand side Jacobians of forward sensitivities: they enter the sensitivities,
    which steer the step sizes), else the ordinary product too (reverse mode, whose
    derivatives steer nothing: there the ordered form's transpose, one padded copy per
    input feature, made the Lotka-Volterra table at 1,000 experiments 1.2x slower).
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
    transposed weight on every call (and once more in the gradient): 8x slower gradients
    for one state vector through a 512-wide layer, 17x slower forward for a 2048-wide
    one, the case of a network inside an ODE right-hand side.  Against ``weight @ x`` and
    ``einsum``, unbatched and for batches of 1-256 at widths 64-2048, it is never slower
    beyond noise (``benchmarks/bench_width.py --products``).  Weights up to
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
    product per experiment and Runge-Kutta stage (elementwise work: 1,000 experiments
    of the 5-state problem cost as much per experiment as one).  Summed as one
    ``(batch, out)^T (batch, in)`` product it costs what the forward product does.

    Contract, and why this is a switch: the result is the *sum over the batch* of the
    per-element cotangents.  That is the gradient of anything that adds up the batch's
    outputs (``grad`` of a function with a ``vmap`` inside: the objective, a sum over
    experiments), but not per-element gradients (``vmap`` of ``grad`` or of ``vjp``
    with a shared weight: Jacobians, forward sensitivities).  Only
    ``JaxExecutor.value_and_grad_fn`` in reverse mode switches it on.  Values are those
    of the usual forms bit for bit; gradients differ from JAX's own by the order of
    the sum (1e-14 relative).  Re-entrant."""
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
    axes: two products that read the weight in its stored layout.  ``einsum`` instead
    gives 3x slower gradients for a (64, 128, 128) weight and a 20x slower forward on a
    batch of one vector for (256, 256, 256).  Weights up to
    :data:`TRANSPOSED_PRODUCT_MAX` elements keep the ``einsum`` (suite case 052's
    gradients would move by 5e-12 relative).
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


# --------------------------------------------------------------------------- convolution
def same_padding(kernel: Sequence[int], dilation: Sequence[int]) -> list[tuple[int, int]]:
    """PyTorch's ``padding='same'``: total d*(k-1), the odd extra element on the right."""
    out = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        out.append((total // 2, total - total // 2))
    return out


def conv(x: jax.Array, weight: jax.Array, bias: jax.Array | None, *, stride: Sequence[int],
         padding: Sequence[tuple[int, int]], dilation: Sequence[int], groups: int,
         padding_mode: str = "zeros") -> jax.Array:
    """``torch.nn.ConvNd`` on a batched input; ``weight`` is (O, I/groups, *k)."""
    n = x.ndim - 2
    if padding_mode != "zeros" and any(p != (0, 0) for p in padding):
        widths = [(0, 0), (0, 0), *padding]
        x = jnp.pad(x, widths, mode=_PAD_MODES[padding_mode])
        padding = [(0, 0)] * n
    y = jax.lax.conv_general_dilated(
        x, weight, window_strides=tuple(stride), padding=[tuple(p) for p in padding],
        rhs_dilation=tuple(dilation), feature_group_count=groups,
        dimension_numbers=_CONV_DIMS[n],
    )
    if bias is not None:
        y = y + bias[(None, slice(None)) + (None,) * n]
    return y


def conv_transpose(x: jax.Array, weight: jax.Array, bias: jax.Array | None, *,
                   stride: Sequence[int], padding: Sequence[int],
                   output_padding: Sequence[int], dilation: Sequence[int],
                   groups: int) -> jax.Array:
    """``torch.nn.ConvTransposeNd`` on a batched input; ``weight`` is (I, O/groups, *k).

    The gradient of a strided convolution: dilate the input by ``stride``, pad each side by
    ``d*(k-1) - p`` (plus ``output_padding`` on the right) and convolve with the spatially
    flipped kernel whose in/out axes are swapped within each group.
    """
    n = x.ndim - 2
    cin = weight.shape[0]
    cout_g = weight.shape[1]
    kernel = weight.shape[2:]
    w = weight.reshape((groups, cin // groups, cout_g) + kernel)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * cout_g, cin // groups) + kernel)
    w = jnp.flip(w, axis=tuple(range(2, 2 + n)))
    pads = []
    for k, p, op, d in zip(kernel, padding, output_padding, dilation):
        edge = d * (k - 1) - p
        pads.append((edge, edge + op))
    y = jax.lax.conv_general_dilated(
        x, w, window_strides=(1,) * n, padding=pads, lhs_dilation=tuple(stride),
        rhs_dilation=tuple(dilation), feature_group_count=groups,
        dimension_numbers=_CONV_DIMS[n],
    )
    if bias is not None:
        y = y + bias[(None, slice(None)) + (None,) * n]
    return y


# --------------------------------------------------------------------------- pooling
def pool_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape``."""
    eff = d * (k - 1) + 1
    num = size + 2 * p - eff + ((s - 1) if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_geometry(spatial, kernel, stride, padding, dilation, ceil_mode, what):
    outs, pads = [], []
    for size, k, s, p, d in zip(spatial, kernel, stride, padding, dilation):
        if p > k // 2:
            raise ValueError(f"{what}: pad should be at most half of the kernel size, got "
                             f"padding={p} for kernel_size={k}")
        out = pool_out_size(size, k, s, p, d, ceil_mode)
        if out < 1:
            raise ValueError(f"{what}: output size would be {out} for input size {size}, "
                             f"kernel_size={k}, stride={s}, padding={p}, dilation={d}")
        need = (out - 1) * s + d * (k - 1) + 1
        pads.append((p, max(need - size - p, 0)))
        outs.append(out)
    return outs, pads


def max_pool(x: jax.Array, kernel, stride, padding, dilation, ceil_mode: bool,
             what: str = "MaxPool") -> jax.Array:
    outs, pads = _pool_geometry(x.shape[2:], kernel, stride, padding, dilation, ceil_mode,
                                what)
    if all(d == 1 for d in dilation):
        # A Python scalar init makes JAX use its differentiable reduce_window_max.
        return jax.lax.reduce_window(
            x, -jnp.inf, jax.lax.max, (1, 1, *kernel), (1, 1, *stride),
            [(0, 0), (0, 0), *pads],
        )
    # JAX has no VJP for a dilated max window: take the maximum of the strided slices at
    # every kernel offset instead.
    xp = jnp.pad(x, [(0, 0), (0, 0), *pads], constant_values=-jnp.inf)
    result = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        index = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, s, n in zip(offsets, dilation, stride, outs))
        result = xp[index] if result is None else jnp.maximum(result, xp[index])
    return result


def _avg_divisors(size: int, out: int, k: int, s: int, p: int, include_pad: bool) -> np.ndarray:
    """Per-dimension window sizes as PyTorch's avg_pool kernels count them."""
    counts = np.empty(out, dtype=np.int64)
    for o in range(out):
        start = o * s - p
        end = min(start + k, size + p)
        if include_pad:
            counts[o] = end - start
        else:
            counts[o] = min(end, size) - max(start, 0)
    return counts


def avg_pool(x: jax.Array, kernel, stride, padding, ceil_mode: bool, count_include_pad: bool,
             divisor_override: int | None, what: str = "AvgPool") -> jax.Array:
    n = x.ndim - 2
    ones = (1,) * n
    outs, pads = _pool_geometry(x.shape[2:], kernel, stride, padding, ones, ceil_mode, what)
    # A Python scalar init makes JAX use its differentiable reduce_window_sum.
    total = jax.lax.reduce_window(
        x, 0.0, jax.lax.add, (1, 1, *kernel), (1, 1, *stride), [(0, 0), (0, 0), *pads],
    )
    if divisor_override is not None:
        return total / divisor_override
    div = np.ones((), dtype=np.int64)
    for size, out, k, s, p in zip(x.shape[2:], outs, kernel, stride, padding):
        div = np.multiply.outer(div, _avg_divisors(size, out, k, s, p, count_include_pad))
    div = np.maximum(div, 1)  # windows entirely in padding sum to zero, as in PyTorch
    return total / jnp.asarray(div, dtype=x.dtype)


def lp_pool(x: jax.Array, norm_type: float, kernel, stride, ceil_mode: bool,
            what: str = "LPPool") -> jax.Array:
    """``torch.nn.functional.lp_poolNd`` (avg-pool of x**p, times the window size, ** 1/p)."""
    n = x.ndim - 2
    zeros = (0,) * n
    if norm_type == math.inf:
        return max_pool(jnp.abs(x), kernel, stride, zeros, (1,) * n, ceil_mode, what)
    if norm_type == -math.inf:
        return -max_pool(-jnp.abs(x), kernel, stride, zeros, (1,) * n, ceil_mode, what)
    out = avg_pool(x ** norm_type, kernel, stride, zeros, ceil_mode, True, None, what)
    out = jnp.sign(out) * jax.nn.relu(jnp.abs(out))
    return (out * math.prod(kernel)) ** (1.0 / norm_type)


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows: [floor(i*L/out), ceil((i+1)*L/out))."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def adaptive_avg_pool(x: jax.Array, output_size: Sequence[int]) -> jax.Array:
    """Separable averaging with a constant (out, L) matrix per spatial axis."""
    n = x.ndim - 2
    for axis, out in zip(range(2, 2 + n), output_size):
        size = x.shape[axis]
        if out == size:
            continue
        if size % out == 0:
            k = size // out
            shape = x.shape[:axis] + (out, k) + x.shape[axis + 1:]
            x = x.reshape(shape).mean(axis=axis + 1)
            continue
        mat = np.zeros((out, size))
        for i, (a, b) in enumerate(adaptive_windows(size, out)):
            mat[i, a:b] = 1.0 / (b - a)
        x = jnp.moveaxis(jnp.tensordot(x, jnp.asarray(mat, x.dtype), axes=[[axis], [1]]),
                         -1, axis)
    return x


def adaptive_max_pool(x: jax.Array, output_size: Sequence[int]) -> jax.Array:
    """Separable max over PyTorch's adaptive windows (gather + masked max per axis)."""
    n = x.ndim - 2
    for axis, out in zip(range(2, 2 + n), output_size):
        size = x.shape[axis]
        if out == size:
            continue
        if size % out == 0:
            k = size // out
            shape = x.shape[:axis] + (out, k) + x.shape[axis + 1:]
            x = x.reshape(shape).max(axis=axis + 1)
            continue
        windows = adaptive_windows(size, out)
        width = max(b - a for a, b in windows)
        idx = np.zeros((out, width), dtype=np.int32)
        valid = np.zeros((out, width), dtype=bool)
        for i, (a, b) in enumerate(windows):
            idx[i, : b - a] = np.arange(a, b)
            idx[i, b - a:] = a
            valid[i, : b - a] = True
        g = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=axis)
        g = g.reshape(x.shape[:axis] + (out, width) + x.shape[axis + 1:])
        mask_shape = (1,) * axis + (out, width) + (1,) * (x.ndim - axis - 1)
        g = jnp.where(jnp.asarray(valid.reshape(mask_shape)), g, -jnp.inf)
        x = g.max(axis=axis + 1)
    return x


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

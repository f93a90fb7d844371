"""Dilated max pooling in JAX (``backends/jax/pooling.max_pool``: strided slices, one
window axis at a time) against PyTorch's own ``max_pool1d/2d/3d``: values and gradients,
on inputs full of ties (a tie's gradient goes to the first maximum in row-major window
order) and with nan (a nan wins), and a large window that once took 26 s to compile."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

from petab_sciml.backends.jax.pooling import max_pool  # noqa: E402

CASES = [  # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 3, 13), (3,), (2,), (1,), (2,), True),
    ((2, 2, 9, 8), (3, 2), (2, 1), (1, 0), (1, 2), False),
    ((1, 2, 11, 10), (3, 4), (1, 2), (1, 2), (3, 2), True),
    ((1, 1, 7, 6, 8), (2, 3, 2), (1, 2, 1), (1, 1, 0), (2, 1, 3), False),
]


def _torch_pool(x, kernel, stride, padding, dilation, ceil_mode):
    fn = {1: torch.nn.functional.max_pool1d, 2: torch.nn.functional.max_pool2d,
          3: torch.nn.functional.max_pool3d}[len(kernel)]
    return fn(x, kernel, stride, padding, dilation, ceil_mode)


@pytest.mark.parametrize("with_nan", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[1])}d-d{c[4]}")
def test_values_and_gradients_equal_pytorch_with_ties(case, with_nan):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    rng = np.random.default_rng(len(shape))
    # float32, JAX's default here: gradients are routed, not computed, so exact
    x = rng.integers(0, 3, size=shape).astype(np.float32)   # many ties in each window
    if with_nan:
        x.flat[rng.choice(x.size, 3, replace=False)] = np.nan
    xt = torch.tensor(x, requires_grad=True)
    expected = _torch_pool(xt, kernel, stride, padding, dilation, ceil_mode)
    cotangent = rng.normal(size=tuple(expected.shape)).astype(np.float32)
    expected.backward(torch.tensor(cotangent))

    def pool(v):
        return max_pool(v, kernel, stride, padding, dilation, ceil_mode)

    got, vjp = jax.vjp(pool, jax.numpy.asarray(x))
    np.testing.assert_array_equal(np.asarray(got), expected.detach().numpy())
    grad = np.asarray(vjp(jax.numpy.asarray(cotangent))[0])
    # the same elements take the gradient (ties and nan resolved as PyTorch does) ...
    np.testing.assert_array_equal(grad != 0, xt.grad.numpy() != 0)
    # ... summed over overlapping windows in another order (float32 rounding)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_large_dilated_window_is_a_few_slices():
    """ONNX backend case ``test_MaxPool2d_stride_padding_dilation``'s geometry: a 60 x 80
    window is reduced as 60 + 80 strided slices, not 4,800 (one per offset, which took
    26 s to compile), and gives PyTorch's values."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 1, 1000, 1000)).astype(np.float32)
    args = ((60, 80), (10, 10), (10, 20), (10, 10), False)
    jaxpr = jax.make_jaxpr(lambda v: max_pool(v, *args))(x)
    slices = sum(e.primitive.name == "slice" for e in jaxpr.jaxpr.eqns)
    assert slices == 60 + 80
    got = jax.jit(lambda v: max_pool(v, *args))(x)
    expected = _torch_pool(torch.tensor(x), *args).numpy()
    np.testing.assert_array_equal(np.asarray(got), expected)

"""Batch-invariant small products for eager PyTorch solves.

``torch.nn.functional.linear`` calls BLAS, which sums ``x @ W.T`` for one row in another
order than for a batch of rows (a matrix-vector kernel for one, blocked matrix-matrix
kernels for many), so a row's last bits depend on the batch it is in.  In a right-hand
side with kinks (a ReLU network) those last bits can flip the step controller's
accept / reject decisions, and experiments solved as one batch would end away from the
same experiments solved alone.

Here a small product (:func:`petab_sciml.batch_invariance.takes_ordered_product`) is an
elementwise product and a sum over the last axis: PyTorch's elementwise kernels round
each element on its own, and its CPU reduction over a contiguous last axis sums every
output in the same order whatever the number of rows, so a row's result is the same
bits alone, in any batch and under ``torch.func.vmap``, and so are the derivatives
autograd takes through it (``tests/backends/torch/test_batch_invariance.py`` checks all of these
against BLAS, which fails them).  The executor gives its own copies of the networks
these products (:func:`order_small_products`) for eager solves of right-hand sides
that may have kinks (``TorchOptions.ordered_products``); compiled solves
(``compile=True``, one experiment at a time) and smooth right-hand sides keep
``torch.nn.Linear``.

Ordered products cost more than ``torch.nn.Linear``'s in eager PyTorch
(``benchmarks/investigations/torch_ordered_products.py``).  Not taken: one ``torch.bmm`` per row
against the expanded weight (its invariance rests on the BLAS kernel for a 1-row
product not depending on where the row lies in memory, which nothing promises), and
that with a custom backward through one matrix product for the weight gradient (its
Python overhead per call).
"""

from __future__ import annotations

import torch

from petab_sciml.batch_invariance import ORDERED_PRODUCT_MAX_IN, takes_ordered_product


def ordered_linear(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear(x, weight, bias)`` (``weight`` ``(out, in)``, any
    leading axes on ``x``) as ``(x[..., None, :] * weight).sum(-1) + bias``: the same
    bits for a row whatever else is in the batch.  ``in * out`` products per row: for
    small layers."""
    y = (x.unsqueeze(-2) * weight).sum(-1)
    return y if bias is None else y + bias


def small_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (leading axes broadcast) as a product and a sum over the contracted axis
    when that axis has at most :data:`ORDERED_PRODUCT_MAX_IN` entries and the products
    of one batch entry are at most ``2 ** 16``: batch-invariant like
    :func:`ordered_linear`; larger products go to ``torch.matmul``."""
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    if k <= ORDERED_PRODUCT_MAX_IN and n * k * m <= 2 ** 16:
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)
    return a @ b


class OrderedLinear(torch.nn.Linear):
    """``torch.nn.Linear`` whose small products are :func:`ordered_linear` (larger ones
    ``torch.nn.functional.linear``); the same parameters, state dict and arguments."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch's name
        weight = self.weight
        if weight is not None and weight.dim() == 2 \
                and takes_ordered_product(weight.shape[1], weight.numel()):
            return ordered_linear(input, weight, self.bias)
        return torch.nn.functional.linear(input, weight, self.bias)


def order_small_products(module: torch.nn.Module) -> int:
    """Turn every ``torch.nn.Linear`` inside ``module`` (exactly that class, not
    subclasses with forwards of their own) into an :class:`OrderedLinear`, in place;
    returns how many.  Parameters, buffers and hooks stay as they are."""
    count = 0
    for sub in module.modules():
        if type(sub) is torch.nn.Linear:
            sub.__class__ = OrderedLinear
            count += 1
    return count

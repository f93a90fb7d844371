"""Which Linear products both backends compute in a batch-invariant order.

A batched solve of many experiments must give each experiment the numbers it gets
solved alone.  Matrix products break that: BLAS (PyTorch) and XLA (JAX) sum a product
for one row in another order than for a batch, and where the right-hand side has kinks
(a ReLU network) a last-bit difference flips the step controller's accept / reject
decisions.  Small Linear layers are therefore computed as elementwise products summed
in one fixed order (JAX: ``backends/jax/ops.py: ordered_linear``; PyTorch:
``backends/torch/ordered.py``).  The limits below are the two backends' common
definition of *small*: the ordered form costs one product per weight and input row,
which is cheap only while the layer is (a 96 x 96 layer already costs several times the
library product: ``benchmarks/investigations/five_state_batch_roundoff.py --cost``).
Larger layers keep the library product; their solves stay close batched and unbatched
because ``dopri8``'s step growth is capped (``simulation.steps.MAX_STEP_GROWTH``).
"""

from __future__ import annotations

ORDERED_PRODUCT_MAX_IN = 64
"""Linear layers with at most this many input features ..."""

ORDERED_PRODUCT_MAX_WEIGHTS = 1024
"""... and at most this many weights take the ordered product."""


def takes_ordered_product(in_features: int, n_weights: int) -> bool:
    """Whether a Linear weight of ``n_weights`` elements and ``in_features`` inputs is
    multiplied in the batch-invariant order (an empty weight never is)."""
    return 0 < n_weights <= ORDERED_PRODUCT_MAX_WEIGHTS and in_features <= ORDERED_PRODUCT_MAX_IN

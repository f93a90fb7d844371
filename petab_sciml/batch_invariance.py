"""Which products both backends compute in a batch-invariant order (issue 17).

A batched solve of many experiments must give each experiment the numbers it gets
solved alone.  Matrix products break that: BLAS (PyTorch) and XLA (JAX) sum a product
for one row in another order than for a batch, and where the right-hand side has kinks
(a ReLU network, suite case 038) a last-bit difference flips the step controller's
accept / reject decisions and moves the objective by ~1e-9.  Small Linear layers are
therefore computed as elementwise products summed in one fixed order
(JAX: ``backends/jax/ops.py: ordered_linear``; PyTorch: ``backends/torch/ordered.py``).
The limits below are the two backends' common definition of *small*: one product per
weight and input row is only cheap while the layer is.

Why 128 inputs and 16,384 weights (a 128 x 128 layer): the 5-state problem's 96 x 96
hidden layer must be inside them for its batched and unbatched solves to agree (its
adaptive steps follow error estimates that are mostly rounding noise: one unit in the
last place of the initial state moves its solution by 7e-11,
``benchmarks/five_state_batch_roundoff.py``).  In JAX the ordered form then costs
nothing measurable on that problem (objective + gradient at 1 and 1,000 experiments)
and 1.2-1.5x on a chain of 100 tanh layers of width 64-128 alone; at width 256 it costs
2.2-5.4x, hence the limit.  PyTorch orders products only where the right-hand side has
kinks (``SimulationPlan.rhs_smooth``).
"""

from __future__ import annotations

ORDERED_PRODUCT_MAX_IN = 128
"""Linear layers with at most this many input features ..."""

ORDERED_PRODUCT_MAX_WEIGHTS = 16_384
"""... and at most this many weights take the ordered product."""


def takes_ordered_product(in_features: int, n_weights: int) -> bool:
    """Whether a Linear weight of ``n_weights`` elements and ``in_features`` inputs is
    multiplied in the batch-invariant order (an empty weight never is)."""
    return 0 < n_weights <= ORDERED_PRODUCT_MAX_WEIGHTS and in_features <= ORDERED_PRODUCT_MAX_IN

"""Which products both backends compute in a batch-invariant order (issue 17).

A batched solve of many experiments must give each experiment the numbers it gets
solved alone.  Matrix products break that: BLAS (PyTorch) and XLA (JAX) sum a product
for one row in another order than for a batch, and where the right-hand side has kinks
(a ReLU network, suite case 038) a last-bit difference flips the step controller's
accept / reject decisions and moves the objective by ~1e-9.  Small Linear layers are
therefore computed as elementwise products summed in one fixed order
(JAX: ``backends/jax/ops.py: ordered_linear``; PyTorch: ``backends/torch/ordered.py``).
The limits below are the two backends' common definition of *small*: one product per
weight and input row is only cheap while the layer is.  (Measured for the 5-state
problem, whose 96 x 96 layer would need it for its batched and unbatched solves to give
the same bits: that layer in the ordered form made its JAX objective + gradient 2x
slower for one experiment and 5x for 1,000; an elementwise product summed over the
last axis is batch-invariant too but 8x slower than the library product at 1,000 rows,
3x for one.  ``benchmarks/five_state_batch_roundoff.py --cost``.  That problem's
solves agree to 1e-12 without it since ``dopri8`` grows its steps at most 6x per step:
its last-bit differences no longer reach the step sizes; ``simulation.steps.MAX_STEP_GROWTH``.)
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

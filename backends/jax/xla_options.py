"""XLA compiler options of the objective, chosen by problem size, gradient mode and batch.

The options change only how XLA compiles (which emitters and which YNNPACK fusions it
uses), never what is computed; but products compiled by different kernels round
differently, so every threshold here also decides which problems keep the last bits
they had: problems below :data:`LARGE_NETWORK_PARAMETERS` always get
:data:`COMPILER_OPTIONS`.
"""

from __future__ import annotations

import functools
from typing import Any

COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
"""XLA options of the objective's compilation below :data:`LARGE_NETWORK_PARAMETERS`: the
classic CPU emitters compile these while-loop-heavy programs faster, with the same run
time."""
LARGE_NETWORK_PARAMETERS = 1_000
"""From this many parameters (mechanistic and network arrays, ``plan.n_w``) on, the
objective is compiled without YNNPACK fusions (:data:`LARGE_COMPILER_OPTIONS`), whose
float64 kernels are slow for the small-batch products inside the solver loops; reverse
and adjoint modes there keep XLA's fusion emitters, whose code for the network-sized
element-wise work (the weight cotangents: one outer product per layer and Runge-Kutta
stage) is faster, and forward sensitivities keep the parameters as a pytree inside the
right-hand side (:mod:`.forward_sensitivities`).  Below it, the options (and so the
results, bit for bit) are those of smaller problems: YNNPACK's products change the last
bits of the suite cases' right-hand sides, which adaptive steps amplify."""
LARGE_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}
"""XLA options of reverse and adjoint modes from :data:`LARGE_NETWORK_PARAMETERS` on
(forward sensitivities there: these and :data:`COMPILER_OPTIONS`)."""
BATCHED_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
"""XLA options of reverse and adjoint modes from :data:`LARGE_NETWORK_PARAMETERS` up to
:data:`BATCHED_DOT_MAX_PARAMETERS` when experiments are solved in batches (``jax.vmap``):
YNNPACK for the products only.  Under ``vmap`` the network's products are
matrix-matrix products (experiments x width), which YNNPACK's float64 kernels compute
faster than XLA's own.  Its other fusions stay off: its reductions (the batch sum of the
per-experiment weight cotangents after the solve) are slower than XLA's."""
BATCHED_DOT_MAX_PARAMETERS = 300_000
"""Above this many parameters batched solves keep :data:`LARGE_COMPILER_OPTIONS`:
YNNPACK's products are slower there (gradients through layers thousands wide on
batches of a few vectors)."""


def compiler_options(n_parameters: int, sensitivity: str, n_batch: int = 1) -> dict[str, Any]:
    """XLA options of the objective of a problem with ``n_parameters`` parameters whose
    gradient comes from (resolved) ``sensitivity``; ``n_batch``: the most experiments
    solved together in one batched (``vmap``) solve."""
    if n_parameters < LARGE_NETWORK_PARAMETERS:
        return supported_compiler_options(COMPILER_OPTIONS)
    if sensitivity == "forward":
        return supported_compiler_options({**COMPILER_OPTIONS, **LARGE_COMPILER_OPTIONS})
    if n_batch > 1 and n_parameters <= BATCHED_DOT_MAX_PARAMETERS:
        batched = supported_compiler_options(BATCHED_COMPILER_OPTIONS)
        if batched:
            return batched
    return supported_compiler_options(LARGE_COMPILER_OPTIONS)


@functools.cache
def _option_supported(name: str, value: Any) -> bool:
    import jax
    import jax.numpy as jnp

    try:
        jax.jit(lambda x: x + 1, compiler_options={name: value})(jnp.zeros(1))
    except Exception:  # noqa: BLE001 - XLA raises JaxRuntimeError for an unknown option
        return False
    return True


def supported_compiler_options(options: dict[str, Any] | None = None) -> dict[str, Any]:
    """``options`` (default :data:`COMPILER_OPTIONS`) less those this XLA does not know
    (newer jaxlib releases dropped some: such an option is left out, not an error)."""
    options = COMPILER_OPTIONS if options is None else options
    return {name: value for name, value in options.items() if _option_supported(name, value)}

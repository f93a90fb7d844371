"""PyTorch backend: IR -> ``torch.nn`` module (a ``torch.fx.GraphModule``).

Importing this package is cheap; torch is imported on first use and a missing torch gives
a one-line error naming the ``torch`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from petab_sciml.backend_api import ParameterArrays
from petab_sciml.errors import require
from petab_sciml.network import Network


class TorchBackend:
    """:class:`petab_sciml.backend_api.Backend` for PyTorch."""

    name = "torch"

    def executor(self, plan: Any, **options: Any) -> Any:
        """The objective of a simulation plan in PyTorch: a
        :class:`~.simulation.TorchExecutor`, or with ``compile`` unset (None) an
        :class:`~.auto_compile.AutoCompileExecutor` (eager first, compiled once that
        pays); without ``method``, a failed explicit solve is retried with an implicit
        one (:mod:`petab_sciml.simulation.stiff_fallback`)."""
        require("torch", "torch")
        from petab_sciml.backends.torch.auto_compile import AutoCompileExecutor
        from petab_sciml.backends.torch.simulation import TorchExecutor, TorchOptions
        from petab_sciml.simulation.stiff_fallback import (
            IMPLICIT_SOLVER,
            StiffFallbackExecutor,
            explicit_options,
        )

        def explicit_executor(opts: TorchOptions) -> Any:
            return (AutoCompileExecutor(plan, opts) if opts.compile is None
                    else TorchExecutor(plan, opts))

        if "method" in options:
            return explicit_executor(TorchOptions(**options))
        opts = TorchOptions(**options)
        explicit = explicit_executor(TorchOptions(**explicit_options(options)))
        return StiffFallbackExecutor(
            plan, "torch", explicit, lambda: TorchExecutor(plan, replace(
                opts, method=IMPLICIT_SOLVER, sensitivity="autograd", compile=False)),
            opts.method)

    def problem_model(self, problem: Any, params: Any = None, **options: Any) -> Any:
        """The whole problem as a ``torch.nn.Module``
        (:class:`~petab_sciml.backends.torch.problem.TorchProblem`)."""
        require("torch", "torch")
        from petab_sciml.backends.torch.problem import TorchProblem

        return TorchProblem(problem, params, **options)

    def train_starts(self, task: Any, hooks: Any = None) -> list[Any]:
        """Train a fit task's starts (:mod:`petab_sciml.fit`; ``fit.py`` here)."""
        require("torch", "torch")
        from petab_sciml.backends.torch.fit import train_starts

        return train_starts(task, hooks)

    def check_resume(self, task: Any) -> None:
        """Check the checkpoints a resumed fit task continues from, before any trains."""
        require("torch", "torch")
        from petab_sciml.backends.torch.fit import check_resume

        check_resume(task)

    def parameters_of(self, model: Any) -> dict[str, Any]:
        """``{"mech": linear values, "nets": ...}`` (numpy) of a native problem model."""
        return model.values()

    def term_sum_ops(self) -> Any:
        """Array operations of :mod:`petab_sciml.simulation.term_sums`."""
        require("torch", "torch")
        from petab_sciml.backends.torch.term_sums import TorchTermSumOps

        return TorchTermSumOps()

    def expression_namespace(self) -> dict[str, Any]:
        """Array functions for compiled PEtab formulas
        (:func:`petab_sciml.expressions.compile_expressions`)."""
        require("torch", "torch")
        import torch as m

        return {
            "_m": m, "_asarray": m.as_tensor, "_where": m.where, "_minimum": m.minimum,
            "_maximum": m.maximum, "_and": m.logical_and, "_or": m.logical_or,
            "_xor": m.logical_xor, "_not": m.logical_not,
            "_stack": lambda xs: m.stack(xs, dim=-1),
            "_empty": lambda z: m.zeros(z.shape + (0,), dtype=z.dtype, device=z.device),
        }

    def build(self, network: Network, *, dtype: str = "float32", seed: int = 0) -> Any:
        require("torch", "torch")
        from petab_sciml.backends.torch.build import build_module

        return build_module(network, dtype=dtype, seed=seed)

    def set_parameters(self, model: Any, params: ParameterArrays, *, strict: bool = True) -> Any:
        from petab_sciml.backends.torch.build import load_parameters

        load_parameters(model, params, strict=strict)
        return model

    def freeze(self, model: Any, trainable: ParameterArrays) -> Any:
        """``requires_grad=False`` on every parameter none of whose elements is
        estimated (``trainable[layer][array]``, a boolean mask)."""
        params = dict(model.named_parameters())
        for layer, arrays in trainable.items():
            for array, mask in arrays.items():
                p = params.get(f"{layer}.{array}")
                if p is not None and not mask.any():
                    p.requires_grad_(False)
        return model

    def get_parameters(self, model: Any) -> dict[str, dict[str, np.ndarray]]:
        from petab_sciml.backends.torch.build import parameters_of

        return parameters_of(model)

    def forward(self, model: Any, inputs: Sequence[np.ndarray], *, train: bool = False,
                seed: int | None = None) -> tuple[np.ndarray, ...]:
        from petab_sciml.backends.torch.build import forward_numpy

        return forward_numpy(model, inputs, train=train, seed=seed)

    def forward_each(self, model: Any, inputs: Sequence[np.ndarray]
                     ) -> tuple[np.ndarray, ...]:
        from petab_sciml.backends.torch.build import forward_each_numpy

        return forward_each_numpy(model, inputs)

    def mean_forward(self, model: Any, inputs: Sequence[np.ndarray], *, passes: int,
                     seed: int = 0) -> tuple[np.ndarray, ...]:
        from petab_sciml.backends.torch.build import mean_forward_numpy

        return mean_forward_numpy(model, inputs, passes=passes, seed=seed)

    def gradients(self, model: Any, inputs: Sequence[np.ndarray], *, train: bool = False,
                  seed: int | None = None) -> dict[str, dict[str, np.ndarray]]:
        from petab_sciml.backends.torch.build import gradients_numpy

        return gradients_numpy(model, inputs, train=train, seed=seed)

    def vjp(self, model: Any, inputs: Sequence[np.ndarray], cotangents: Sequence[np.ndarray],
            *, train: bool = False, seed: int | None = None
            ) -> tuple[dict[str, dict[str, np.ndarray]], tuple[np.ndarray, ...]]:
        from petab_sciml.backends.torch.build import vjp_numpy

        return vjp_numpy(model, inputs, cotangents, train=train, seed=seed)


BACKEND = TorchBackend()


def build_module(network: Network, *, dtype: str = "float32", seed: int = 0) -> Any:
    """Convenience: ``BACKEND.build``; returns a ``torch.fx.GraphModule``."""
    return BACKEND.build(network, dtype=dtype, seed=seed)

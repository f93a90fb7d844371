"""The numpy API's PyTorch executor: eager solves first, compiled ones once they pay.

Eager forward sensitivities cost about 50x a compiled solve per call on a network in
the right-hand side (suite case 001: 0.8 s against 16 ms of CPU), while compiling costs
once about 20 s of CPU (``benchmarks/bench_torch_api.py``).  A caller making a handful
of calls (a test, a check at one point) should not pay the compile; a training loop or
an optimizer making thousands should not pay the eager solves.  So, as a ski rental:
:class:`AutoCompileExecutor` runs eager until its eager calls have cost
:data:`COMPILE_AFTER_CPU_S` seconds of CPU, then compiles (``TorchOptions.compile``)
at the start of the next call and runs compiled from then on.  Compiling only when a
further call comes means a single evaluation (the CLI's ``evaluate``, a check that
fails its solve) never pays a compile it cannot use.  The switch changes results only
at rounding level (the compiled kernels sum in another order).

Compiled solves take one experiment at a time, eager ones batch experiments of one
structure; with more than :data:`COMPILE_MAX_EXPERIMENTS` experiments, or without
forward sensitivities (the only ones compiled), the executor stays eager.  If
compilation fails (an operation inductor cannot compile), a ``RuntimeWarning`` says so
and the executor stays eager: that call runs eager.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from petab_sciml.backends.torch.options import TorchOptions
from petab_sciml.simulation.plan import SimulationPlan
from petab_sciml.simulation.switching import SwitchingExecutor

COMPILE_AFTER_CPU_S = 5.0
"""Eager CPU seconds (this thread, summed over calls) after which the solves compile:
about a quarter of a compilation's cost, so a caller never pays more than about 1.25x
the better of always-eager and always-compiled, and a short session never compiles."""
COMPILE_MAX_EXPERIMENTS = 4
"""Above this many experiments the eager batched solve is kept (compiled solves run
the experiments one after another, and each new shape compiles anew)."""


class AutoCompileExecutor(SwitchingExecutor):
    """A :class:`~petab_sciml.backends.torch.simulation.TorchExecutor` that starts eager
    and switches to compiled solves (see the module docstring).  Attributes other than
    :meth:`run` are the active executor's."""

    backend = "torch"
    own = frozenset({"plan", "eager", "compiled", "eager_cpu_s", "may_compile",
                     "_compiled_options"})

    def __init__(self, plan: SimulationPlan, options: TorchOptions):
        from petab_sciml.backends.torch.simulation import TorchExecutor

        self.plan = plan
        self.eager = TorchExecutor(plan, replace(options, compile=False))
        self.compiled: Any = None
        self.eager_cpu_s = 0.0
        self.may_compile = (options.sensitivity == "forward"
                            and len(plan.experiments) <= COMPILE_MAX_EXPERIMENTS)
        self._compiled_options = replace(options, compile=True)

    @property
    def active(self) -> Any:
        """The executor the next call runs on."""
        return self.compiled if self.compiled is not None else self.eager

    def members(self) -> tuple[Any, ...]:
        return (self.eager, self.compiled)

    def run(self, kind: str, w: np.ndarray) -> Any:
        """As ``TorchExecutor.run``; counts eager CPU time and, once it has passed the
        threshold, compiles at the start of the next call (never after the last one:
        a single evaluation, as the CLI's ``evaluate`` makes, stays eager)."""
        if self.compiled is None and self.may_compile \
                and self.eager_cpu_s >= COMPILE_AFTER_CPU_S:
            out = self._compile(kind, w)
            if out is not None:
                return out
        if self.compiled is not None:
            return self.compiled.run(kind, w)
        start = time.thread_time()
        out = self.eager.run(kind, w)
        self.eager_cpu_s += time.thread_time() - start
        return out

    def _compile(self, kind: str, w: np.ndarray) -> Any:
        """Build the compiled executor and compile it by this call at ``w``; returns its
        result, or None (with a ``RuntimeWarning``) where compilation failed."""
        from petab_sciml.backends.torch.simulation import TorchExecutor

        self.may_compile = False
        try:
            compiled = TorchExecutor(self.plan, self._compiled_options)
            out = compiled.run(kind, w)
        except Exception as err:   # noqa: BLE001 - any compiler failure: stay eager
            warnings.warn(f"compiling the PyTorch solves failed, staying with eager "
                          f"solves: {type(err).__name__}: {str(err).splitlines()[0]}",
                          RuntimeWarning, stacklevel=3)
            return None
        self.compiled = compiled
        return out

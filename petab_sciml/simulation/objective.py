"""The objective of a PEtab SciML problem: negative log-posterior, gradient, simulations.

:class:`Simulator` puts a :class:`~petab_sciml.simulation.plan.SimulationPlan` and an
executor (JAX or PyTorch) behind one numpy-in, numpy-out API.  Parameters are exchanged
as ``{"mech": vector, "nets": {net: {layer: {array: ndarray}}}}``:

* ``mech``: the estimated mechanistic parameters in parameter-table order
  (:attr:`Simulator.parameter_ids`), on linear scale;
* ``nets``: every array of every network (PyTorch layout), frozen ones included.

Gradients have the same structure; elements the parameter table does not estimate
(``estimate`` false, frozen layers, arrays or elements) are exactly zero: they are
never differentiated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from petab_sciml.simulation.events import MAX_STATE_EVENTS
from petab_sciml.simulation.plan import SimulationError, SimulationPlan, aligned_empty


@dataclass
class Evaluation:
    """Everything one objective evaluation gives (numpy)."""

    value: float
    """Negative log-posterior (negative log-likelihood when there are no priors)."""
    llh: float
    """Log-likelihood."""
    logprior: float
    simulations: np.ndarray
    """Observable values in measurement-table order."""
    ok: bool
    grad: dict[str, Any] | None = None
    """Gradient of :attr:`value` (same structure as the parameters), if requested.

    Its arrays are views of one flat vector (not copies: a gradient may have millions of
    entries); where every entry is estimated, that vector is :attr:`grad_flat`, and
    with the JAX backend it is the compiled function's output itself, read-only like
    :attr:`simulations` (copy an array to modify it)."""
    grad_flat: np.ndarray | None = field(default=None, repr=False)
    """Gradient with respect to the free parameters (``plan.free_index`` order)."""
    sigma: np.ndarray | None = field(default=None, repr=False)
    """Noise parameter (standard deviation or scale) per measurement, table order."""
    reason: str = ""
    """Why :attr:`ok` is False (empty when it is True): a failed ODE solve, a noise
    standard deviation <= 0 (the measurement rows named) or a log-likelihood that is not
    finite."""

    @property
    def log_posterior(self) -> float:
        return self.llh + self.logprior


class Simulator:
    """Objective, gradient and simulations of one problem in one backend.

    ``options`` go to the backend's executor (``Backend.executor``): JAX ``solver``
    (``tsit5``, ``dopri5``, ``dopri8``, ``kvaerno3/4/5`` for stiff models), ``rtol``,
    ``atol``, ``max_steps``,
    ``sensitivity`` (``auto``, ``forward``, ``reverse``, ``adjoint``),
    ``batch_experiments`` (True: experiments of one structure in one vmapped solve;
    False: one after another; JAX default None: batched above 4 experiments, PyTorch
    default True), ``summed_weight_cotangents`` (reverse mode,
    default True: cotangents of network weights shared by a batch summed as one
    product; False: JAX's own rules), ``devices`` (batches of experiments split over
    this many JAX devices, default all: one per CPU core unless the user set JAX's
    device count, ``backends/jax/devices.py``); PyTorch
    ``method`` (``dopri5``, ...), ``rtol``, ``atol``, ``adjoint``, ``max_steps``.  JAX
    also takes ``cache`` (True/False) and ``cache_dir`` for the cross-process cache.
    """

    def __init__(self, plan: SimulationPlan, backend: str = "jax", **options: Any):
        from petab_sciml.plugins import backend_names, get_backend

        if backend not in backend_names():
            raise SimulationError(f"unknown backend {backend!r}; installed: "
                                  f"{', '.join(backend_names())}")
        self.plan = plan
        self.backend = backend
        self.options = dict(options)
        """The executor's options, as given (a simulator of another plan with the same
        settings: ``Simulator(plan, backend, **simulator.options)``)."""
        self.executor = get_backend(backend).executor(plan, **options)
        self._w_spares: list[np.ndarray] = []   # see _spare_w

    @property
    def cache(self) -> Any:
        """The executor's cross-process cache of compiled code (None where it has none)."""
        return getattr(self.executor, "cache", None)

    # ------------------------------------------------------------------ parameters
    @property
    def parameter_ids(self) -> tuple[str, ...]:
        """Ids of the estimated mechanistic parameters (order of ``p["mech"]``)."""
        return self.plan.mech_ids

    def parameters(self) -> dict[str, Any]:
        """Nominal values: ``{"mech": vector, "nets": {net: {layer: {array: ndarray}}}}``."""
        return self.plan.unpack(self.plan.w0)

    def trainable(self) -> dict[str, Any]:
        """Same structure as :meth:`parameters`, True where a value is estimated."""
        mask = self.plan.free_mask().astype(np.float64)
        out = self.plan.unpack(mask)
        out["mech"] = out["mech"].astype(bool)
        for layers in out["nets"].values():
            for arrays in layers.values():
                for k in arrays:
                    arrays[k] = arrays[k].astype(bool)
        return out

    def _w(self, params: Any, out: np.ndarray | None = None) -> np.ndarray:
        """``w`` of ``params`` (written into ``out`` if given and a copy is needed)."""
        if params is None:
            return self.plan.w0
        if isinstance(params, np.ndarray) and params.ndim == 1 \
                and params.size == self.plan.n_w:
            # a copy the caller cannot change during the call
            w = aligned_empty(self.plan.n_w) if out is None else out
            w[:] = params
            return w
        return self.plan.pack(params, out)

    def _spare_w(self) -> np.ndarray | None:
        """A ``w`` vector to pack into, reused between calls where the executor lets go
        of ``w`` when ``run`` returns (``releases_w``): a fresh vector of millions of
        entries costs page faults on every call, refilling one already touched does
        not."""
        if not getattr(self.executor, "releases_w", False):
            return None
        try:
            return self._w_spares.pop()
        except IndexError:   # none yet, or all in use by other threads
            return aligned_empty(self.plan.n_w)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, params: Any = None, *, grad: bool = True) -> Evaluation:
        """Value, log-likelihood, log-prior, simulations and (optionally) the gradient,
        from one compiled function."""
        spare = self._spare_w()
        w = self._w(params, spare)
        if grad:
            out, g = self.executor.run("value_and_grad", w)
        else:
            out, g = self.executor.run("value", w), None
        ev = Evaluation(float(_np(out["value"])), float(_np(out["llh"])),
                        float(_np(out["logprior"])), np.asarray(_np(out["simulations"]),
                                                                np.float64),
                        bool(_np(out["ok"])))
        if "sigma" in out:
            ev.sigma = np.asarray(_np(out["sigma"]), np.float64)
        if not ev.ok:
            ev.reason = failure_reason(_np(out.get("solved", False)), ev.sigma, ev.llh,
                                       state_events=self.plan.has_state_events)
        if g is not None:
            g = np.asarray(_np(g), np.float64)
            if self.plan.all_free:
                full = g   # nothing to scatter (millions of entries for large networks)
            else:
                full = np.zeros(self.plan.n_w)
                full[self.plan.free_index] = g
            ev.grad = self.plan.unpack(full, copy=False)
            ev.grad_flat = g
        if spare is not None and len(self._w_spares) < 2:
            # only after success: every output is read, so the solve no longer reads w
            self._w_spares.append(spare)
        return ev

    def objective(self, params: Any = None) -> float:
        """Negative log-posterior (negative log-likelihood without priors)."""
        return self.evaluate(params, grad=False).value

    def value_and_grad(self, params: Any = None) -> tuple[float, dict[str, Any]]:
        ev = self.evaluate(params, grad=True)
        return ev.value, ev.grad

    def simulate(self, params: Any = None) -> np.ndarray:
        """Observable values in measurement-table order."""
        return self.evaluate(params, grad=False).simulations

    # ------------------------------------------------------------------ introspection
    @property
    def n_traces(self) -> int:
        """How often the JAX objective was traced (0 for torch)."""
        return getattr(self.executor, "n_traces", 0)


def _np(x: Any) -> Any:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def simulator_for(problem: Any, backend: str | None = None, **options: Any) -> Simulator:
    """A :class:`Simulator` of a loaded problem (its plan is built once and kept)."""
    from petab_sciml.simulation.builder import build_plan

    plan = getattr(problem, "plan", None)
    if plan is None:
        plan = build_plan(problem.data)
        try:
            problem.plan = plan
        except AttributeError:  # pragma: no cover
            pass
    return Simulator(plan, backend or getattr(problem, "backend_name", "jax"), **options)


def failure_reason(solved: Any, sigma: np.ndarray | None, llh: float, *,
                   state_events: bool = False) -> str:
    """Why an evaluation is not ok: its ``solved`` flag, noise ``sigma`` per measurement
    (table order) and log-likelihood ``llh``; ``state_events``: the model has events
    whose trigger depends on states (a period in which more of them fire than
    :data:`~petab_sciml.simulation.events.MAX_STATE_EVENTS` fails)."""
    if not bool(solved):
        reason = ("an ODE solve failed (more than max_steps steps, a collapsed step size or "
                  "a non-finite state)")
        if state_events:
            reason = (reason[:-1] + ", or more SBML events triggered by states in one "
                      f"period than {MAX_STATE_EVENTS})")
        return reason
    if sigma is not None:
        bad = np.flatnonzero(~(sigma > 0))
        if bad.size:
            rows = ", ".join(str(int(i) + 1) for i in bad[:5]) + (", ..." if bad.size > 5
                                                                  else "")
            first = float(sigma[bad[0]])
            return (f"noise standard deviation <= 0 or NaN at {bad.size} measurement(s) "
                    f"(measurement-table data rows {rows}; first value {first!r})")
    return (f"the log-likelihood is {float(llh)!r} (a log-scale observable simulated <= 0, "
            "or a non-finite simulation)")

"""JAX simulation: the whole objective (and its gradient) as one jitted function.

:class:`JaxExecutor` binds a simulation plan to JAX and gives its objective, gradient
and simulations.  Everything the objective depends on is an *argument* of the jitted
function (the parameter vector ``w``, the default constants ``theta0`` and the data
arrays), so new values never retrace; only shapes are static.  The pieces:

==============================  ======================================================
``options.py``                  :class:`JaxOptions`, resolution of ``"auto"``
``xla_options.py``              XLA compiler options by problem size and mode
``data_layout.py``              the core data layout as named arrays
``networks.py``                 networks bound to ``w``, their inputs and outputs
``conditions.py``               condition changes (numbers and formulas)
``experiments.py``              groups, periods of an experiment, batches of them
``terms.py``                    the right-hand side with its networks
``solvers.py``                  diffrax solver, step-size controller, saving
``period.py``                   one period's solve, differentiated through diffrax
``forward_sensitivities.py``    one period's solve with forward sensitivities
``sensitivity_parameters.py``   the parameters ``p`` of ``S = dx/dp``
``lanes.py``                    batches of starts solved as one system
``steady_state.py``             the event of periods run to steady state
``stage_sums.py``               diffrax's stage sums in a batch-independent order
``measurements.py``             observables, noise, likelihood and prior
``devices.py``                  batches split over several devices
``cache.py``                    the traced objective kept across processes
==============================  ======================================================

Gradients (``sensitivity``):

* ``"forward"``: forward sensitivities ``S = dx/dp`` integrated together with the
  states in one diffrax solve (:mod:`.forward_sensitivities`).  Cost grows with the
  number of parameters; best up to a few hundred;
* ``"reverse"``: reverse mode through the solver (diffrax
  ``RecursiveCheckpointAdjoint``); cost independent of the number of parameters;
* ``"adjoint"``: continuous adjoint (``BacksolveAdjoint``), O(1) memory in steps;
* ``"forward-ad"``: forward-mode AD through the solver, one tangent per free
  parameter;
* ``"auto"`` (default): ``forward`` up to :data:`~.options.FORWARD_MODE_MAX` parameters
  times experiments in the largest batch with explicit solvers, ``reverse`` otherwise
  (and always with implicit solvers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from petab_sciml.simulation.compiled import compile_plan
from petab_sciml.simulation.layout import data_layout
from petab_sciml.simulation.plan import SimulationError, SimulationPlan

from .conditions import change_values, compile_change_formulas
from .data_layout import named_arrays
from .events import Events
from .experiments import (
    GroupValues,
    batch_arrays,
    experiment_solver,
    group_values,
    largest_batch,
    solve_batch,
)
from .measurements import log_likelihood_sum, log_prior_sum, network_outputs, observables_and_noise
from .networks import BoundNetworks, stochastic
from .options import SENSITIVITIES, JaxOptions
from .xla_options import compiler_options

__all__ = ["DIRECT_W_MAX", "JaxExecutor", "JaxOptions"]

DIRECT_W_MAX = 1 << 20
"""Parameter vectors up to this many entries go to the jitted objective as numpy arrays
(:meth:`JaxExecutor.arguments`), larger ones through ``jax.device_put``."""


class JaxExecutor:
    """Objective, gradient and simulations of one plan in JAX."""

    backend = "jax"
    releases_w = True
    """:meth:`run` keeps no reference to ``w`` once it returns and every output has
    been read (outputs are fresh buffers: nothing is donated), so callers may reuse it."""

    def __init__(self, plan: SimulationPlan, options: JaxOptions | None = None,
                 cache: Any = None):
        from .devices import experiment_devices
        from .model import check_dtype

        check_dtype("float64")  # switches on x64 (float64 ODE solves)
        import diffrax  # noqa: F401 - imported here (load time), not at the first trace
        import jax.numpy as jnp

        self.plan = plan
        self.options = options or JaxOptions()
        if self.options.sensitivity not in SENSITIVITIES:
            raise SimulationError(f"unknown sensitivity {self.options.sensitivity!r}; use "
                                  f"{', '.join(SENSITIVITIES)}")
        n_batch = largest_batch(plan)
        self.sensitivity = self.options.resolved_sensitivity(
            len(plan.theta_ids) + plan.n_w, n_batch)
        if self.options.pi_coefficients is None:
            from dataclasses import replace

            from petab_sciml.simulation.steps import pi_coefficients

            self.options = replace(self.options, pi_coefficients=pi_coefficients(
                self.options.solver, self.sensitivity))
        self.batched = self.options.resolved_batching(n_batch)
        """Experiments of one structure solved as one ``vmap`` (``JaxOptions.
        batch_experiments``, resolved)."""
        self.checkpoints = self.options.resolved_checkpoints(n_batch, self.batched)
        """Checkpoints of reverse mode (``JaxOptions.checkpoints``, resolved)."""
        self.devices = experiment_devices(self.options.devices)
        if self.options.implicit:
            # implicit solvers run unsplit: inside shard_map the Newton iteration's
            # Jacobian carries the mesh's sharding in its structure and lineax refuses
            # every right-hand side whose structure differs ("pytree does not match
            # out_structure")
            self.devices = self.devices[:1]
        """Devices batched experiments are spread over (``JaxOptions.devices``)."""
        self._spread = False
        self.split_batches: dict[int, int] = {}
        """Batches (index into :attr:`batches`) split over devices at the last trace of
        the objective, and into how many shares."""
        self.compiler_options = compiler_options(
            plan.n_w, self.sensitivity, n_batch if self.batched else 1)
        """XLA options of the compiled objective (:func:`.xla_options.compiler_options`)."""
        self.steady_state = any(p.steady_state for e in plan.experiments for p in e.periods)
        """Some period runs to steady state (the solves then carry a steady-state event)."""
        if self.steady_state and self.sensitivity == "adjoint":
            raise SimulationError("sensitivity='adjoint' cannot stop at a steady state "
                                  "(pre-equilibration, time = inf); use forward or reverse")
        self.fns = compile_plan(plan, "jax", term_sums=self.options.term_sums)
        self.events = Events(plan, self.fns) if plan.events else None
        self.networks = BoundNetworks(plan, self.fns.net_inputs)
        layout = named_arrays(plan, data_layout(plan), steady_state=self.steady_state,
                              forward_ad=self.sensitivity == "forward-ad")
        self.batches = layout.batches
        """Experiments batched by number of periods: ``(P, experiments, N)``."""
        self.obs_rows = layout.obs_rows
        self.llh_groups = layout.llh_groups
        self._change_formulas = compile_change_formulas(plan)
        self.data = {k: jnp.asarray(v) for k, v in layout.arrays.items()}
        self.n_traces = 0
        # implicit solvers check their Newton iterations with host callbacks, which
        # jax.export cannot serialise: every export would fail (and warn)
        self.cache = None if self.options.implicit else cache
        """An :class:`~petab_sciml.backends.jax.cache.ExportCache`, or None (also for
        implicit solvers)."""
        self._compiled: dict[str, Any] = {}
        self._theta0: Any = None   # plan.theta0 as a JAX array (made at the first call)

    # ------------------------------------------------------------------ the model
    def evaluate(self, w, theta0, data, train: bool = False, key=None):
        """Everything at parameter vector ``w``: a dict with ``value`` (negative
        log-posterior), ``llh``, ``logprior``, ``simulations`` (measurement order),
        ``sigma``, ``solved`` (all solves succeeded) and ``ok`` (solved, every ``sigma``
        > 0 and a finite log-likelihood; ``value`` is ``inf`` otherwise).  Pure; jit it.

        ``train`` (with a PRNG ``key``): networks evaluated outside the ODE (before it and
        in observables) run in training mode with that key.  Networks inside the
        right-hand side always run in eval mode: an adaptive solver needs a deterministic
        right-hand side."""
        import jax.numpy as jnp

        self.n_traces += 1
        plan = self.plan
        if train and key is None and any(stochastic(n.network) for n in plan.networks
                                         if not n.in_rhs):
            raise SimulationError("training mode with dropout or batch-norm layers needs a "
                                  "PRNG key")
        net_key = key if train else None
        nets = self.networks.arrays(w)
        theta_base = theta0.at[data["mech_theta"]].set(w[:plan.n_mech])

        def empty_outs():
            return [jnp.zeros((n.n_outputs,), w.dtype) for n in plan.networks]

        change = None
        if len(plan.change_exprs) > 0:
            change = change_values(self._change_formulas, data)
        groups = group_values(plan, self.networks, theta_base, nets, data, change,
                              empty_outs, w.dtype, key=net_key)
        solve = self._period_solver(groups.pre_ids, theta0.size, nets)
        X, TH, ok_all = self._solve_experiments(groups, change, solve, data, empty_outs,
                                                w.dtype, theta0.size)
        outs = network_outputs(plan, self.networks, X, TH, groups, data, nets, w.dtype,
                               key=net_key)
        y, sigma = observables_and_noise(self.fns, self.obs_rows, data, X, TH, outs,
                                         w.dtype)
        llh = log_likelihood_sum(self.llh_groups, data, y, sigma, w.dtype)
        logprior = log_prior_sum(plan, w, data)
        solved = jnp.all(jnp.stack(ok_all)) if ok_all else jnp.asarray(True)
        # a noise sd <= 0 (or NaN) or a log of a value <= 0 fails like a solve
        ok = solved & jnp.all(sigma > 0) & jnp.isfinite(llh)
        value = -(llh + logprior)
        value = jnp.where(ok, value, jnp.inf)
        return {"value": value, "llh": llh, "logprior": logprior, "simulations": y,
                "sigma": sigma, "ok": ok, "solved": solved}

    def _period_solver(self, pre_ids: list[int], n_theta: int, nets: Any) -> Any:
        """``solve(x0, theta, outs, arrays, t0, t1, ts) -> (x(ts), x(t1), ok)`` of one
        period in this executor's sensitivity mode, split at the right-hand side's jump
        times (:mod:`.jumps`) where it has some."""
        from .terms import vector_field

        plan = self.plan
        rhs_nets = [j for j, net in enumerate(plan.networks) if net.in_rhs]
        field = vector_field(self.networks, self.fns.rhs, rhs_nets)
        if self.sensitivity == "forward":
            from .forward_sensitivities import forward_sensitivity_solver
            from .sensitivity_parameters import SensitivityParameters

            parameters = SensitivityParameters(
                plan, rhs_nets, pre_ids, [n.n_outputs for n in plan.networks], n_theta,
                len(nets))
            solve = forward_sensitivity_solver(field, nets, parameters, self.options,
                                               steady_state=self.steady_state)
        else:
            from .period import period_solver

            solve = period_solver(field, nets, self.options, sensitivity=self.sensitivity,
                                  checkpoints=self.checkpoints,
                                  steady_state=self.steady_state)
        probe = None
        if self.plan.has_state_events:
            from .events import event_probe

            probe = event_probe(self.events, field, nets, self.options)
        if self.fns.jumps is None and probe is None:
            return solve
        from .jumps import with_jumps

        return with_jumps(solve, field, nets, self.fns.jumps, self.events, probe)

    def _solve_experiments(self, groups: GroupValues, change: Any, solve: Any, data: dict[str, Any],
                           empty_outs: Any, dtype: Any, n_theta: int
                           ) -> tuple[Any, Any, list[Any]]:
        """``(X, TH, ok)``: states and parameters at every measurement (measurement
        order), and per batch whether all its solves succeeded."""
        import jax.numpy as jnp

        from .devices import shares

        n_x = len(self.plan.state_ids)
        batched = self.batched
        xs_all, th_all, ok_all = [], [], []
        for b, (P, exps, _) in enumerate(self.batches):
            experiment = experiment_solver(P, groups, self.fns.x0, change, solve, empty_outs,
                                           self.events)
            devices = None
            if batched and self._spread and shares(len(self.devices), len(exps)) > 1:
                devices = self.devices
                self.split_batches[b] = len(self.devices)
            ys, ths, ok = solve_batch(experiment, batch_arrays(data, b, self.steady_state),
                                      len(exps), batched=batched, devices=devices)
            xs_all.append(ys.reshape(len(exps) * P * ys.shape[2], n_x))
            th_all.append(ths.reshape(len(exps) * P, n_theta))
            ok_all.append(jnp.all(ok))
        if not xs_all:   # no measurements
            xs_all = [jnp.zeros((0, n_x), dtype)]
            th_all = [jnp.zeros((0, n_theta), dtype)]
        X = jnp.concatenate(xs_all)[data["m_x"]]
        TH = jnp.concatenate(th_all)[data["m_th"]]
        return X, TH, ok_all

    # ------------------------------------------------------------------ entry points
    def value_and_grad_fn(self):
        """``f(w, theta0, data) -> (outputs dict, gradient wrt w)``; pure, jittable.

        The gradient covers all of ``w`` (frozen entries are dropped afterwards): the
        compiled code is then the same for problems that differ only in which
        parameters they estimate, so XLA's compilation cache serves all of them."""
        import jax
        import jax.numpy as jnp

        def fn(w, theta0, data):
            with self._spreading():
                return value_and_grad(w, theta0, data)

        def value_and_grad(w, theta0, data):
            def f(w):
                out = self.evaluate(w, theta0, data)
                return out["value"], out

            if self.sensitivity == "forward-ad":
                free = data["free"]
                if free.shape[0] == 0:
                    _, out = f(w)
                    return out, jnp.zeros_like(w)
                basis = jnp.zeros((free.shape[0], w.shape[0]), w.dtype)
                basis = basis.at[jnp.arange(free.shape[0]), free].set(1.0)
                tangents, out = _jvp_all(f, w, basis)
                return out, jnp.zeros_like(w).at[free].set(tangents)
            if (self.sensitivity == "reverse" and self.options.summed_weight_cotangents
                    and not self.options.implicit):
                # the gradient of a sum over experiments: weight cotangents may be
                # summed over each batch as they are made (see the option); not with
                # an implicit solver, whose Newton iteration takes the right-hand
                # side's Jacobian by jvp, which a custom_vjp refuses
                from .ops import batch_summed_weight_cotangents

                with batch_summed_weight_cotangents():
                    (_, out), grad = jax.value_and_grad(f, has_aux=True)(w)
                return out, grad
            (_, out), grad = jax.value_and_grad(f, has_aux=True)(w)
            return out, grad

        return fn

    def value_fn(self):
        """``f(w, theta0, data) -> outputs dict`` (no gradient); pure, jittable."""
        def fn(w, theta0, data):
            with self._spreading():
                return self.evaluate(w, theta0, data)

        return fn

    @contextlib.contextmanager
    def _spreading(self) -> Iterator[None]:
        """While the executor's own objective is traced, batches are split over
        :attr:`devices` (the native model, which users transform themselves, never
        splits)."""
        from .devices import closure_conversion_inside_shard_map

        if len(self.devices) < 2:
            yield
            return
        with closure_conversion_inside_shard_map():
            self._spread = True
            self.split_batches = {}
            try:
                yield
            finally:
                self._spread = False

    def arguments(self, w: np.ndarray, theta0: np.ndarray | None = None) -> tuple:
        """``(w, theta0, data)``: ``theta0`` and ``data`` as JAX arrays; ``w`` as the
        float64 numpy array itself up to :data:`DIRECT_W_MAX` entries (the jitted call
        transfers it in C++, faster than ``jax.device_put`` in Python), above that
        through ``jax.device_put``, which takes a 64-byte aligned float64 array (what
        ``plan.pack`` returns) without copying it on the CPU (``jnp.asarray`` always
        copies); ``w`` must not change during the call."""
        import jax
        import jax.numpy as jnp

        if theta0 is None:
            if self._theta0 is None:
                self._theta0 = jnp.asarray(self.plan.theta0, jnp.float64)
            theta = self._theta0
        else:
            theta = jnp.asarray(theta0, jnp.float64)
        w = np.asarray(w, np.float64)
        if w.size <= DIRECT_W_MAX:
            return w, theta, self.data
        return jax.device_put(w), theta, self.data

    def compiled(self, kind: str):
        """The jitted ``value_and_grad`` or ``value`` function (built on first use)."""
        found = self._compiled.get(kind)
        if found is not None:
            return found
        import jax

        fn = self.value_and_grad_fn() if kind == "value_and_grad" else self.value_fn()
        jitted = jax.jit(fn, compiler_options=self.compiler_options)
        if self.cache is not None:
            jitted = self.cache.wrap(self, kind, jitted)
        self._compiled[kind] = jitted
        return jitted

    def run(self, kind: str, w: np.ndarray):
        """``value``: outputs dict; ``value_and_grad``: (outputs dict, gradient wrt the
        free parameters, ``plan.free_index`` order)."""
        result = self.compiled(kind)(*self.arguments(w))
        if kind == "value":
            return result
        out, grad = result
        if self.plan.all_free:
            return out, np.asarray(grad)   # no copy: the output buffer itself, read-only
        return out, np.asarray(grad)[self.plan.free_index]


def _jvp_all(f, z, basis):
    """Value (and aux) once, plus the directional derivative along every basis vector:
    forward-mode gradient of a scalar function."""
    import jax

    def one(v):
        (value, out), (tangent, _) = jax.jvp(f, (z,), (v,))
        return tangent, out

    tangents, out = jax.vmap(one, out_axes=(0, None))(basis)
    return tangents, out

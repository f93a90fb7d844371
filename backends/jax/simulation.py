"""JAX simulation: the whole objective (and its gradient) as one jitted function.

* The ODE is solved with diffrax (explicit adaptive ``Dopri8`` with a PID step-size
  controller by default, ``tsit5``/``dopri5`` selectable; ``solver="kvaerno5"``
  (implicit) for stiff models), saving at the measurement times
  (``SaveAt(ts=...)``: outputs inside a step from diffrax's dense output).
* Experiments with the same number of periods are solved together with ``jax.vmap``
  (measurement times padded to a common length; padded points are never read);
  ``batch_experiments=False`` solves them one after another (``lax.map``).  With
  several JAX devices, large batches are split into one share per device
  (``jax.shard_map``, ``devices.py``).
* Pre-initialization networks run once per initial-condition group, before the solve;
  simulation networks run inside the right-hand side and at the measurement points.
* Everything the objective depends on is an *argument* of the jitted function (the
  parameter vector ``w``, the default constants ``theta0`` and the data arrays), so new
  values never retrace; only shapes are static.
* Gradients (``sensitivity``):

  - ``"forward"``: forward sensitivities ``S = dx/dp`` integrated together with the
    states in one diffrax solve (a ``jax.custom_vjp``; the step-size control covers
    ``S`` too, as in CVODES/AMICI, which keeps gradients accurate across kinks such as
    ReLU); the right-hand side Jacobian comes from ``n_x`` reverse passes.  Cost grows
    with the number of parameters; best up to a few hundred;
  - ``"reverse"``: reverse mode through the solver (diffrax
    ``RecursiveCheckpointAdjoint``); cost independent of the number of parameters;
  - ``"adjoint"``: continuous adjoint (``BacksolveAdjoint``), O(1) memory in steps;
  - ``"forward-ad"``: forward-mode AD through the solver, one tangent per free
    parameter;
  - ``"auto"`` (default): ``forward`` up to :data:`FORWARD_MODE_MAX` parameters times
    experiments in the largest batch with explicit solvers, ``reverse`` otherwise (and
    always with implicit solvers).
* Batches of starts (``jax.vmap`` of the native model's loss, ``petab_sciml.fit``) with
  forward sensitivities: the starts of each solve are stacked into one ODE system with
  one step-size controller (error norm: the largest of the starts' own norms) and
  differentiated in reverse mode through it (:func:`_solve_lanes`); each start's value
  and gradient then agree with its unbatched ones to the solver's tolerance, not bit
  for bit.  Experiments batched with their own times, steady-state periods and
  ``reverse``/``adjoint`` modes keep a plain ``vmap`` (each start its own steps).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from petab_sciml.simulation.compiled import compile_plan
from petab_sciml.simulation.likelihood import log_likelihood, log_prior_at
from petab_sciml.simulation.plan import SimulationError, SimulationPlan

FORWARD_MODE_MAX = 512
"""``sensitivity="auto"`` uses forward sensitivities up to this many parameters (entries of
``theta`` and network arrays) times experiments solved in one batch, reverse mode above."""

COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
"""XLA options of the objective's compilation below :data:`LARGE_NETWORK_PARAMETERS`: the
classic CPU emitters compile these while-loop-heavy programs about twice as fast, with the
same run time."""
LARGE_NETWORK_PARAMETERS = 1_000
"""From this many parameters (mechanistic and network arrays, ``plan.n_w``) on, the
objective is compiled without YNNPACK fusions (:data:`LARGE_COMPILER_OPTIONS`), whose
float64 kernels make small-batch products inside the solver loops 2-80x slower (a
2048-wide layer on a batch of two vectors: 1 s instead of 12 ms; forward sensitivities of
a 17k-parameter network: 3.7x); reverse and adjoint modes there keep XLA's fusion
emitters, whose code for the network-sized element-wise work (the weight cotangents: one
outer product per layer and Runge-Kutta stage) runs 1.3x faster from 17k parameters on
while a second more of compilation no longer matters (forward sensitivities gain nothing
from them); and forward sensitivities keep the parameters as a pytree inside the
right-hand side (:meth:`JaxExecutor._period_solver`).  Below it, the options (and so
the results, bit for bit) are those of smaller problems before: YNNPACK's products
change the last bits of the suite cases' right-hand sides, which adaptive steps amplify
to 3e-7 relative in a gradient (suite case 038)."""
LARGE_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}
"""XLA options of reverse and adjoint modes from :data:`LARGE_NETWORK_PARAMETERS` on
(forward sensitivities there: these and :data:`COMPILER_OPTIONS`)."""
BATCHED_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
"""XLA options of reverse and adjoint modes from :data:`LARGE_NETWORK_PARAMETERS` up to
:data:`BATCHED_DOT_MAX_PARAMETERS` when experiments are solved in batches (``jax.vmap``):
YNNPACK for the products only.  Under ``vmap`` the network's products are
matrix-matrix products (experiments x width), which YNNPACK's float64 kernels compute
2-2.5x faster than XLA's own (5-state problem, width 96, 10-1,000 experiments: 5.6 / 11
us per product at 10, 30 / 73 at 100; gradients through a 512-wide layer on 2-8
vectors 1.5x faster) and the whole objective 1.2-1.35x faster.  Its other fusions stay
off: its reductions (the batch sum of the per-experiment weight cotangents after the
solve) take 3-9 ms where XLA's take a fraction of that."""
BATCHED_DOT_MAX_PARAMETERS = 300_000
"""Above this many parameters batched solves keep :data:`LARGE_COMPILER_OPTIONS`:
YNNPACK's products lose there (the gradient through a 2048-wide layer on a batch of two
vectors takes 29 ms per step with them, 15 ms without)."""


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
    (newer jaxlib releases, e.g. 0.12 on Python 3.12, dropped some: such an option is
    left out, not an error)."""
    options = COMPILER_OPTIONS if options is None else options
    return {name: value for name, value in options.items() if _option_supported(name, value)}


DIRECT_W_MAX = 1 << 20
"""Parameter vectors up to this many entries go to the jitted objective as numpy arrays
(:meth:`JaxExecutor.arguments`), larger ones through ``jax.device_put``."""

BATCHED_CHECKPOINTS = 64
"""Reverse mode's default checkpoints when experiments are solved in batches (``vmap``).
Every checkpoint holds the loop state of the whole batch (states, outputs saved so far:
``experiments x times x states``), and diffrax allocates, fills and gathers all of them
on every call: with its default 447, 1,000 experiments of the 5-state problem spend
~55 ms of a 320 ms objective + gradient on that memory.  With 64 (nothing recomputed
up to 64 steps per experiment), objective + gradient take 0.75x the time for the
5-state problem at 1,000 experiments, 0.93x at 100, 0.86x for the Lotka-Volterra table
at 1,000, and 1.04x for that table at ``rtol = atol = 1e-12``, where experiments take
more than 64 steps and steps are recomputed (``benchmarks/batched_checkpoints.py``).
Results are the same bit for bit: checkpoints only decide what is recomputed."""

SENSITIVITIES = ("auto", "forward", "forward-ad", "reverse", "adjoint")
SOLVERS = ("tsit5", "dopri5", "dopri8", "kvaerno3", "kvaerno4", "kvaerno5")


@dataclass(frozen=True)
class JaxOptions:
    solver: str = "dopri8"
    rtol: float = 1e-8
    atol: float = 1e-8
    max_steps: int = 100_000
    sensitivity: str = "auto"
    checkpoints: int | None = None
    """Checkpoints of ``sensitivity="reverse"`` (``RecursiveCheckpointAdjoint``); None:
    :data:`BATCHED_CHECKPOINTS` for experiments solved in batches, else diffrax's
    default, about ``sqrt(2 * max_steps)`` (447).  Each holds the solver's loop
    state (states, step-size controller, outputs saved so far), never the network's
    arrays: with few states, memory does not depend on this number or on the network's
    size (see docs/simulation.md); fewer checkpoints than steps recompute steps."""
    batch_experiments: bool = True
    """Solve experiments of the same structure as one batched (``vmap``) solve; False
    solves them one after another (``lax.map``): the unbatched reference path."""
    summed_weight_cotangents: bool = True
    """Reverse mode: the cotangents of network weights and biases (``ops.linear``)
    that all experiments of a batched solve share are summed over the batch as one
    matrix product per Runge-Kutta stage (``ops.batch_summed_weight_cotangents``)
    instead of one outer product per experiment; objective + gradient of the 5-state
    problem at 1,000 experiments 2x faster.  Values unchanged bit for bit, gradients up
    to the order of a sum.  False: JAX's own derivative rules (for comparison)."""

    factormax: float | None = None
    """The largest factor by which one step may exceed the last (diffrax's
    ``PIDController(factormax=)``); None: the solver's
    (``petab_sciml.simulation.steps.max_step_growth``)."""
    devices: int | None = None
    """Batched experiments are split into one share per device, each solved on its
    device (``backends/jax/devices.py``): this many of JAX's local devices, None: all
    of them.  On a CPU the backend gives JAX one device per core unless the user set
    JAX's device count or JAX computed before the backend was first used
    (``devices.use_cpu_cores_by_default``); batches with fewer than
    ``MIN_EXPERIMENTS_PER_DEVICE`` experiments per device are not split."""

    def resolved_sensitivity(self, n_parameters: int, n_batch: int = 1) -> str:
        """``n_batch``: the most experiments solved together in one batched solve."""
        if self.sensitivity == "auto":
            if self.solver.lower().startswith("kvaerno"):
                # an implicit solver on the sensitivity system would run Newton on
                # n_x * (n_x + n_p) unknowns: differentiate through the solver instead
                return "reverse"
            # forward sensitivities cost n_p tangents per experiment and step, reverse
            # mode a fixed tape overhead: with many experiments batched, reverse wins
            # (Lotka-Volterra UDE, 60 parameters: 10 experiments 14 ms forward, 8 ms
            # reverse; 100 experiments 170 ms and 27 ms)
            n_batch = n_batch if self.batch_experiments else 1
            return "forward" if n_parameters * n_batch <= FORWARD_MODE_MAX else "reverse"
        return self.sensitivity


def step_controller(options: JaxOptions, norm: Any = None):
    """The PID step-size controller of ``options``: tolerances and the largest step
    growth (``petab_sciml.simulation.steps.max_step_growth``: 6x for ``dopri8``)."""
    import diffrax

    from petab_sciml.simulation.steps import max_step_growth

    factormax = options.factormax
    if factormax is None:
        factormax = max_step_growth(options.solver)
    extra = {} if norm is None else {"norm": norm}
    return diffrax.PIDController(rtol=options.rtol, atol=options.atol, factormax=factormax,
                                 **extra)


def _diffrax_solver(name: str, scan_kind: str | None = None):
    import diffrax

    table = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8,
             "kvaerno3": diffrax.Kvaerno3, "kvaerno4": diffrax.Kvaerno4,
             "kvaerno5": diffrax.Kvaerno5}
    cls = table.get(name.lower())
    if cls is None:
        raise SimulationError(f"unknown JAX solver {name!r}; known: {', '.join(SOLVERS)}")
    return cls(scan_kind=scan_kind) if scan_kind else cls()


class JaxExecutor:
    """Objective, gradient and simulations of one plan in JAX."""

    backend = "jax"
    releases_w = True
    """:meth:`run` keeps no reference to ``w`` once it returns and every output has
    been read (outputs are fresh buffers: nothing is donated), so callers may reuse it."""

    def __init__(self, plan: SimulationPlan, options: JaxOptions | None = None,
                 cache: Any = None):
        from petab_sciml.backends.jax.model import check_dtype

        check_dtype("float64")  # switches on x64 (float64 ODE solves)
        import diffrax  # noqa: F401 - imported here (load time), not at the first trace
        import jax.numpy as jnp

        self.plan = plan
        self.options = options or JaxOptions()
        if self.options.sensitivity not in SENSITIVITIES:
            raise SimulationError(f"unknown sensitivity {self.options.sensitivity!r}; use "
                                  f"{', '.join(SENSITIVITIES)}")
        by_periods: dict[int, int] = {}
        for exp in plan.experiments:
            by_periods[len(exp.periods)] = by_periods.get(len(exp.periods), 0) + 1
        n_batch = max(by_periods.values(), default=1)
        self.sensitivity = self.options.resolved_sensitivity(
            len(plan.theta_ids) + plan.n_w, n_batch)
        self.checkpoints = self.options.checkpoints
        """Checkpoints of reverse mode (``JaxOptions.checkpoints``, resolved)."""
        if self.checkpoints is None and self.options.batch_experiments and n_batch > 1:
            self.checkpoints = BATCHED_CHECKPOINTS
        from petab_sciml.backends.jax.devices import experiment_devices

        self.devices = experiment_devices(self.options.devices)
        """Devices batched experiments are spread over (``JaxOptions.devices``)."""
        self._spread = False
        self.split_batches: dict[int, int] = {}
        """Batches (index into :attr:`batches`) split over devices at the last trace of
        the objective, and into how many shares."""
        self.compiler_options = compiler_options(
            plan.n_w, self.sensitivity, n_batch if self.options.batch_experiments else 1)
        """XLA options of the compiled objective (:func:`compiler_options`)."""
        self.steady_state = any(p.steady_state for e in plan.experiments for p in e.periods)
        """Some period runs to steady state (the solves then carry a steady-state event)."""
        if self.steady_state and self.sensitivity == "adjoint":
            raise SimulationError("sensitivity='adjoint' cannot stop at a steady state "
                                  "(pre-equilibration, time = inf); use forward or reverse")
        self.fns = compile_plan(plan, "jax")
        self._net_inputs = [_symbol_picker(net.input_exprs, plan.groups()) or fn
                            for net, fn in zip(plan.networks, self.fns.net_inputs)]
        self._forwards = self._networks()
        self._train_forwards: dict[int, Any] = {}
        self.data = {k: jnp.asarray(v) for k, v in self._data_arrays().items()}
        self.n_traces = 0
        self.cache = cache
        """An :class:`~petab_sciml.backends.jax.cache.ExportCache`, or None."""
        self._compiled: dict[str, Any] = {}
        self._theta0: Any = None   # plan.theta0 as a JAX array (made at the first call)

    # ------------------------------------------------------------------ networks
    def _networks(self) -> list[Any]:
        from petab_sciml.backends.jax.model import make_forward

        return [make_forward(net.network, dtype="float64")[0] for net in self.plan.networks]

    def _train_forward(self, j: int):
        found = self._train_forwards.get(j)
        if found is None:
            from petab_sciml.backends.jax.model import make_forward

            found = make_forward(self.plan.networks[j].network, train=True,
                                 dtype="float64")[0]
            self._train_forwards[j] = found
        return found

    def _net_arrays(self, w):
        """Per network: (params, buffers) nested dicts sliced out of ``w``."""
        out = []
        for net in self.plan.networks:
            params: dict[str, dict[str, Any]] = {}
            buffers: dict[str, dict[str, Any]] = {}
            for s in net.arrays:
                value = w[s.offset: s.offset + s.size].reshape(s.shape)
                target = params if s.ir_trainable else buffers
                target.setdefault(s.layer, {})[s.array] = value
            out.append((params, buffers))
        return out

    def _net_out(self, j, t, x, theta, outs, arrays, nets, key=None):
        """Outputs (mapped ids) of network ``j``; ``outs`` holds the other groups.  With a
        PRNG ``key`` the network runs in training mode (Dropout layers, batch statistics;
        updated running statistics are discarded)."""
        import jax.numpy as jnp

        plan = self.plan.networks[j]
        fn = self._net_inputs[j]
        values = fn(t, x, theta, *outs) if fn is not None else None
        inputs = []
        for inp in plan.inputs:
            if inp.kind == "array":
                inputs.append(arrays[j][inp.arg])
            else:
                inputs.append(values[inp.start: inp.start + inp.size].reshape(inp.shape))
        params, buffers = nets[j]
        if key is not None:
            result = self._train_forward(j)(params, tuple(inputs), jax.random.fold_in(key, j),
                                            buffers)[0]
        else:
            result = self._forwards[j](params, tuple(inputs), buffers)
        picked = []
        for arg, index in plan.output_index:
            out = result[arg]
            block = out if index is None else out[index]
            if block.size != 1:
                raise SimulationError(f"network {plan.id!r}: output {arg} "
                                      f"{'' if index is None else list(index)} has "
                                      f"{block.size} elements; map single elements")
            picked.append(block.reshape(()))
        if not picked:
            return jnp.zeros((0,), x.dtype if x is not None else theta.dtype)
        return jnp.stack(picked)

    # ------------------------------------------------------------------ data
    def _data_arrays(self) -> dict[str, np.ndarray]:
        plan = self.plan
        n_theta, n_x = len(plan.theta_ids), len(plan.state_ids)
        G = len(plan.groups_conditions)
        d: dict[str, np.ndarray] = {}
        d["g_t0"] = plan.group_t0.astype(np.float64)
        kg = max((len(c) for c in plan.group_theta_changes), default=0)
        tgt = np.full((G, kg), n_theta, np.int64)
        src = np.zeros((G, kg), np.int64)
        for g, changes in enumerate(plan.group_theta_changes):
            for i, (ti, ci) in enumerate(changes):
                tgt[g, i], src[g, i] = ti, ci
        d["g_th_tgt"], d["g_th_src"] = tgt, src
        for j, net in enumerate(plan.networks):
            for inp in net.inputs:
                if inp.kind == "array":
                    d[f"arr_{j}_{inp.arg}"] = inp.data
        # experiments, batched by number of periods
        self.batches: list[tuple[int, list[int], int]] = []   # (P, experiments, N)
        by_p: dict[int, list[int]] = {}
        for e, exp in enumerate(plan.experiments):
            by_p.setdefault(len(exp.periods), []).append(e)
        x_offset, th_offset = 0, 0
        point_of: dict[tuple[int, int, int], int] = {}
        theta_of: dict[tuple[int, int], int] = {}
        for b, (P, exps) in enumerate(sorted(by_p.items())):
            N = max(1, max(len(p.times) for e in exps for p in plan.experiments[e].periods))
            E = len(exps)
            K = max(1, max(len(p.theta_changes) for e in exps
                           for p in plan.experiments[e].periods))
            K2 = max(1, max(len(p.state_changes) for e in exps
                            for p in plan.experiments[e].periods))
            starts = np.zeros((E, P))
            ends = np.zeros((E, P))
            ts = np.zeros((E, P, N))
            th_t = np.full((E, P, K), n_theta, np.int64)
            th_s = np.zeros((E, P, K), np.int64)
            st_t = np.full((E, P, K2), n_x, np.int64)
            st_s = np.zeros((E, P, K2), np.int64)
            group = np.zeros(E, np.int64)
            t_inf = np.zeros((E, P, N), bool)
            for i, e in enumerate(exps):
                exp = plan.experiments[e]
                group[i] = exp.group
                for k, p in enumerate(exp.periods):
                    starts[i, k], ends[i, k] = p.start, p.end
                    ts[i, k, :] = p.end
                    ts[i, k, : len(p.times)] = p.times
                    if p.steady_state:
                        # steady-state (inf) points read the end state; the solver saves
                        # there at the last finite time (or the start) instead
                        t_inf[i, k] = ~np.isfinite(ts[i, k])
                        finite = p.times[np.isfinite(p.times)]
                        ts[i, k, t_inf[i, k]] = finite[-1] if finite.size else p.start
                    for c, (ti, ci) in enumerate(p.theta_changes):
                        th_t[i, k, c], th_s[i, k, c] = ti, ci
                    for c, (xi, ci) in enumerate(p.state_changes):
                        st_t[i, k, c], st_s[i, k, c] = xi, ci
                    for jt in range(len(p.times)):
                        point_of[(e, k, jt)] = x_offset + (i * P + k) * N + jt
                    theta_of[(e, k)] = th_offset + i * P + k
            d.update({f"b{b}_start": starts, f"b{b}_end": ends, f"b{b}_ts": ts,
                      f"b{b}_th_tgt": th_t, f"b{b}_th_src": th_s, f"b{b}_st_tgt": st_t,
                      f"b{b}_st_src": st_s, f"b{b}_group": group})
            if self.steady_state:
                d[f"b{b}_tinf"] = t_inf
            self.batches.append((P, exps, N))
            x_offset += E * P * N
            th_offset += E * P
        m = plan.measurements
        d["m_x"] = np.array([point_of[(int(e), int(k), int(j))] for e, k, j in
                             zip(m.experiment, m.period, m.time_index)], np.int64)
        d["m_th"] = np.array([theta_of[(int(e), int(k))] for e, k in
                              zip(m.experiment, m.period)], np.int64)
        d["m_group"] = np.array([plan.experiments[int(e)].group for e in m.experiment],
                                np.int64)
        d["m_time"] = m.time
        d["m_value"] = m.value
        d["m_opt"], d["m_opv"] = m.obs_par_theta, m.obs_par_value
        d["m_npt"], d["m_npv"] = m.noise_par_theta, m.noise_par_value
        self.obs_rows: list[tuple[int, str]] = []
        rows = []
        for i in range(len(plan.observable_ids)):
            idx = np.flatnonzero(m.observable == i)
            if idx.size:
                d[f"obs_{i}"] = idx.astype(np.int64)
                self.obs_rows.append((i, f"obs_{i}"))
                rows.append(idx)
        d["m_order"] = np.argsort(np.concatenate(rows)) if rows else np.zeros(0, np.int64)
        self.llh_groups: list[tuple[int, int, str]] = []
        for tr in range(3):
            for di in range(2):
                idx = np.flatnonzero((m.transform == tr) & (m.distribution == di))
                if idx.size:
                    key = f"llh_{tr}_{di}"
                    d[key] = idx.astype(np.int64)
                    self.llh_groups.append((tr, di, key))
        for i, (_, idx, *_) in enumerate(plan.priors):
            d[f"prior_{i}"] = idx
        if self.sensitivity == "forward-ad":
            d["free"] = plan.free_index
        d["mech_theta"] = plan.mech_theta_index
        # condition changes: numbers in a table, formulas compiled on their own
        exprs = plan.change_exprs
        numeric = [bool(getattr(e, "is_number", False)) for e in exprs]
        d["chg_const"] = np.array([float(e) if n else 0.0 for e, n in zip(exprs, numeric)],
                                  np.float64).reshape(-1)
        d["chg_formula"] = ~np.array(numeric, bool).reshape(-1)
        d["chg_pos"] = np.maximum(np.cumsum(d["chg_formula"]) - 1, 0).astype(np.int64)
        formulas = [e for e, n in zip(exprs, numeric) if not n]
        self._change_formulas = None
        if formulas:
            from petab_sciml.expressions import compile_expressions

            self._change_formulas = compile_expressions(
                formulas, plan.groups(), backend="jax", name="change_formulas",
                broadcast=False)
        return d

    # ------------------------------------------------------------------ the model
    def evaluate(self, w, theta0, data, train: bool = False, key=None):
        """Everything at parameter vector ``w``: a dict with ``value`` (negative
        log-posterior), ``llh``, ``logprior``, ``simulations`` (measurement order) and
        ``ok`` (all solves succeeded).  Pure; jit it.

        ``train`` (with a PRNG ``key``): networks evaluated outside the ODE (before it and
        in observables) run in training mode with that key.  Networks inside the
        right-hand side always run in eval mode: an adaptive solver needs a deterministic
        right-hand side."""
        import jax
        import jax.numpy as jnp

        from petab_sciml.backends.jax.devices import sharded_map, shares

        self.n_traces += 1
        plan = self.plan
        fns = self.fns
        if train and key is None and any(_stochastic(n.network) for n in plan.networks
                                         if not n.in_rhs):
            raise SimulationError("training mode with dropout or batch-norm layers needs a "
                                  "PRNG key")
        net_key = key if train else None
        n_x, n_mech = len(plan.state_ids), plan.n_mech
        n_out = [n.n_outputs for n in plan.networks]
        nets = self._net_arrays(w)
        theta_base = theta0.at[data["mech_theta"]].set(w[:n_mech])
        zeros_x = jnp.zeros((n_x,), w.dtype)

        def empty_outs():
            return [jnp.zeros((k,), w.dtype) for k in n_out]

        # -- initial-condition groups: first-period parameter changes, pre-init networks
        G = len(plan.groups_conditions)
        arrays_g = [{inp.arg: data[f"arr_{j}_{inp.arg}"] for inp in net.inputs
                     if inp.kind == "array"} for j, net in enumerate(plan.networks)]

        has_changes = len(plan.change_exprs) > 0
        change_values = self._change_values(data)

        def group_fn(t0, tgt, src, arrays):
            outs = empty_outs()
            theta = theta_base
            if has_changes:
                vals = change_values(t0, zeros_x, theta_base, outs, src)
                theta = theta_base.at[tgt].set(vals, mode="drop")
            for j, net in enumerate(plan.networks):
                if net.pre_initialization:
                    outs[j] = self._net_out(j, t0, zeros_x, theta, outs, arrays, nets,
                                            key=net_key)
            return theta, [outs[j] for j, net in enumerate(plan.networks)
                           if net.pre_initialization]

        pre_ids = [j for j, net in enumerate(plan.networks) if net.pre_initialization]
        if G:
            theta_g, pre_g = _map(group_fn, (data["g_t0"], data["g_th_tgt"],
                                             data["g_th_src"], arrays_g), G)
        else:  # pragma: no cover - no measurements
            theta_g, pre_g = jnp.zeros((0, theta0.size)), [jnp.zeros((0, k)) for k in n_out]

        rhs_nets = [j for j, net in enumerate(plan.networks) if net.in_rhs]
        solve = self._period_solver(rhs_nets, pre_ids, n_out, theta0.size, nets)
        xs_all, th_all, ok_all = [], [], []
        for b, (P, exps, _) in enumerate(self.batches):
            def experiment(start, end, ts, th_t, th_s, st_t, st_s, group, t_inf=None, P=P):
                theta = theta_g[group]
                outs = empty_outs()
                for i, j in enumerate(pre_ids):
                    outs[j] = pre_g[i][group]
                arrays = [{k: v[group] for k, v in a.items()} for a in arrays_g]
                t0 = start[0]
                x = fns.x0(t0, theta, *outs)
                if has_changes:
                    vals = change_values(t0, x, theta, outs, st_s[0])
                    x = x.at[st_t[0]].set(vals, mode="drop")
                ys, thetas, oks = [], [], []
                for k in range(P):
                    if k > 0 and has_changes:
                        vals = change_values(start[k], x, theta, outs,
                                             jnp.concatenate([th_s[k], st_s[k]]))
                        n_th = th_s.shape[1]
                        theta = theta.at[th_t[k]].set(vals[:n_th], mode="drop")
                        x = x.at[st_t[k]].set(vals[n_th:], mode="drop")
                    y, x, good = solve(x, theta, outs, arrays, start[k], end[k], ts[k])
                    if t_inf is not None:   # steady-state measurements: the end state
                        y = jnp.where(t_inf[k][:, None], x[None, :], y)
                    ys.append(y)
                    thetas.append(theta)
                    oks.append(good)
                return jnp.stack(ys), jnp.stack(thetas), jnp.all(jnp.stack(oks))

            batch = (data[f"b{b}_start"], data[f"b{b}_end"], data[f"b{b}_ts"],
                     data[f"b{b}_th_tgt"], data[f"b{b}_th_src"], data[f"b{b}_st_tgt"],
                     data[f"b{b}_st_src"], data[f"b{b}_group"])
            if self.steady_state:
                batch = (*batch, data[f"b{b}_tinf"])
            if self.options.batch_experiments and self._spread \
                    and shares(len(self.devices), len(exps)) > 1:
                ys, ths, ok = sharded_map(experiment, batch, len(exps), self.devices)
                self.split_batches[b] = len(self.devices)
            elif self.options.batch_experiments:
                ys, ths, ok = _map(experiment, batch, len(exps))
            else:
                ys, ths, ok = jax.lax.map(lambda a: experiment(*a), batch)
            xs_all.append(ys.reshape(len(exps) * P * ys.shape[2], n_x))
            th_all.append(ths.reshape(len(exps) * P, theta0.size))
            ok_all.append(jnp.all(ok))
        if not xs_all:   # no measurements
            xs_all = [jnp.zeros((0, n_x), w.dtype)]
            th_all = [jnp.zeros((0, theta0.size), w.dtype)]
        X = jnp.concatenate(xs_all)[data["m_x"]]
        TH = jnp.concatenate(th_all)[data["m_th"]]
        t_m = data["m_time"]
        group_m = data["m_group"]
        outs = [jnp.zeros((t_m.shape[0], k), w.dtype) for k in n_out]
        for i, j in enumerate(pre_ids):
            outs[j] = pre_g[i][group_m]
        obs_nets = [j for j, net in enumerate(plan.networks) if net.in_observables]
        if obs_nets:
            arrays_m = [{k: v[group_m] for k, v in a.items()} for a in arrays_g]

            def point(t, x, theta, outs, arrays):
                outs = list(outs)
                for j in obs_nets:
                    outs[j] = self._net_out(j, t, x, theta, outs, arrays, nets, key=net_key)
                return outs

            outs = jax.vmap(point)(t_m, X, TH, outs, arrays_m)
        op = _overrides(jnp, TH, data["m_opt"], data["m_opv"])
        npar = _overrides(jnp, TH, data["m_npt"], data["m_npv"])
        ys, sigmas = [], []
        for i, key in self.obs_rows:
            idx = data[key]
            args = (t_m[idx], X[idx], TH[idx], *(o[idx] for o in outs))
            ys.append(fns.observables[i](*args, op[idx])[:, 0])
            sigmas.append(fns.noise[i](*args, npar[idx])[:, 0])
        order = data["m_order"]
        y = jnp.concatenate(ys)[order] if ys else jnp.zeros((0,), w.dtype)
        sigma = jnp.concatenate(sigmas)[order] if sigmas else jnp.zeros((0,), w.dtype)
        llh = jnp.zeros((), w.dtype)
        for tr, di, key in self.llh_groups:
            idx = data[key]
            llh = llh + jnp.sum(log_likelihood(jnp, data["m_value"][idx], y[idx],
                                               sigma[idx], tr, di))
        logprior = jnp.asarray(plan.logprior_const, w.dtype)
        for i, (prior, _, _, _, scale) in enumerate(plan.priors):
            logprior = logprior + jnp.sum(log_prior_at(jnp, w[data[f"prior_{i}"]], prior,
                                                       scale))
        ok = jnp.all(jnp.stack(ok_all)) if ok_all else jnp.asarray(True)
        value = -(llh + logprior)
        value = jnp.where(ok, value, jnp.inf)
        return {"value": value, "llh": llh, "logprior": logprior, "simulations": y, "sigma": sigma,
                "ok": ok}

    def _change_values(self, data):
        """``values(t, x, theta, outs, index)``: the condition changes ``index`` (an int
        array into ``plan.change_exprs``).  Changes that are numbers are read from a
        table; only the formulas are evaluated (all of them, once per call).  With one
        condition per experiment, evaluating every change for every experiment would
        cost experiments squared."""
        import jax.numpy as jnp

        formulas = self._change_formulas
        const, pos, is_formula = (data["chg_const"], data["chg_pos"],
                                  data["chg_formula"])

        def values(t, x, theta, outs, index):
            vals = const[index]
            if formulas is not None:
                computed = formulas(t, x, theta, *outs)
                vals = jnp.where(is_formula[index], computed[pos[index]], vals)
            return vals

        return values

    # ------------------------------------------------------------------ ODE solves
    def _period_solver(self, rhs_nets, pre_ids, n_out, n_theta, nets):
        """``solve(x0, theta, outs, arrays, t0, t1, ts) -> (x(ts), x(t1), ok)``.

        With ``sensitivity="forward"`` the solve is a ``jax.custom_vjp`` whose forward
        pass integrates the forward sensitivity system ``dS/dt = df/dx S + df/dp`` along
        with the states (one diffrax solve, no differentiation through the solver; the
        error control covers the sensitivities too, as in CVODES/AMICI) and whose
        backward pass contracts the cotangents with ``S``.  ``p`` gathers everything the
        right-hand side depends on: ``theta``, the pre-initialization outputs and the
        arrays of the networks inside the right-hand side.
        """
        import diffrax
        import jax
        import jax.numpy as jnp

        from petab_sciml.backends.jax import ops
        from petab_sciml.backends.jax.stage_sums import diffeqsolve

        fns = self.fns
        opts = self.options
        solver = _diffrax_solver(opts.solver)
        n_x = len(self.plan.state_ids)

        def field(t, x, theta, outs, arrays, nets_):
            outs = list(outs)
            for j in rhs_nets:
                outs[j] = self._net_out(j, t, x, theta, outs, arrays, nets_)
            return fns.rhs(t, x, theta, *outs)

        def save(ts):
            return diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts), diffrax.SubSaveAt(t1=True)])

        def ok_of(sol):
            # a steady-state event ends a solve successfully too
            return (sol.result == diffrax.RESULTS.successful) | \
                (sol.result == diffrax.RESULTS.event_occurred)

        def steady(rates, t1, ts):
            """The steady-state event of a period ending at ``t1 = inf`` (None when no
            period of the plan runs to steady state): past the last finite measurement
            time ``ts[-1]``, stop once every ``rates(t, y, args) -> [(dy/dt, y), ...]``
            has a weighted RMS norm below 1 (AMICI's check, with ``atol`` and ``rtol``)."""
            if not self.steady_state:
                return None

            def cond(t, y, args, **kwargs):
                del kwargs
                done = jnp.isinf(t1) & (t >= ts[-1])
                for rate, value in rates(t, y, args):
                    scale = opts.atol + opts.rtol * jnp.abs(value)
                    done = done & (jnp.sqrt(jnp.mean((rate / scale) ** 2)) < 1.0)
                return done

            return diffrax.Event(cond)

        if self.sensitivity != "forward":
            controller = step_controller(opts)
            if self.sensitivity == "forward-ad":
                adjoint = diffrax.ForwardMode()
            elif self.sensitivity == "adjoint":
                adjoint = diffrax.BacksolveAdjoint(solver=_diffrax_solver(opts.solver),
                                                   stepsize_controller=controller)
            else:
                adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=self.checkpoints)
            term = diffrax.ODETerm(lambda t, x, a: field(t, x, *a))

            def solve(x0, theta, outs, arrays, t0, t1, ts):
                args = (theta, outs, arrays, nets)
                if self.sensitivity == "adjoint":
                    # BacksolveAdjoint takes no SaveAt(subs=...): the end state is the
                    # last saved time (t1 finite: steady states are refused with it)
                    sol = diffeqsolve(
                        term, solver, t0, t1, None, x0, args,
                        saveat=diffrax.SaveAt(ts=jnp.concatenate([ts, t1[None]])),
                        stepsize_controller=controller, max_steps=opts.max_steps,
                        adjoint=adjoint, throw=False)
                    return sol.ys[:-1], sol.ys[-1], ok_of(sol)
                event = steady(lambda t, x, a: [(field(t, x, *a), x)], t1, ts)
                sol = diffeqsolve(
                    term, solver, t0, t1, None, x0, args,
                    saveat=save(ts), stepsize_controller=controller,
                    max_steps=opts.max_steps, adjoint=adjoint, throw=False, event=event)
                return sol.ys[0], sol.ys[1][-1], ok_of(sol)

            return solve

        # -- forward sensitivities: p = (theta, pre-initialization outputs, rhs arrays);
        # the columns of S follow that order
        shapes = [(j, s) for j in rhs_nets for s in self.plan.networks[j].arrays]
        leaf_shapes = ([(n_theta,)] + [(n_out[j],) for j in pre_ids]
                       + [tuple(s.shape) for _, s in shapes])
        n_p = int(sum(np.prod(shape, dtype=np.int64) for shape in leaf_shapes))
        n = n_x + n_p
        # Large networks: p and S are pytrees (S: one block per array of p), so that the
        # right-hand side takes each array as it is and writes dS for each array once.
        # As one vector sliced inside the right-hand side, every array cost a pad and an
        # add of all of p per reverse pass (3x slower at 17k parameters), and one S
        # matrix an extra copy of J_p per stage (13% at 265k).  Small problems keep the
        # single vector (results bit for bit as before).
        tree = self.plan.n_w >= LARGE_NETWORK_PARAMETERS and n_x < n

        def as_tree(p_flat):
            """``(theta, [pre outputs], [rhs arrays])`` from one vector."""
            leaves, start = [], 0
            for shape in leaf_shapes:
                size = int(np.prod(shape, dtype=np.int64))
                leaves.append(p_flat[start: start + size].reshape(shape))
                start += size
            k = 1 + len(pre_ids)
            return leaves[0], leaves[1:k], leaves[k:]

        def parameters(theta, outs):
            arrays_ = []
            for j, s in shapes:
                group = nets[j][0] if s.ir_trainable else nets[j][1]
                arrays_.append(group[s.layer][s.array])
            p = (theta, [outs[j] for j in pre_ids], arrays_)
            if tree:
                return p
            parts = [leaf.reshape(-1) for leaf in jax.tree_util.tree_leaves(p)]
            return jnp.concatenate(parts) if parts else jnp.zeros((0,))

        def unpack(p, outs_template, p_is_tree=tree):
            theta, pre, arrays_ = p if p_is_tree else as_tree(p)
            outs = list(outs_template)
            for j, value in zip(pre_ids, pre):
                outs[j] = value
            nets_ = [(dict(), dict()) for _ in nets]
            for (j, s), value in zip(shapes, arrays_):
                target = nets_[j][0] if s.ir_trainable else nets_[j][1]
                target.setdefault(s.layer, {})[s.array] = value
            return theta, outs, nets_

        def field_p(t, x, p, arrays, outs_template, p_is_tree=tree):
            theta, outs, nets_ = unpack(p, outs_template, p_is_tree)
            return field(t, x, theta, outs, arrays, nets_)

        def first(tree_):
            return jax.tree_util.tree_map(lambda a: a[-1], tree_)

        plain_term = diffrax.ODETerm(lambda t, x, a: field_p(t, x, *a))
        controller = step_controller(opts)

        def aug(t, y, a):
            # the Jacobians below enter S, and S the step-size control: small networks'
            # products keep one order for every batch (ops.ordered_linear)
            with ops.batch_invariant_jacobians():
                return aug_traced(t, y, a)

        def aug_traced(t, y, a):
            x, sens = y
            p, arrays, outs_template = a

            def f(x, p):
                return field_p(t, x, p, arrays, outs_template)

            if n_x < n:
                # dS/dt = J_x S + [0 | J_p], J from n_x reverse passes (cheaper than n
                # forward passes when there are fewer states than parameters)
                fx, vjp = jax.vjp(f, x, p)
                jx, jp = jax.vmap(vjp)(jnp.eye(n_x, dtype=x.dtype))
                if tree:
                    s_x, s_p = sens
                    ds_p = jax.tree_util.tree_map(
                        lambda s, j: jnp.tensordot(jx, s, axes=1) + j, s_p, jp)
                    return fx, (jx @ s_x, ds_p)
                # J_x S as a broadcast product and sum: fuses with the rest (a dot here
                # costs a separate kernel per stage; case 001: 2.7 instead of 5 ms)
                ds = jnp.sum(jx[:, :, None] * sens[None], axis=1) + jnp.concatenate(
                    [jnp.zeros((n_x, n_x), x.dtype), jp], 1)
                return fx, ds
            e = jnp.eye(n_p, n, n_x, dtype=x.dtype)
            fx, ds = jax.vmap(lambda sx, sp: jax.jvp(f, (x, p), (sx, sp)),
                              in_axes=(1, 1), out_axes=(None, 1))(sens, e)
            return fx, ds

        aug_term = diffrax.ODETerm(aug)

        # these solves are never differentiated by JAX: plain while loops
        lax_solver = _diffrax_solver(opts.solver, scan_kind="lax")
        lax_loop = diffrax.ForwardMode()

        def s0_of(x0, p):
            if tree:
                return (jnp.eye(n_x, dtype=x0.dtype), jax.tree_util.tree_map(
                    lambda a: jnp.zeros((n_x,) + a.shape, x0.dtype), p))
            return jnp.eye(n_x, n, dtype=x0.dtype)

        def plain_one(x0, p, arrays, outs_template, t0, t1, ts):
            event = steady(lambda t, x, a: [(field_p(t, x, *a), x)], t1, ts)
            sol = diffeqsolve(
                plain_term, lax_solver, t0, t1, None, x0, (p, arrays, outs_template),
                saveat=save(ts), stepsize_controller=controller, max_steps=opts.max_steps,
                adjoint=lax_loop, throw=False, event=event)
            return sol.ys[0], sol.ys[1][-1], ok_of(sol)

        def sens_one(x0, p, arrays, outs_template, t0, t1, ts):
            s0 = s0_of(x0, p)

            def rates(t, y, a):   # states and sensitivities must both settle (AMICI)
                fx, ds = aug(t, y, a)
                # S is one matrix, or one block per network array for large networks
                return [(fx, y[0])] + list(zip(jax.tree_util.tree_leaves(ds),
                                               jax.tree_util.tree_leaves(y[1])))

            sol = diffeqsolve(
                aug_term, lax_solver, t0, t1, None, (x0, s0), (p, arrays, outs_template),
                saveat=save(ts), stepsize_controller=controller, max_steps=opts.max_steps,
                adjoint=lax_loop, throw=False, event=steady(rates, t1, ts))
            return sol.ys[0], first(sol.ys[1]), ok_of(sol)

        def grad_one(x0, p, arrays, outs_template, t0, t1, ts, ct_ys, ct_end, s_ts, s1):
            """Cotangents of ``x0`` and ``p`` from the forward sensitivities."""
            if tree:
                (sx_ts, sp_ts), (sx1, sp1) = s_ts, s1
                g_p = jax.tree_util.tree_map(
                    lambda a, b: (jnp.tensordot(ct_ys, a, axes=((0, 1), (0, 1)))
                                  + jnp.tensordot(ct_end, b, axes=1)), sp_ts, sp1)
                return jnp.einsum("ti,tij->j", ct_ys, sx_ts) + ct_end @ sx1, g_p
            g = jnp.einsum("ti,tij->j", ct_ys, s_ts) + ct_end @ s1
            return g[:n_x], g[n_x:]

        if not self.steady_state:
            # Under jax.vmap over starts (lanes with common times), all lanes are solved
            # as one system (_solve_lanes), and the gradient comes from reverse mode
            # through that solve instead of forward sensitivities: their cost grows
            # with lanes x parameters, reverse mode's with lanes only (case 001, 16
            # starts: see benchmarks/FIGURES.md).  Unbatched calls are unchanged.
            def plain_lanes(mask, x0, p, arrays, outs_template, t0, t1, ts):
                return _solve_lanes(lambda t, x, a: field_p(t, x, *a), mask,
                                    (x0, p, arrays, outs_template), (t0, t1, ts),
                                    solver=lax_solver, adjoint=lax_loop, save=save,
                                    ok_of=ok_of, options=opts)

            reverse_solver = _diffrax_solver(opts.solver)
            reverse_adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=opts.checkpoints)

            def reverse_lanes(mask, x0, p, arrays, outs_template, t0, t1, ts, ct_ys, ct_end):
                # p as its arrays (not one sliced vector): the cotangents of the arrays
                # then need no pad-and-add into the whole vector at every stage
                p_tree = p if tree else jax.vmap(as_tree)(p)

                def f(x0, p_tree):
                    saved, end, _ = _solve_lanes(
                        lambda t, x, a: field_p(t, x, *a, p_is_tree=True), mask,
                        (x0, p_tree, arrays, outs_template), (t0, t1, ts),
                        solver=reverse_solver, adjoint=reverse_adjoint, save=save,
                        ok_of=ok_of, options=opts)
                    return saved, end

                g_x0, g_p = jax.vjp(f, x0, p_tree)[1]((ct_ys, ct_end))
                if not tree:
                    g_p = jnp.concatenate([leaf.reshape(leaf.shape[0], -1) for leaf in
                                           jax.tree_util.tree_leaves(g_p)], axis=1)
                return g_x0, g_p

            s0_template = s0_of(jnp.zeros((n_x,)), as_tree(jnp.zeros((n_p,))) if tree else None)

            def no_sensitivities(out, args):
                """Lanes' (ys, y1, ok) as sens_one's output, S never read (zeros, not
                batched): the gradient of lanes comes from reverse_lanes."""
                ys, y1, ok = out
                n_t = args[6].shape[0]
                s_ts = jax.tree_util.tree_map(lambda a: jnp.zeros((n_t,) + a.shape, a.dtype),
                                              s0_template)
                s1 = jax.tree_util.tree_map(jnp.zeros_like, s0_template)
                batched = jax.tree_util.tree_map(lambda _: False, s_ts)
                return (((ys, s_ts), (y1, s1), ok),
                        ((True, batched), (True, jax.tree_util.tree_map(lambda _: False, s1)),
                         True))

            plain_one = _vmap_as_lanes(plain_one, plain_lanes)
            sens_one = _vmap_as_lanes(sens_one, plain_lanes, finish=no_sensitivities)
            # S is not an argument of the lanes' gradient: it is dropped (args[:9])
            grad_one = _vmap_as_lanes(grad_one, reverse_lanes, always=(0, 1, 7, 8),
                                      keep=9)

        @jax.custom_vjp
        def core(x0, p, arrays, outs_template, t0, t1, ts):
            return plain_one(x0, p, arrays, outs_template, t0, t1, ts)

        def core_fwd(x0, p, arrays, outs_template, t0, t1, ts):
            (ys, s_ts), (y1, s1), ok = sens_one(x0, p, arrays, outs_template, t0, t1, ts)
            out = (ys, y1, ok)
            return out, (s_ts, s1, x0, p, arrays, outs_template, t0, t1, ts)

        def core_bwd(res, cts):
            s_ts, s1, x0, p, arrays, outs_template, t0, t1, ts = res
            ct_ys, ct_end, _ = cts
            zeros = jax.tree_util.tree_map(jnp.zeros_like, (arrays, outs_template, t0, t1, ts))
            g_x0, g_p = grad_one(x0, p, arrays, outs_template, t0, t1, ts, ct_ys, ct_end,
                                 s_ts, s1)
            return (g_x0, g_p, *zeros)

        core.defvjp(core_fwd, core_bwd)

        def solve(x0, theta, outs, arrays, t0, t1, ts):
            template = [jnp.zeros_like(o) for o in outs]
            return core(x0, parameters(theta, outs), arrays, template, t0, t1, ts)

        return solve

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
            if self.sensitivity == "reverse" and self.options.summed_weight_cotangents:
                # the gradient of a sum over experiments: weight cotangents may be
                # summed over each batch as they are made (see the option)
                from petab_sciml.backends.jax.ops import batch_summed_weight_cotangents

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
        from petab_sciml.backends.jax.devices import closure_conversion_inside_shard_map

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
        transfers it in C++: 0.1-0.3 ms less per call than ``jax.device_put`` in Python,
        a quarter of a one-experiment objective of the 5-state problem), above that
        through ``jax.device_put``, which takes a 64-byte aligned float64 array (what
        ``plan.pack`` returns) without copying it on the CPU (``jnp.asarray`` always
        copies: 34 MB for a 4.2M-parameter network, and slow right after a large
        solve); ``w`` must not change during the call."""
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


def _stochastic(network) -> bool:
    """Whether a network behaves differently in training mode (dropout, batch norm)."""
    from petab_sciml.catalogue import LAYERS

    for layer in network.layers.values():
        spec = LAYERS.get(layer.type)
        if spec is not None and (spec.stochastic or spec.type.startswith("BatchNorm")):
            return True
    return any("dropout" in str(n.target) for n in network.nodes)


def _jvp_all(f, z, basis):
    """Value (and aux) once, plus the directional derivative along every basis vector:
    forward-mode gradient of a scalar function."""
    import jax

    def one(v):
        (value, out), (tangent, _) = jax.jvp(f, (z,), (v,))
        return tangent, out

    tangents, out = jax.vmap(one, out_axes=(0, None))(basis)
    return tangents, out


def _symbol_picker(exprs, groups):
    """``f(t, *arrays) -> values`` of ``exprs`` when each is a plain symbol of one of
    ``groups`` (a network input mapped to states or parameters, the common case), else
    None.  The values are then read with one slice or gather of the argument instead of
    the compiled formulas' element-wise reads and stack: under ``jax.vmap`` over
    experiments those become a concatenation and a transpose before the network's first
    product (and pads of every element in the gradient), at every Runge-Kutta stage."""
    import jax.numpy as jnp

    if not exprs or not all(getattr(e, "is_Symbol", False) for e in exprs):
        return None
    where = {name: (g, i) for g, group in enumerate(groups) for i, name in enumerate(group)}
    found = [where.get(e.name) for e in exprs]
    if any(f is None for f in found) or len({g for g, _ in found}) != 1:
        return None
    g = found[0][0]
    index = np.array([i for _, i in found], np.int64)
    if np.array_equal(index, np.arange(index[0], index[0] + index.size)):
        start, stop = int(index[0]), int(index[0] + index.size)

        def contiguous(t, *arrays):
            return arrays[g][..., start:stop]

        return contiguous

    def gathered(t, *arrays):
        return jnp.take(arrays[g], index, axis=-1)

    return gathered


def _map(fn, args, n):
    """``jax.vmap(fn)(*args)``, or a plain call when there is one item: a batched
    ``while_loop`` (diffrax under vmap) costs selects on every step."""
    import jax

    if n == 1:
        out = fn(*jax.tree_util.tree_map(lambda a: a[0], args))
        return jax.tree_util.tree_map(lambda a: a[None], out)
    return jax.vmap(fn)(*args)


def _overrides(jnp, theta, index, values):
    """Placeholder values per measurement: ``theta[m, index]`` where index >= 0, else
    the number."""
    if index.shape[1] == 0:
        return jnp.zeros((theta.shape[0], 0), theta.dtype)
    picked = jnp.take_along_axis(theta, jnp.maximum(index, 0), axis=1)
    return jnp.where(index >= 0, picked, values)


# ---------------------------------------------------------------------- batches of starts
def _vmap_as_lanes(one, solve_lanes, *, always=(0,), keep=None, finish=None):
    """``one(x0, p, arrays, outs_template, t0, t1, ts, ...)`` (one start), whose batching
    rule (``jax.vmap`` over starts) solves all lanes as one system:
    ``solve_lanes(mask, *args[:keep])``, ``mask[i]``: argument ``i`` has a leading lane
    axis (``always``: these always do).  ``finish(out, args)`` turns the lanes' output
    into ``(output of one, batched flags)``.  Lanes with their own times (``t0``, ``t1``,
    ``ts`` batched, e.g. experiments) are a plain ``jax.vmap`` of ``one`` (each lane its
    own steps)."""
    import jax
    from jax.custom_batching import custom_vmap

    fn = custom_vmap(one)

    @fn.def_vmap
    def rule(axis_size, in_batched, *args):
        if any(_batched(b) for b in in_batched[4:7]):
            return _plain_vmap(one, in_batched, args)
        out = _batch_lanes(solve_lanes, None, axis_size, in_batched[:keep], args[:keep],
                           always)
        if finish is not None:
            return finish(out, args)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return fn


def _batched(flags) -> bool:
    import jax

    return any(jax.tree_util.tree_leaves(flags))


def _plain_vmap(fn, in_batched, args):
    import jax

    axes = tuple(jax.tree_util.tree_map(lambda b: 0 if b else None, b) for b in in_batched)
    out = jax.vmap(fn, in_axes=axes)(*args)
    return out, jax.tree_util.tree_map(lambda _: True, out)


def _lanes_fn(solve_lanes, mask, always):
    """``solve_lanes`` for one ``mask``, batching into more lanes under a further vmap."""
    import functools

    import jax
    from jax.custom_batching import custom_vmap

    impl = functools.partial(solve_lanes, mask)
    fn = custom_vmap(impl)

    @fn.def_vmap
    def rule(axis_size, in_batched, *args):
        if any(_batched(b) for b in in_batched[4:7]):
            return _plain_vmap(impl, in_batched, args)
        out = _batch_lanes(solve_lanes, mask, axis_size, in_batched, args, always)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return fn


def _batch_lanes(solve_lanes, mask, axis_size, in_batched, args, always):
    """Batch axis (``axis_size``) and lane axis (``args[i]`` has one where ``mask[i]``;
    ``mask`` None: one lane) merged into one lane axis, index ``batch * lanes + lane``;
    returns the lanes' output with the batch axis first."""
    import jax
    import jax.numpy as jnp

    tree_map, leaves = jax.tree_util.tree_map, jax.tree_util.tree_leaves
    if mask is None:
        mask, lanes = (False,) * len(args), 1
    else:
        lanes = next(leaf.shape[1] if b else leaf.shape[0]
                     for arg, bs, m in zip(args, in_batched, mask) if m
                     for leaf, b in zip(leaves(arg), leaves(bs)))
    total = axis_size * lanes

    def merge(leaf, b, m):
        if b and m:
            return leaf.reshape((total,) + leaf.shape[2:])
        if b:      # a batch axis, no lane axis
            return jnp.repeat(leaf, lanes, axis=0) if lanes > 1 else leaf
        if m:      # a lane axis, no batch axis
            return jnp.tile(leaf, (axis_size,) + (1,) * (leaf.ndim - 1))
        return jnp.broadcast_to(leaf, (total,) + leaf.shape)

    merged, new_mask = [], []
    for i, (arg, bs, m) in enumerate(zip(args, in_batched, mask)):
        if 4 <= i < 7 or not (_batched(bs) or m or i in always):
            merged.append(arg)
            new_mask.append(False)
        else:
            merged.append(tree_map(lambda leaf, b, m=m: merge(leaf, b, m), arg, bs))
            new_mask.append(True)
    out = _lanes_fn(solve_lanes, tuple(new_mask), always)(*merged)
    if lanes == 1 and not any(mask):
        return out
    return tree_map(lambda leaf: leaf.reshape((axis_size, lanes) + leaf.shape[1:]), out)


def _solve_lanes(term_one, mask, lane_args, times, *, solver, adjoint, save, ok_of, options):
    """A batch of starts solved as one ODE system of stacked states (lanes).

    ``term_one(t, x, (p, arrays, outs_template))`` is one lane's right-hand side;
    ``lane_args = (x0, p, arrays, outs_template)`` with a leading lane axis where
    ``mask`` (``x0`` always); ``times = (t0, t1, ts)`` common to all lanes.  Returns
    ``(x at ts, x at t1, ok)`` per lane (lane axis first).

    One step-size controller serves all lanes: its error norm is the largest of the
    lanes' own RMS norms (each the norm an unbatched solve uses), so every lane's local
    error stays within ``rtol``/``atol``; lanes differ from their unbatched solves within
    the solver's tolerance, not bit for bit.  (Under a plain ``jax.vmap`` each lane keeps
    its own step size, but XLA on CPU then copies the Runge-Kutta stage buffer of the
    whole batch at every stage and selects over every loop variable: 16 starts cost
    20-40x one.)  A lane whose error is not finite (its solution blew up) no longer
    steers the steps; it is reported not ``ok``.
    """
    import diffrax
    import jax
    import jax.numpy as jnp

    from petab_sciml.backends.jax.stage_sums import diffeqsolve

    axes = tuple(0 if m else None for m in mask[:4])
    x0, p, arrays, outs_template = lane_args
    lanes = x0.shape[0]

    def field(t, x, a):
        return jax.vmap(lambda x_, *a_: term_one(t, x_, a_), in_axes=(0,) + axes[1:],
                        axis_size=lanes)(x, *a)

    def lane_norm(tree):
        parts = jax.tree_util.tree_leaves(tree)
        squares = sum(jnp.sum(jnp.reshape(v, (lanes, -1)) ** 2, axis=1) for v in parts)
        rms = jnp.sqrt(squares / sum(v[0].size for v in parts))
        return jnp.max(jnp.where(jnp.isfinite(rms), rms, 0.0))

    controller = step_controller(options, norm=lane_norm)
    t0, t1, ts = times
    sol = diffeqsolve(
        diffrax.ODETerm(field), solver, t0, t1, None, x0, (p, arrays, outs_template),
        saveat=save(ts), stepsize_controller=controller, max_steps=options.max_steps,
        adjoint=adjoint, throw=False)
    saved = jnp.moveaxis(sol.ys[0], 0, 1)
    end = sol.ys[1][-1]
    finite = jnp.all(jnp.isfinite(saved), axis=(1, 2)) & jnp.all(jnp.isfinite(end), axis=1)
    return saved, end, ok_of(sol) & finite

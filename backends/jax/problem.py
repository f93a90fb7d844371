"""The whole PEtab SciML problem as an equinox Module: the native trainable model in JAX.

``ProblemModel`` is a pytree whose array leaves are what a training loop updates:

* ``mech``: the estimated mechanistic parameters (``parameter_ids`` order) on their
  ``parameterScale`` (``lin``: the value, ``log``: its natural log, ``log10``);
* ``nets``: ``{net: {layer: {array: value}}}``, every trainable array of every network in
  PyTorch layout (frozen arrays and elements included, so a network is always whole).

Everything else (the compiled simulation, data, nominal values, masks, bounds) is static.
:func:`loss` is pure: ``loss(model, key=None, train=False) -> (value, aux)`` with
``value`` the negative log-posterior and ``aux`` the log-likelihood, the log-prior, the
simulations (measurement-table order) and ``ok``.  It works under ``eqx.filter_jit``,
``eqx.filter_value_and_grad``, ``jax.vmap`` over a batch of models (:func:`stack`) and
with any optax optimizer.

* **Frozen values** (``estimate`` false, at any level down to single elements) are read
  from the problem's nominal values, never from the model, so their gradient is exactly 0
  and no optimizer step moves the loss through them; :func:`project` also resets them in
  the model.
* **Bounds** are honoured by projection after each step (:func:`project`): every value is
  clipped to its bounds (mechanistic ones on their scale). The PyTorch module does the
  same (``TorchProblem.project_``).
* **Dropout column**: in training mode (``train=True``, with an explicit PRNG ``key``) one
  keep-mask per targeted array is drawn per evaluation and applied to the network's
  arrays for every network call of that evaluation; never in eval mode.  Dropout layers
  inside networks use the same key (one mask per network per evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.simulation.plan import SimulationError, SimulationPlan
from petab_sciml.simulation.scales import scale_codes, to_scale


def unscale(values: jax.Array, codes: np.ndarray) -> jax.Array:
    """Values on their scale -> linear values.  Only the entries on a log scale are
    transformed (no ``where`` over both branches: an overflowing unused branch would
    poison the gradient)."""
    out = values
    for code, fn in ((1, jnp.exp), (2, lambda v: 10.0 ** v)):
        idx = np.flatnonzero(codes == code)
        if idx.size:
            out = out.at[..., idx].set(fn(values[..., idx]))
    return out


@dataclass(eq=False)
class ProblemSpec:
    """The static part of a :class:`ProblemModel` (hashed by identity)."""

    plan: SimulationPlan
    executor: Any
    """The :class:`~petab_sciml.backends.jax.simulation.JaxExecutor`."""
    scale_codes: np.ndarray
    mech_lower: np.ndarray
    """Bounds of ``mech`` on its scale."""
    mech_upper: np.ndarray
    w0: np.ndarray
    free: np.ndarray
    """Boolean mask over ``w``: estimated entries."""
    dropout: dict[str, list[Any]]
    """Dropout-column targets per network id."""

    @property
    def parameter_ids(self) -> tuple[str, ...]:
        return self.plan.mech_ids


class ProblemModel(eqx.Module):
    """The problem's estimated values (see the module docstring); call :func:`loss`."""

    mech: jax.Array
    nets: dict[str, dict[str, dict[str, jax.Array]]]
    spec: ProblemSpec = eqx.field(static=True)

    @property
    def parameter_ids(self) -> tuple[str, ...]:
        """Ids of ``mech``'s entries (parameter-table order)."""
        return self.spec.parameter_ids

    def __call__(self, *, key: jax.Array | None = None, train: bool = False):
        return loss(self, key=key, train=train)

    def values(self) -> dict[str, Any]:
        """``{"mech": linear values, "nets": {...}}`` (numpy float64): :func:`parameters`."""
        return parameters(self)


# --------------------------------------------------------------------------- building
def problem_model(problem: Any, params: Any = None, **options: Any) -> ProblemModel:
    """The native model of a loaded problem (``load_problem(...)``), at its nominal values
    or at ``params`` (``{"mech": linear values, "nets": {...}}``, as
    ``Simulator.parameters()``).  ``options`` are the JAX simulation options (``solver``,
    ``rtol``, ``atol``, ``max_steps``, ``sensitivity``)."""
    from petab_sciml.backends.jax.simulation import JaxExecutor, JaxOptions
    from petab_sciml.problem.dropout import dropout_targets
    from petab_sciml.simulation import build_plan

    plan = getattr(problem, "plan", None) or build_plan(problem.data)
    opts = JaxOptions(**options)
    if opts.sensitivity == "forward-ad":
        raise SimulationError("sensitivity='forward-ad' computes gradients in the executor; "
                              "the native model is differentiated by jax.grad: use auto, "
                              "forward, reverse or adjoint")
    executor = JaxExecutor(plan, opts)
    scales = plan.mech_scale or ("lin",) * plan.n_mech
    dropout = {}
    for net in plan.networks:
        spec = problem.parameters[net.id].dropout if net.id in problem.parameters else {}
        dropout[net.id] = dropout_targets(net.network, spec)
    spec = ProblemSpec(plan, executor, scale_codes(scales),
                       to_scale(plan.mech_lower, scales), to_scale(plan.mech_upper, scales),
                       plan.w0.copy(), plan.free_mask(), dropout)
    w = plan.w0 if params is None else plan.pack(params)
    return from_vector(spec, w)


def from_vector(spec: ProblemSpec, w: np.ndarray) -> ProblemModel:
    """A model holding the linear parameter vector ``w`` (``plan.pack`` layout)."""
    plan = spec.plan
    scales = plan.mech_scale or ("lin",) * plan.n_mech
    mech = jnp.asarray(to_scale(np.asarray(w[: plan.n_mech]), scales), jnp.float64)
    nets: dict[str, dict[str, dict[str, jax.Array]]] = {}
    for net in plan.networks:
        layers: dict[str, dict[str, jax.Array]] = {}
        for s in net.arrays:
            if s.ir_trainable:
                layers.setdefault(s.layer, {})[s.array] = jnp.asarray(
                    np.asarray(w[s.offset: s.offset + s.size], np.float64).reshape(s.shape))
        nets[net.id] = layers
    return ProblemModel(mech, nets, spec)


def vector(model: ProblemModel, *, key: jax.Array | None = None,
           train: bool = False) -> jax.Array:
    """The linear parameter vector ``w`` the simulation reads: ``mech`` unscaled, every
    network array, frozen entries and buffers at their nominal values, and (training mode)
    the dropout column applied."""
    spec = model.spec
    plan = spec.plan
    parts = [unscale(model.mech, spec.scale_codes).reshape(-1)]
    keys = _keys(key, len(plan.networks)) if train else None
    for j, net in enumerate(plan.networks):
        arrays = model.nets.get(net.id, {})
        if train and spec.dropout[net.id]:
            from petab_sciml.backends.jax.parameter_dropout import dropout_parameters

            if key is None:
                raise SimulationError(f"network {net.id!r} has a dropout column: training "
                                      "mode needs a PRNG key (loss(model, key=..., "
                                      "train=True))")
            arrays = dropout_parameters(arrays, spec.dropout[net.id], key=keys[j])
        for s in net.arrays:
            if s.ir_trainable:
                parts.append(jnp.asarray(arrays[s.layer][s.array], jnp.float64).reshape(-1))
            else:
                parts.append(jnp.asarray(spec.w0[s.offset: s.offset + s.size]))
    w = jnp.concatenate(parts) if parts else jnp.zeros((0,), jnp.float64)
    # frozen entries: nominal values, so that nothing flows through them
    return _nominal_where_frozen(w, spec.free, spec.w0)


def _nominal_where_frozen(values: jax.Array, free: np.ndarray, nominal: np.ndarray
                          ) -> jax.Array:
    """``values`` with the entries where ``free`` is False set to ``nominal`` (no gradient
    through them).  Only the frozen entries become constants of the traced program: the
    free mask and the nominal values of a large network are never embedded (XLA compile
    time grows with the constants' size)."""
    frozen = np.flatnonzero(~free)
    if frozen.size == 0:
        return values
    if frozen.size == free.size:
        return jnp.broadcast_to(jnp.asarray(nominal), values.shape)
    return values.at[..., frozen].set(jnp.asarray(nominal[frozen]))


def _clip(value: jax.Array, lower: np.ndarray, upper: np.ndarray, free: np.ndarray
          ) -> jax.Array:
    """``clip(value, lower, upper)`` at the ``free`` entries of the trailing (flat) axis
    (the others are reset afterwards).  Bounds shared by every free entry are scalars;
    otherwise only the bounded entries are clipped, so constants stay as small as the
    bounds that vary."""
    lo = np.where(free, lower, -np.inf)
    hi = np.where(free, upper, np.inf)
    bounded = np.isfinite(lo) | np.isfinite(hi)
    if not bounded.any():
        return value
    if np.all(lower[free] == lower[free][0]) and np.all(upper[free] == upper[free][0]):
        return jnp.clip(value, lower[free][0], upper[free][0])
    idx = np.flatnonzero(bounded)
    return value.at[..., idx].set(jnp.clip(value[..., idx], lo[idx], hi[idx]))


def _keys(key: jax.Array | None, n: int):
    if key is None:
        return [None] * n
    return list(jax.random.split(key, n + 1))[1:]


# --------------------------------------------------------------------------- the loss
def loss(model: ProblemModel, *, key: jax.Array | None = None, train: bool = False):
    """``(negative log-posterior, aux)``; ``aux`` has ``llh``, ``logprior``,
    ``simulations`` (measurement-table order) and ``ok`` (all solves succeeded; the value
    is ``inf`` otherwise).  Pure; jit, grad and vmap it."""
    spec = model.spec
    executor = spec.executor
    w = vector(model, key=key, train=train)
    net_key = None
    if train and key is not None:
        net_key = jax.random.split(key, 1)[0] if key is not None else None
    out = executor.evaluate(w, jnp.asarray(spec.plan.theta0), executor.data, train=train,
                            key=net_key)
    aux = {k: out[k] for k in ("llh", "logprior", "simulations", "ok")}
    return out["value"], aux


# --------------------------------------------------------------------------- utilities
def project(model: ProblemModel) -> ProblemModel:
    """Bounds after a step: every value clipped to its bounds (``mech`` on its scale),
    frozen elements reset to their nominal values.  Works on a stacked batch too."""
    spec = model.spec
    plan = spec.plan
    mech = jnp.clip(model.mech, spec.mech_lower, spec.mech_upper)
    nets = {}
    for net in plan.networks:
        layers = {}
        for s in net.arrays:
            if not s.ir_trainable:
                continue
            sl = slice(s.offset, s.offset + s.size)
            value = model.nets[net.id][s.layer][s.array]
            free = spec.free[sl]
            if free.any():
                # on the flat array; constants only for bounds that vary and for frozen
                # elements (see vector)
                flat = value.reshape(value.shape[: value.ndim - len(s.shape)] + (-1,))
                flat = _clip(flat, plan.w_lower[sl], plan.w_upper[sl], free)
                flat = _nominal_where_frozen(flat, free, spec.w0[sl])
                value = flat.reshape(value.shape)
            else:
                value = jnp.broadcast_to(jnp.asarray(spec.w0[sl].reshape(s.shape)),
                                         value.shape)
            layers.setdefault(s.layer, {})[s.array] = value
        nets[net.id] = layers
    return ProblemModel(mech, nets, spec)


def stack(models: list[ProblemModel]) -> ProblemModel:
    """A batch of models (one leading axis on every leaf) for ``jax.vmap``."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *models)


def parameters(model: ProblemModel) -> dict[str, Any]:
    """``{"mech": linear values, "nets": {net: {layer: {array: ndarray}}}}`` (numpy,
    float64): the exchange format of ``Simulator`` and ``Problem.save``.  Frozen entries
    are the nominal values."""
    spec = model.spec
    w = np.asarray(jax.device_get(vector(model)), np.float64)
    return spec.plan.unpack(w)


def trainable_mask(model: ProblemModel) -> ProblemModel:
    """A model-shaped pytree of booleans: True where a value is estimated (e.g. for
    ``optax.masked`` with element-wise updates, or to inspect what trains)."""
    spec = model.spec
    plan = spec.plan
    nets = {}
    for net in plan.networks:
        layers = {}
        for s in net.arrays:
            if s.ir_trainable:
                layers.setdefault(s.layer, {})[s.array] = jnp.asarray(
                    spec.free[s.offset: s.offset + s.size].reshape(s.shape))
        nets[net.id] = layers
    return ProblemModel(jnp.ones(model.mech.shape[-1:], bool), nets, spec)

"""Experiments: their initial-condition groups, their periods one after another, and
batches of experiments solved together.

Experiments with the same number of periods are solved together with ``jax.vmap``
(measurement times padded to a common length; padded points are never read);
``batch_experiments=False`` solves them one after another (``lax.map``).  With several
JAX devices, large batches are split into one share per device (:mod:`.devices`).
Pre-initialization networks run once per initial-condition group, before the solves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from petab_sciml.simulation.plan import SimulationPlan

from .conditions import ChangeValues
from .networks import BoundNetworks, NetArrays
from .period import PeriodSolve


def largest_batch(plan: SimulationPlan) -> int:
    """The most experiments solved together in one batch (same number of periods)."""
    by_periods: dict[int, int] = {}
    for exp in plan.experiments:
        by_periods[len(exp.periods)] = by_periods.get(len(exp.periods), 0) + 1
    return max(by_periods.values(), default=1)


def map_batch(fn: Callable[..., Any], args: tuple, n: int) -> Any:
    """``jax.vmap(fn)(*args)``, or a plain call when there is one item: a batched
    ``while_loop`` (diffrax under vmap) costs selects on every step."""
    if n == 1:
        out = fn(*jax.tree_util.tree_map(lambda a: a[0], args))
        return jax.tree_util.tree_map(lambda a: a[None], out)
    return jax.vmap(fn)(*args)


@dataclass
class GroupValues:
    """What each initial-condition group fixes before its experiments' solves."""

    theta: Any
    """``(G, n_theta)``: parameters after the first period's changes."""
    pre: list[Any]
    """Per pre-initialization network (:attr:`pre_ids` order): ``(G, n_outputs)``."""
    pre_ids: list[int]
    """The pre-initialization networks."""
    arrays: list[dict[str, Any]]
    """Per network: its array inputs by argument, ``(G, ...)`` each."""


def group_values(plan: SimulationPlan, networks: BoundNetworks, theta_base: Any,
                 nets: NetArrays, data: dict[str, Any], change: ChangeValues | None,
                 empty_outs: Callable[[], list[Any]], dtype: Any, key: Any = None
                 ) -> GroupValues:
    """First-period parameter changes and pre-initialization networks of every
    initial-condition group (vmapped over groups); ``theta_base``: parameters before
    changes; ``change``: condition change values (None: no changes); ``empty_outs()``:
    zero outputs of every network; ``dtype``: of the states; ``key``: PRNG key of
    training mode (None: eval mode)."""
    import jax.numpy as jnp

    zeros_x = jnp.zeros((len(plan.state_ids),), dtype)
    G = len(plan.groups_conditions)
    arrays_g = [{inp.arg: data[f"arr_{j}_{inp.arg}"] for inp in net.inputs
                 if inp.kind == "array"} for j, net in enumerate(plan.networks)]

    def group_fn(t0, tgt, src, arrays):
        outs = empty_outs()
        theta = theta_base
        if change is not None:
            vals = change(t0, zeros_x, theta_base, outs, src)
            theta = theta_base.at[tgt].set(vals, mode="drop")
        for j, net in enumerate(plan.networks):
            if net.pre_initialization:
                outs[j] = networks.outputs(j, t0, zeros_x, theta, outs, arrays, nets, key=key)
        return theta, [outs[j] for j, net in enumerate(plan.networks)
                       if net.pre_initialization]

    pre_ids = [j for j, net in enumerate(plan.networks) if net.pre_initialization]
    if G:
        theta_g, pre_g = map_batch(group_fn, (data["g_t0"], data["g_th_tgt"],
                                              data["g_th_src"], arrays_g), G)
    else:  # pragma: no cover - no measurements
        theta_g = jnp.zeros((0, theta_base.size))
        pre_g = [jnp.zeros((0, n.n_outputs)) for n in plan.networks]
    return GroupValues(theta_g, pre_g, pre_ids, arrays_g)


def experiment_solver(n_periods: int, groups: GroupValues, x0: Callable[..., Any],
                      change: ChangeValues | None, solve: PeriodSolve,
                      empty_outs: Callable[[], list[Any]], events: Any = None
                      ) -> Callable[..., Any]:
    """``experiment(start, end, ts, th_t, th_s, st_t, st_s, group, t_inf=None) ->
    (x at ts per period, theta per period, ok)`` for an experiment of ``n_periods``
    periods (the ``b{b}_*`` arrays of :mod:`.data_layout`, one experiment's rows):
    initial states ``x0(t0, theta, *outs)``, then per period its condition changes and
    its solve; with ``t_inf``, points at ``t = inf`` read the period's end state.
    ``events`` (:class:`.events.Events`): the SBML events, fired at each period's start
    after its changes (``solve`` fires those inside the period)."""
    import jax.numpy as jnp

    def experiment(start, end, ts, th_t, th_s, st_t, st_s, group, t_inf=None):
        theta = groups.theta[group]
        outs = empty_outs()
        for i, j in enumerate(groups.pre_ids):
            outs[j] = groups.pre[i][group]
        arrays = [{k: v[group] for k, v in a.items()} for a in groups.arrays]
        t0 = start[0]
        x = x0(t0, theta, *outs)
        if change is not None:
            vals = change(t0, x, theta, outs, st_s[0])
            x = x.at[st_t[0]].set(vals, mode="drop")
        ys, thetas, oks = [], [], []
        before = None if events is None else jnp.asarray(events.initial)
        for k in range(n_periods):
            if k > 0 and change is not None:
                vals = change(start[k], x, theta, outs, jnp.concatenate([th_s[k], st_s[k]]))
                n_th = th_s.shape[1]
                theta = theta.at[th_t[k]].set(vals[:n_th], mode="drop")
                x = x.at[st_t[k]].set(vals[n_th:], mode="drop")
            if events is not None:
                x = events.fire_at_start(start[k], x, theta, outs, before)
            y, x, good = solve(x, theta, outs, arrays, start[k], end[k], ts[k])
            if events is not None:
                before = events.status(end[k], x, theta, outs, left=True)
            if t_inf is not None:   # steady-state measurements: the end state
                y = jnp.where(t_inf[k][:, None], x[None, :], y)
            ys.append(y)
            thetas.append(theta)
            oks.append(good)
        return jnp.stack(ys), jnp.stack(thetas), jnp.all(jnp.stack(oks))

    return experiment


def batch_arrays(data: dict[str, Any], b: int, steady_state: bool) -> tuple:
    """The arguments of :func:`experiment_solver`'s function for batch ``b``, with a
    leading experiment axis."""
    batch = tuple(data[f"b{b}_{name}"] for name in
                  ("start", "end", "ts", "th_tgt", "th_src", "st_tgt", "st_src", "group"))
    if steady_state:
        batch = (*batch, data[f"b{b}_tinf"])
    return batch


def solve_batch(experiment: Callable[..., Any], batch: tuple, n: int, *,
                batched: bool, devices: list[Any] | None) -> Any:
    """``experiment`` over the ``n`` experiments of ``batch``: one batched solve
    (``batched``), split into one share per device when ``devices`` (a list of at least
    two) is given, or one experiment after another (``lax.map``)."""
    from .devices import sharded_map

    if batched and devices is not None:
        return sharded_map(experiment, batch, n, devices)
    if batched:
        return map_batch(experiment, batch, n)
    return jax.lax.map(lambda a: experiment(*a), batch)

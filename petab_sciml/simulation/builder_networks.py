"""Plan-building steps for the networks: each network's plan (inputs as formulas or
array data, mapped outputs), the order networks run in, and where simulation networks
run (see :class:`~petab_sciml.simulation.builder.PlanBuilder`).

Each step reads the builder's state and returns what it found; it raises
:class:`~petab_sciml.simulation.plan.SimulationError` (through ``builder.fail``) naming
the network or entity it cannot simulate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from petab_sciml.simulation.plan import NetworkInput, NetworkPlan

if TYPE_CHECKING:
    from petab_sciml.simulation.builder import PlanBuilder

ArrayInputs = dict[tuple[str, int], str]
"""(network id, input argument) -> the id of the array-file input that fills it."""


# --------------------------------------------------------------------------- network plans
def network_plans(b: PlanBuilder) -> tuple[dict[str, NetworkPlan], ArrayInputs]:
    """Every network's plan (no array slots yet; array inputs without data yet), in
    the problem's network order, and which array-file input fills which argument."""
    array_inputs: ArrayInputs = {}
    plans = {net_id: _network_plan(b, net_id, array_inputs) for net_id in b.net_ids}
    return plans, array_inputs


def _network_plan(b: PlanBuilder, net_id: str, array_inputs: ArrayInputs) -> NetworkPlan:
    network = b.ctx.networks[net_id]
    entry = b.cfg.networks.get(net_id)
    pre = bool(entry.pre_initialization) if entry is not None else False
    per_arg: dict[int, list[tuple[str, Any]]] = {}
    for pid, ref in b.input_refs.items():
        if ref.net == net_id:
            per_arg.setdefault(ref.arg, []).append((pid, ref))
    inputs: list[NetworkInput] = []
    exprs: list[sympy.Expr] = []
    for k in range(len(network.inputs)):
        items = per_arg.get(k, [])
        if not items:
            b.fail(f"input argument {k} ({network.inputs[k]!r}) of network "
                   f"{net_id!r} is assigned nowhere", entry=f"network {net_id}")
        if any(ref.index is None for _, ref in items):
            inp = _whole_input(b, net_id, k, items, len(exprs), array_inputs)
        else:
            inp = _element_input(b, net_id, k, items, len(exprs))
        inputs.append(inp)
        exprs.extend(inp.exprs)
    outs = sorted(((pid, ref) for pid, ref in b.output_refs.items() if ref.net == net_id),
                  key=lambda item: (item[1].arg, item[1].index or ()))
    return NetworkPlan(
        net_id, network, pre, inputs, tuple(pid for pid, _ in outs),
        tuple((ref.arg if ref.arg is not None else 0,
               tuple(ref.index) if ref.index is not None else None) for _, ref in outs),
        [], tuple(exprs))


def _whole_input(b: PlanBuilder, net_id: str, k: int, items: list[tuple[str, Any]],
                 start: int, array_inputs: ArrayInputs) -> NetworkInput:
    """Input argument ``k`` assigned as a whole: from an array file (recorded in
    ``array_inputs``), else one formula (hybridization table or parameter id)."""
    pid, ref = next((pid, ref) for pid, ref in items if ref.index is None)
    if len(items) > 1:
        b.fail(f"input argument {k} of network {net_id!r} is assigned "
               "both as a whole and by elements", entry=pid)
    value = b.hyb.get(pid, (None, None))[0]
    if (value is None or value.lower() == "array") and pid in b.ctx.arrays.inputs:
        array_inputs[(net_id, k)] = pid
        return NetworkInput(k, "array", (), data=None)
    if value is not None and value.lower() == "array":
        b.fail(f"{pid!r} is assigned 'array' but no array file holds inputs/{pid}",
               entry=pid)
    expr = _input_expr(b, pid, value)
    return NetworkInput(k, "elements", (1,), (expr,), start)


def _element_input(b: PlanBuilder, net_id: str, k: int, items: list[tuple[str, Any]],
                   start: int) -> NetworkInput:
    """Input argument ``k`` assigned element by element: every element a formula."""
    ndim = {len(ref.index) for _, ref in items}
    if len(ndim) != 1:
        b.fail(f"elements of input argument {k} of network {net_id!r} are "
               "indexed with different numbers of indices", entry=items[0][0])
    shape = tuple(max(ref.index[d] for _, ref in items) + 1 for d in range(ndim.pop()))
    cells: dict[tuple[int, ...], sympy.Expr] = {}
    for pid, ref in items:
        value = b.hyb.get(pid, (None, None))[0]
        if value is not None and value.lower() == "array":
            b.fail(f"{pid!r} maps to elements of an input; 'array' assigns "
                   "whole input arguments only", entry=pid)
        cells[tuple(ref.index)] = _input_expr(b, pid, value)
    if len(cells) != math.prod(shape):
        b.fail(f"input argument {k} of network {net_id!r}: {len(cells)} of "
               f"{math.prod(shape)} elements of shape {shape} are assigned",
               entry=f"network {net_id}")
    flat = [cells[idx] for idx in np.ndindex(*shape)]
    return NetworkInput(k, "elements", shape, tuple(flat), start)


def _input_expr(b: PlanBuilder, pid: str, value: str | None) -> sympy.Expr:
    """The formula of network input ``pid``: its hybridization value, else the ``theta``
    entry of that id (a parameter or a condition target)."""
    if value is not None and value != "":
        return b.parse(value, f"hybridization: {pid}")
    if pid in b.theta_index:
        return sympy.Symbol(pid)
    b.fail(f"network input {pid!r} gets no value (hybridization, condition or "
           "parameter table, array file)", entry=pid)
    raise AssertionError  # pragma: no cover


# --------------------------------------------------------------------------- roles
def check_network_roles(b: PlanBuilder) -> list[str]:
    """The order networks run in (pre-initialization networks first, each after the
    networks it reads); marks which simulation networks run inside the right-hand side
    and which at the measurement points, and checks that no formula reads a network
    output where it is not available.  Raises for what cannot be simulated."""
    plans, out_net = b.net_plans, b.output_net
    deps = {n: _networks_read(plans[n].input_exprs, out_net) for n in plans}
    ordered = _network_order(b, deps)
    _check_pre_initialization(b, ordered, deps)
    sim = {n for n in plans if not plans[n].pre_initialization}
    obs = b.observables
    rhs = _closure(_networks_read(b.model.rhs(), out_net), plans, out_net) & sim
    # observables read network outputs directly or through model entities the
    # hybridization table assigns them to (``gamma = net1_gamma``)
    at_points = _closure(_networks_read([b.model.expand(e) for e in
                                         obs.obs_exprs + obs.noise_exprs], out_net),
                         plans, out_net) & sim
    for n in rhs:
        plans[n].in_rhs = True
    for n in at_points:
        plans[n].in_observables = True
    if _networks_read(b.model.initial_values(), out_net) & sim:
        b.fail("initial values depend on a simulation network's outputs; use a "
               "pre-initialization network")
    if _networks_read(b.change_exprs, out_net) & sim:
        b.fail("condition values may not use simulation networks' outputs")
    _check_first_period_changes(b)
    return ordered


def _networks_read(exprs: Iterable[sympy.Expr], out_net: Mapping[str, str]) -> set[str]:
    """The networks whose outputs ``exprs`` use."""
    return {out_net[s.name] for e in exprs for s in e.free_symbols if s.name in out_net}


def _closure(nets: set[str], plans: Mapping[str, NetworkPlan],
             out_net: Mapping[str, str]) -> set[str]:
    """``nets`` and every network whose outputs their inputs use, transitively."""
    todo, seen = list(nets), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(_networks_read(plans[n].input_exprs, out_net) - seen)
    return seen


def _network_order(b: PlanBuilder, deps: Mapping[str, set[str]]) -> list[str]:
    """Pre-initialization networks first, each network after the networks it reads,
    else the problem's order; raises on a cycle."""
    plans = b.net_plans
    ordered: list[str] = []
    pending = sorted(plans, key=lambda n: (not plans[n].pre_initialization,
                                           b.net_ids.index(n)))
    while pending:
        for n in pending:
            if deps[n] <= set(ordered):
                ordered.append(n)
                pending.remove(n)
                break
        else:
            b.fail("networks read each other's outputs in a cycle: " + ", ".join(pending))
    return ordered


def _check_pre_initialization(b: PlanBuilder, ordered: list[str],
                              deps: Mapping[str, set[str]]) -> None:
    """Pre-initialization networks read neither states, time nor simulation networks."""
    from petab_sciml.expressions import TIME

    plans = b.net_plans
    states = set(b.state_ids)
    for n in ordered:
        plan = plans[n]
        if plan.pre_initialization:
            bad = {plans[d].id for d in deps[n] if not plans[d].pre_initialization}
            dyn = {s.name for e in plan.input_exprs for s in e.free_symbols} & \
                (states | {TIME.name})
            if bad or dyn:
                b.fail(f"pre-initialization network {n!r} has inputs that depend on "
                       f"{', '.join(sorted(bad | dyn))}", entry=f"network {n}")


def _check_first_period_changes(b: PlanBuilder) -> None:
    """First-period parameter changes are evaluated before the initial state and the
    pre-initialization networks exist: they may not read states or network outputs."""
    states = set(b.state_ids)
    first = {c for e in b.experiments for c in e.periods[0].conditions}
    for cid, items in b.condition_changes.items():
        if cid not in first:
            continue
        for kind, _, k in items:
            used = {s.name for s in b.change_exprs[k].free_symbols}
            if kind == "theta" and used & (states | set(b.output_net)):
                b.fail(f"condition {cid!r} starts an experiment and sets a parameter "
                       "from a state or network output value, which is not supported")

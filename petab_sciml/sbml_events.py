"""SBML events: the supported subset, read into plain data.

An event here is a trigger ``lhs > rhs`` (or ``>=``, ``<``, ``<=``) of states,
parameters and time, and assignments to states that are executed at the instant the
trigger goes from false to true (SBML semantics without delay: the assignments' values
are computed from the state just before the event, ``useValuesFromTriggerTime`` and
``persistent`` make no difference).

What the importer does for events (:func:`read_events`):

* a constant parameter or compartment that an event assigns becomes a state with
  ``d/dt = 0``, so that the simulation carries its value across the event;
* an event that changes a compartment's size keeps the amount of every species in it
  that is given in concentration (and not assigned by the same event): ``[S]`` becomes
  ``[S] * V_before / V_after``, as SBML prescribes;
* the event's ``initialValue`` is kept: with ``initialValue="false"`` a trigger true at
  the initial time fires there.

Refused at load with the event named: delays, triggers that are not one comparison
(``and``, ``or``, ``==``), priorities that are not numbers, and assignments to ids that
are not species, compartments or parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
from sympy.core.relational import Relational

SUPPORTED_RELATIONS = (">", ">=", "<", "<=")


@dataclass(frozen=True)
class SbmlEvent:
    """One SBML event (raw expressions: they may use rule and reaction symbols)."""

    id: str
    trigger: Relational
    """``lhs op rhs`` with ``op`` one of :data:`SUPPORTED_RELATIONS`."""
    assignments: tuple[tuple[str, sympy.Expr], ...]
    """``(target id, value)`` in document order, compartment rescalings appended."""
    initial_value: bool
    priority: float | None = None

    @property
    def root(self) -> tuple[sympy.Expr, bool]:
        """``(g, strict)``: the trigger is true where ``g > 0`` (``strict``) or
        ``g >= 0``."""
        t = self.trigger
        if t.rel_op in (">", ">="):
            return t.lhs - t.rhs, t.rel_op == ">"
        return t.rhs - t.lhs, t.rel_op == "<"


def event_targets(model: Any) -> set[str]:
    """The ids that some event of the libsbml ``model`` assigns."""
    return {ea.getVariable() for ev in model.getListOfEvents()
            for ea in ev.getListOfEventAssignments()}


def read_events(importer: Any, species: dict[str, Any], state_kinds: dict[str, str]
                ) -> tuple[SbmlEvent, ...]:
    """Every event of the importer's model, or an error naming the first one outside
    the supported subset; ``species``: ``id -> SpeciesInfo``; ``state_kinds``: the
    model's states (every event target must be one)."""
    events = []
    for i, ev in enumerate(importer.m.getListOfEvents()):
        eid = ev.getId() or f"#{i + 1}"
        where = f"event {eid!r}"
        if ev.isSetDelay():
            importer.fail("events with a delay are not supported", where)
        trigger_node = ev.getTrigger()
        if trigger_node is None or trigger_node.getMath() is None:
            importer.fail("the event has no trigger", where, unsupported=False)
        trigger = importer.math(trigger_node.getMath(), f"{where} trigger")
        if not isinstance(trigger, Relational) or trigger.rel_op not in SUPPORTED_RELATIONS:
            importer.fail(f"trigger {trigger} is not one comparison (<, <=, >, >=) of two "
                          "expressions; only such triggers are supported", where)
        priority = None
        if ev.isSetPriority() and ev.getPriority().getMath() is not None:
            value = importer.math(ev.getPriority().getMath(), f"{where} priority")
            if not value.is_number:
                importer.fail(f"priority {value} is not a number; only constant "
                              "priorities are supported", where)
            priority = float(value)
        assignments: list[tuple[str, sympy.Expr]] = []
        for ea in ev.getListOfEventAssignments():
            target = ea.getVariable()
            if target not in state_kinds:
                importer.fail(f"assigns {target!r}, which is not a species, compartment or "
                              "parameter of the model (or is set by a rule)", where)
            assignments.append((target, importer.math(ea.getMath(),
                                                      f"{where} eventAssignment {target!r}")))
        assignments += _amounts_kept(dict(assignments), species, state_kinds)
        initial_value = (bool(trigger_node.getInitialValue())
                         if trigger_node.isSetInitialValue() else True)
        events.append(SbmlEvent(eid, trigger, tuple(assignments), initial_value, priority))
    # simultaneous events run in decreasing priority (document order among equals)
    order = sorted(range(len(events)), key=lambda k: (-(events[k].priority or 0.0), k))
    return tuple(events[k] for k in order)


def _amounts_kept(assigned: dict[str, sympy.Expr], species: dict[str, Any],
                  state_kinds: dict[str, str]) -> list[tuple[str, sympy.Expr]]:
    """The rescaling of concentration species in compartments whose size the event
    assigns: ``[S] * V_before / V_after`` (every value from before the event)."""
    out = []
    for sid, info in species.items():
        if (state_kinds.get(sid) == "species" and not info.has_only_substance_units
                and info.compartment in assigned and sid not in assigned):
            volume = sympy.Symbol(info.compartment)
            out.append((sid, sympy.Symbol(sid) * volume / assigned[info.compartment]))
    return out

"""The units an SBML model declares, as text for axis labels.

:func:`declared_units` reads the model's time unit and, for every species, compartment
and parameter whose unit the model declares, the unit of its symbol: a parameter's or
compartment's ``units``; a species' substance unit, divided by its compartment's unit
unless it has only substance units (then the symbol is an amount).  A unit is shown by
its unit definition's name, else its id (SBML base units by their kind, e.g.
``second``).  Nothing is inferred: an entity without a declared unit has none here.
"""

from __future__ import annotations

import os
from typing import Any

from petab_sciml.errors import require


def declared_units(path: str | os.PathLike) -> tuple[str | None, dict[str, str]]:
    """``(time unit or None, {entity id: unit})`` of the SBML model file ``path``."""
    libsbml = require("libsbml", "sbml")
    doc = libsbml.readSBMLFromFile(str(path))
    model = doc.getModel()
    if model is None:
        return None, {}
    names = {ud.getId(): ud.getName() or ud.getId()
             for ud in model.getListOfUnitDefinitions()}

    def shown(unit: str) -> str | None:
        return names.get(unit, unit) if unit else None

    units: dict[str, str] = {}
    compartments = {}
    for c in model.getListOfCompartments():
        compartments[c.getId()] = shown(c.getUnits()) if c.isSetUnits() else None
        if compartments[c.getId()]:
            units[c.getId()] = compartments[c.getId()]
    for p in model.getListOfParameters():
        if p.isSetUnits() and shown(p.getUnits()):
            units[p.getId()] = shown(p.getUnits())
    default_substance = shown(model.getSubstanceUnits()) if model.isSetSubstanceUnits() \
        else None
    for s in model.getListOfSpecies():
        substance = shown(s.getSubstanceUnits()) if s.isSetSubstanceUnits() \
            else default_substance
        if not substance:
            continue
        if s.getHasOnlySubstanceUnits():
            units[s.getId()] = substance
        elif compartments.get(s.getCompartment()):
            units[s.getId()] = f"{substance}/{compartments[s.getCompartment()]}"
    time = shown(model.getTimeUnits()) if model.isSetTimeUnits() else None
    return time, units


def observable_units(plan: Any, units: dict[str, str]) -> dict[str, str]:
    """The unit of each observable of ``plan`` whose formula is one model entity with a
    declared unit (``units`` from :func:`declared_units`)."""
    out = {}
    for oid, expr in zip(plan.observable_ids, plan.obs_exprs):
        if getattr(expr, "is_Symbol", False) and expr.name in units:
            out[oid] = units[expr.name]
    return out

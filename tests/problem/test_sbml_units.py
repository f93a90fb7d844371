"""Units an SBML model declares, read for axis labels (``petab_sciml.sbml_units``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import sympy

libsbml = pytest.importorskip("libsbml")

from petab_sciml.sbml_units import declared_units, observable_units  # noqa: E402


def _model(path):
    doc = libsbml.SBMLDocument(3, 2)
    model = doc.createModel()
    hour = model.createUnitDefinition()
    hour.setId("hour_unit")
    hour.setName("hour")
    unit = hour.createUnit()
    unit.setKind(libsbml.UNIT_KIND_SECOND)
    unit.setExponent(1)
    unit.setScale(0)
    unit.setMultiplier(3600)
    model.setTimeUnits("hour_unit")
    c = model.createCompartment()
    c.setId("cell")
    c.setConstant(True)
    c.setSize(1.0)
    c.setUnits("litre")
    for sid, only_substance, substance in (("X", False, "mole"), ("Y", True, "mole"),
                                           ("Z", False, "")):
        s = model.createSpecies()
        s.setId(sid)
        s.setCompartment("cell")
        s.setHasOnlySubstanceUnits(only_substance)
        s.setBoundaryCondition(False)
        s.setConstant(False)
        if substance:
            s.setSubstanceUnits(substance)
    for pid, units in (("k", "hour_unit"), ("q", "")):
        p = model.createParameter()
        p.setId(pid)
        p.setConstant(True)
        if units:
            p.setUnits(units)
    libsbml.writeSBMLToFile(doc, str(path))


def test_declared_units_name_each_entity_with_one(tmp_path):
    _model(tmp_path / "m.xml")
    time, units = declared_units(tmp_path / "m.xml")
    assert time == "hour"
    assert units == {"cell": "litre", "X": "mole/litre", "Y": "mole", "k": "hour"}


def test_observables_that_are_one_entity_take_its_unit():
    plan = SimpleNamespace(observable_ids=("x_obs", "sum_obs", "q_obs"),
                           obs_exprs=(sympy.Symbol("X"), sympy.Symbol("X") + 1,
                                      sympy.Symbol("q")))
    assert observable_units(plan, {"X": "mole/litre"}) == {"x_obs": "mole/litre"}

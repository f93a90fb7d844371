"""The few facts about an SBML model the validator needs (ids of species, parameters,
compartments, reactions), read with the standard XML parser; no libsbml needed."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ModelInfo:
    species: set[str] = field(default_factory=set)
    parameters: set[str] = field(default_factory=set)
    compartments: set[str] = field(default_factory=set)
    reactions: set[str] = field(default_factory=set)
    other: set[str] = field(default_factory=set)
    """Ids of rules' variables, functions, species references and the like."""

    @property
    def entities(self) -> set[str]:
        return self.species | self.parameters | self.compartments | self.reactions | self.other


_KIND = {"species": "species", "parameter": "parameters", "compartment": "compartments",
         "reaction": "reactions", "functionDefinition": "other",
         "speciesReference": "other", "localParameter": "other", "event": "other"}


class ModelError(Exception):
    pass


def read_sbml_ids(path: Path) -> ModelInfo:
    """Ids in an SBML file; raises :class:`ModelError` with a one-line reason."""
    info = ModelInfo()
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise ModelError("file not found") from None
    except (ET.ParseError, OSError) as exc:
        raise ModelError(f"not readable XML: {exc}") from None
    if _local(root.tag) != "sbml":
        raise ModelError(f"not an SBML file (root element {_local(root.tag)!r})")
    model = next((c for c in root if _local(c.tag) == "model"), None)
    if model is None:
        raise ModelError("the SBML file has no model element")
    for el in model.iter():
        tag = _local(el.tag)
        ident = el.get("id")
        if tag in _KIND and ident and tag != "localParameter":
            getattr(info, _KIND[tag]).add(ident)
    return info


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]

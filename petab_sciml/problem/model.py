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
    duplicates: dict[str, int] = field(default_factory=dict)
    """Ids of the SId namespace used by more than one element, with their counts."""

    @property
    def entities(self) -> set[str]:
        return self.species | self.parameters | self.compartments | self.reactions | self.other


_KIND = {"species": "species", "parameter": "parameters", "compartment": "compartments",
         "reaction": "reactions", "functionDefinition": "other",
         "speciesReference": "other", "localParameter": "other", "event": "other"}


class ModelError(Exception):
    """The model cannot be read; ``code`` is the issue code to report."""

    def __init__(self, message: str, code: str = "MODEL_INVALID"):
        super().__init__(message)
        self.code = code


# Elements whose ids live outside the model-wide SId namespace.
_OWN_NAMESPACE = {"unitDefinition", "unit", "localParameter"}


def read_sbml_ids(path: Path) -> ModelInfo:
    """Ids in an SBML file (a regular file within ``max_file_bytes``); raises
    :class:`ModelError` with a one-line reason."""
    from petab_sciml.errors import InputFileError, LimitError
    from petab_sciml.safe_read import read_bytes

    info = ModelInfo()
    try:
        root = ET.fromstring(read_bytes(path, what="an SBML model file"))
    except (InputFileError, LimitError) as exc:
        code = exc.code if exc.code != "FILE_NOT_FOUND" else "MODEL_INVALID"
        raise ModelError(exc.message, code or "MODEL_INVALID") from None
    except ET.ParseError as exc:
        raise ModelError(f"not readable XML: {exc}") from None
    if _local(root.tag) != "sbml":
        raise ModelError(f"not an SBML file (root element {_local(root.tag)!r})")
    model = next((c for c in root if _local(c.tag) == "model"), None)
    if model is None:
        raise ModelError("the SBML file has no model element")
    counts: dict[str, int] = {}
    stack = list(model)
    while stack:   # not recursive: a deeply nested file cannot exhaust the stack
        el = stack.pop()
        tag = _local(el.tag)
        if tag in ("annotation", "notes"):
            continue  # free-form XML, outside the SBML id namespace
        stack.extend(el)
        ident = el.get("id")
        if tag in _KIND and ident and tag != "localParameter":
            getattr(info, _KIND[tag]).add(ident)
        if ident and tag not in _OWN_NAMESPACE:
            counts[ident] = counts.get(ident, 0) + 1
    info.duplicates = {i: n for i, n in counts.items() if n > 1}
    return info


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]

"""Validation issues and the catalogue of rules the validator checks.

Every check the validator runs reports :class:`Issue` objects with a code from
:data:`RULES`.  ``docs/validation.md`` lists the same table; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import IntEnum
from typing import Any


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Rule:
    """One rule: its code, default severity, where it comes from, and what it says.

    ``source`` is ``sciml`` (a MUST of the PEtab SciML specification), ``petab`` (a rule of
    PEtab v2 that the SciML extension builds on), ``ext`` (our dropout column) or ``tool``
    (advice from this tool, not a rule of any specification).
    """

    code: str
    severity: Severity
    source: str
    text: str


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

_RULE_LIST = [
    # ---------------------------------------------------------------- problem YAML
    Rule("YAML_UNREADABLE", _E, "petab", "The problem YAML file exists, parses as YAML and is "
         "a mapping."),
    Rule("YAML_FORMAT_VERSION", _E, "petab", "`format_version` is a PEtab 2.x version."),
    Rule("YAML_FIELD_INVALID", _E, "petab", "File lists (`*_files`) are lists of file names; "
         "`model_files` maps model ids to `location` and `language`; required lists "
         "(`parameter_files`, `observable_files`, `measurement_files`, `model_files`) are "
         "present."),
    Rule("FILE_NOT_FOUND", _E, "petab", "Every file the problem names exists."),
    Rule("LEGACY_LAYOUT", _E, "petab", "The problem is in the current format, not an older "
         "draft (a `problems:` list, `parameter_file`, `simulationConditionId` or "
         "`preequilibrationConditionId` in measurements, a condition table with one column "
         "per target; a missing extension `version` is named with these). Reported once, "
         "before every other issue; `petab-sciml upgrade` rewrites such a problem."),
    Rule("FILE_NOT_REGULAR", _E, "tool", "Every file the problem names (and the problem YAML "
         "itself) is a regular file: not a folder (except NNEF model folders), device, FIFO "
         "or socket."),
    Rule("FILE_OUTSIDE_PROBLEM", _W, "tool", "Files the problem names lie inside the "
         "problem's folder (a path that leaves it, `../x` or absolute, makes the problem "
         "read files elsewhere)."),
    Rule("FILE_OUTSIDE_CONFINED", _E, "tool", "With `--confine` (`confine=True`), every file "
         "the problem names, and every file read through it (the members of an NNEF "
         "folder), lies inside the problem's folder once symlinks are resolved; a file "
         "outside is refused before it is opened."),
    Rule("EXT_NEURAL_NETWORKS_MISSING", _E, "sciml", "The extension's `neural_networks`, "
         "when given, is a mapping of network ids (`neural_nets` is accepted as an older "
         "spelling). A problem without the extension, or with it and no network, is a "
         "plain PEtab v2 problem."),
    Rule("EXT_HYBRIDIZATION_FILES_MISSING", _E, "sciml", "An extension with networks lists "
         "its `hybridization_files`."),
    Rule("EXT_VERSION_MISSING", _E, "petab", "The extension section states the extension's "
         "`version` (a string; PEtab v2 requires it of every extension)."),
    Rule("EXT_LEGACY_SPELLING", _I, "tool", "An older spelling (`neural_nets`, `static`) was "
         "accepted."),
    Rule("NN_ID_INVALID", _E, "sciml", "Each network id is a valid identifier (letters, digits, "
         "underscores, not starting with a digit)."),
    Rule("NN_ID_AS_PETAB_ID", _E, "sciml", "A network id is not a PEtab identifier: it is not "
         "used as a parameter id, mapping `petabEntityId`, condition or hybridization target, "
         "and no model entity has the same id."),
    Rule("NN_LOCATION_MISSING", _E, "sciml", "Each network has a `location` string."),
    Rule("NN_FORMAT_MISSING", _E, "sciml", "Each network has a `format` string."),
    Rule("NN_FORMAT_UNKNOWN", _E, "sciml", "The network format is one the specification or an "
         "installed format plugin knows (case-insensitive). Formats the specification knows "
         "but no plugin reads (e.g. `lux.jl`) give a warning: the network cannot be checked."),
    Rule("NN_PRE_INITIALIZATION_MISSING", _E, "sciml", "Each network has a boolean "
         "`pre_initialization` (the hybridization type; older `static` accepted)."),
    Rule("NN_FILE_INVALID", _E, "sciml", "The network file loads through its format plugin and "
         "is a valid network (layers, forward graph)."),
    Rule("NN_CODE_NOT_RUN", _W, "tool", "The network format runs code when loaded "
         "(`torchscript`, `pytorch`); without trust the validator does not load it, so checks "
         "that need the network (layers, arrays, indices) are skipped for it."),
    Rule("NN_MODEL_ID_MISMATCH", _W, "tool", "The id inside the network file equals the "
         "network id in the problem YAML."),
    Rule("NN_UNUSED", _W, "tool", "Every network is referenced in the mapping table."),
    # ---------------------------------------------------------------- array files
    Rule("ARRAY_FILE_INVALID", _E, "sciml", "Each array file is an HDF5 file with the PEtab "
         "SciML layout (`metadata`, `inputs/<inputId>/<conditions>`, "
         "`parameters/<netId>/<layerId>/<arrayId>`)."),
    Rule("ARRAY_FILE_REPEATED", _W, "tool", "An array file listed twice in `array_files` is "
         "read once."),
    Rule("ARRAY_GROUP_IGNORED", _I, "tool", "Top-level entries other than `metadata`, "
         "`inputs`, `parameters` (and the test suite's `outputs`) are allowed by the schema "
         "and ignored."),
    Rule("ARRAY_EXTERNAL_DATA", _E, "tool", "Array files hold their own data: no external "
         "links, datasets with external raw storage or virtual datasets (each reads other "
         "files)."),
    Rule("ARRAY_PYTORCH_FORMAT", _E, "sciml", "`metadata/pytorch_format` is present and a "
         "boolean scalar."),
    Rule("ARRAY_NOT_PYTORCH_FORMAT", _I, "tool", "`pytorch_format` false: the arrays follow "
         "the conventions of the network's format (specification, array data); for every "
         "format this tool reads those are PyTorch's, so the arrays are used as stored and "
         "their shapes checked as usual."),
    Rule("ARRAY_PARAMETERS_MISMATCH", _E, "sciml", "Parameter arrays in array files name "
         "existing layers and arrays of the network and have exactly its (PyTorch) shapes."),
    Rule("ARRAY_PARAMETERS_UNKNOWN_NETWORK", _E, "sciml", "Parameter groups "
         "`parameters/<netId>` in array files name networks of the problem."),
    Rule("ARRAY_DUPLICATE", _E, "sciml", "No parameter array or input is given by two array "
         "files."),
    Rule("ARRAY_INPUT_UNKNOWN", _W, "tool", "Every input id in an array file is a network input "
         "of the problem (a mapped input id or an input name of a network)."),
    Rule("ARRAY_INPUT_CONDITIONS_INCOMPLETE", _E, "sciml", "A condition-specific array input "
         "has a dataset for every initial condition (the first condition of each experiment)."),
    Rule("ARRAY_INPUT_GLOBAL_AND_CONDITIONS", _E, "sciml", "An array input has either one "
         "global dataset `0` or condition-specific datasets, not both."),
    Rule("ARRAY_INPUT_SHAPE_MISMATCH", _E, "sciml", "An array input has a shape the network "
         "input it feeds accepts (checked by shape inference through the network; skipped, "
         "with an info, for layers without a shape rule)."),
    # ---------------------------------------------------------------- tables (generic)
    Rule("TABLE_UNREADABLE", _E, "petab", "Each table is a readable tab-separated file with a "
         "header."),
    Rule("TABLE_COLUMNS_MISSING", _E, "petab", "Each table has its required columns."),
    Rule("TABLE_DUPLICATE_COLUMN", _E, "petab", "No column name appears twice in a table "
         "header."),
    Rule("TABLE_ROW_TOO_LONG", _E, "petab", "No row has more cells than the header has "
         "columns."),
    Rule("TABLE_ID_INVALID", _E, "petab", "Id columns hold valid PEtab ids."),
    Rule("TABLE_DUPLICATE_ID", _E, "petab", "Primary keys are unique (parameterId, "
         "observableId, petabEntityId, hybridization targetId)."),
    # ---------------------------------------------------------------- mapping table
    Rule("MAPPING_SYNTAX", _E, "sciml", "A `modelEntityId` that refers to a network follows "
         "`net.parameters[layer].array[i, ...]`, `net.inputs[k][i, ...]` or "
         "`net.outputs[k][i, ...]` without breaking the hierarchy."),
    Rule("MAPPING_UNKNOWN_NETWORK", _E, "sciml", "The network of a `modelEntityId` is one of "
         "the problem's networks."),
    Rule("MAPPING_UNKNOWN_LAYER", _E, "sciml", "A mapped layer exists and has parameters."),
    Rule("MAPPING_UNKNOWN_ARRAY", _E, "sciml", "A mapped array exists in its layer."),
    Rule("MAPPING_INDEX_OUT_OF_RANGE", _E, "sciml", "Parameter indices have at most as many "
         "entries as the array has dimensions and each lies in range."),
    Rule("MAPPING_INPUT_ARG_OUT_OF_RANGE", _E, "sciml", "An input argument index is below the "
         "number of network inputs."),
    Rule("MAPPING_OUTPUT_ARG_OUT_OF_RANGE", _E, "sciml", "An output argument index is below "
         "the number of network outputs."),
    Rule("MAPPING_INPUT_INDEX_OUT_OF_RANGE", _E, "sciml", "Element indices on a network input "
         "(`net.inputs[k][i, ...]`) lie within the shape the network accepts there."),
    Rule("MAPPING_OUTPUT_INDEX_OUT_OF_RANGE", _E, "sciml", "Element indices on a network "
         "output (`net.outputs[k][i, ...]`) lie within the output's shape (shape inference "
         "from the inputs' shapes)."),
    Rule("NN_SHAPES_UNCHECKED", _I, "tool", "The shapes of a network's inputs and outputs could "
         "not be inferred (a layer or function without a shape rule, or no input shape "
         "known), so element indices and array-input shapes are not checked for it."),
    Rule("MAPPING_ALIAS_OF_VALID_ID", _E, "petab", "A mapping row for a model entity (not a "
         "network entity) maps one whose id is not already a valid PEtab id: PEtab v2 does not "
         "allow aliasing valid ids."),
    Rule("MAPPING_DUPLICATE_TARGET", _W, "tool", "No two PEtab ids map to the same network "
         "entity."),
    # ---------------------------------------------------------------- hybridization
    Rule("HYB_TARGET_UNKNOWN", _E, "sciml", "A hybridization `targetId` is a mapped network "
         "input or a model entity (parameter or species)."),
    Rule("HYB_TARGET_DUPLICATE", _E, "sciml", "Each `targetId` is assigned once across the "
         "hybridization tables."),
    Rule("HYB_TARGET_ESTIMATED", _E, "sciml", "A hybridization `targetId` is a non-estimated "
         "entity (not a parameter with `estimate` true)."),
    Rule("HYB_TARGET_INVALID", _E, "sciml", "A target is a valid kind for its network's "
         "hybridization: outputs of simulation networks set model parameters; outputs of "
         "pre-initialization networks set parameters or species initial values; network "
         "outputs and parameters are never targets."),
    Rule("HYB_VALUE_MISSING", _E, "sciml", "Each row has a `targetValue`."),
    Rule("HYB_VALUE_UNKNOWN_SYMBOL", _E, "sciml", "Symbols in a `targetValue` are model "
         "entities, parameters, network outputs, or time."),
    Rule("HYB_VALUE_INVALID", _E, "sciml", "`array` is assigned only to whole network input "
         "arguments; pre-initialization inputs do not depend on species or time; network "
         "parameter ids are not used; a network output is not fed to another network output."),
    Rule("HYB_ARRAY_INPUT_MISSING", _E, "sciml", "An input assigned `array` has data in an "
         "array file."),
    Rule("HYB_CONDITION_CONFLICT", _E, "sciml", "No target (network input, parameter or "
         "species) is assigned both in the hybridization table and in the condition table "
         "(or, for inputs, an array file)."),
    # ---------------------------------------------------------------- inputs/outputs
    Rule("NN_INPUT_UNASSIGNED", _E, "sciml", "Every mapped network input gets a value "
         "(hybridization table, condition table, parameter table or array file)."),
    Rule("NN_INPUT_DYNAMIC_OUTSIDE_HYBRIDIZATION", _E, "sciml", "Inputs of simulation "
         "(dynamic) networks are assigned only in the hybridization table."),
    Rule("NN_INPUT_NON_INITIAL_CONDITION", _W, "sciml", "Inputs of pre-initialization networks "
         "assigned in a non-initial condition are ignored."),
    Rule("NN_OUTPUT_UNUSED", _W, "tool", "Every mapped network output is used (hybridization, "
         "observable or condition table)."),
    Rule("NN_PARAMETER_REFERENCED_OUTSIDE", _E, "sciml", "PEtab ids of network parameters are "
         "referenced only in the parameter table."),
    # ---------------------------------------------------------------- parameter table
    Rule("PARAM_ESTIMATE_INVALID", _E, "petab", "`estimate` is `true` or `false` (`1`/`0` "
         "accepted)."),
    Rule("PARAM_BOUNDS_INVALID", _E, "petab", "Bounds are numbers (`-inf`/`inf` allowed) "
         "with lower <= upper; estimated non-network parameters state both bounds; network "
         "parameters may leave them empty (`-inf`/`inf`). Finite bounds are required only "
         "where a prior needs them (`PARAM_PRIOR_IMPROPER`)."),
    Rule("PARAM_ID_MODEL_ENTITY", _E, "petab", "A `parameterId` is not a model entity other "
         "than a model parameter (no species, compartment, reaction, rule variable or "
         "species reference)."),
    Rule("PARAM_SCALE_INVALID", _E, "petab", "`parameterScale` is `lin`, `log` or `log10` (or "
         "empty: `lin`); network parameters are `lin`; a parameter estimated on `log`/`log10` "
         "scale has no negative bound."),
    Rule("PARAM_NOMINAL_INVALID", _E, "sciml", "A network parameter's `nominalValue` is "
         "`array`, a number, or empty; other parameters have numeric nominal values."),
    Rule("PARAM_NOMINAL_MISSING", _E, "sciml", "Non-estimated parameters have a nominal value."),
    Rule("PARAM_NOMINAL_OUT_OF_BOUNDS", _W, "tool", "A numeric nominal value of an estimated "
         "parameter lies within its bounds (advice: PEtab v2 has no such rule)."),
    Rule("PARAM_ARRAY_NOT_NETWORK", _E, "sciml", "`nominalValue` `array` is used only on rows "
         "mapped to network parameters."),
    Rule("PARAM_ARRAY_VALUES_MISSING", _E, "sciml", "Network parameters whose nominal value is "
         "`array` are present in an array file."),
    Rule("PARAM_ARRAY_FILE_IGNORED", _W, "tool", "Numbers in `nominalValue` do not hide every "
         "network parameter an array file holds: a number wins over the file (PEtab SciML), "
         "so such a file is not used at all; the warning names the file and the rows "
         "(numbers overriding part of a file that is used elsewhere are not reported)."),
    Rule("PARAM_NN_UNCOVERED", _E, "sciml", "Every trainable network parameter is covered by a "
         "parameter-table row (through the mapping table)."),
    Rule("PARAM_NN_AMBIGUOUS", _E, "sciml", "Two rows of the same specificity (network, "
         "layer, array, element) do not cover the same parameter: the more specific id wins, "
         "equal ones would be ambiguous."),
    Rule("PARAM_PRIOR_INVALID", _E, "petab", "`priorDistribution` is a known distribution and "
         "`priorParameters` has the right number of numbers."),
    Rule("PARAM_PRIOR_IMPROPER", _E, "sciml", "When any parameter has a prior, estimated "
         "parameters without one (implicitly uniform on their bounds) have finite bounds."),
    Rule("PARAM_DROPOUT_INVALID", _E, "ext", "`dropout` is empty or a number p with "
         "0 <= p < 1, only on rows mapped to whole networks, layers or arrays."),
    # ---------------------------------------------------------------- PEtab v2 core
    Rule("MODEL_INVALID", _E, "petab", "The problem has one model file, readable and "
         "consistent SBML (the checks libsbml runs when loading reads it)."),
    Rule("MODEL_UNSUPPORTED", _E, "tool", "The model uses only the SBML subset the simulators "
         "support (docs/sbml.md); loading refuses other constructs, naming the element."),
    Rule("SIMULATION_UNSUPPORTED", _E, "tool", "The simulation plan that loading builds can be "
         "built: no PEtab feature the simulators do not support (a first-period parameter "
         "change that reads a state, ...) and no inconsistency between the model and the "
         "tables."),
    Rule("FORMULA_INVALID", _E, "petab", "Formulas (observable and noise formulas, "
         "hybridization and condition values) are valid PEtab math (parsed as loading parses "
         "them, when the simulation plan is built)."),
    Rule("SIMULATION_NOT_CHECKED", _I, "tool", "libsbml or sympy is not installed, so the "
         "SBML consistency checks and the simulation plan that loading needs were not run."),
    Rule("MODEL_DUPLICATE_ID", _E, "petab", "Ids in the SBML model are unique (SBML's SId "
         "namespace)."),
    Rule("MEASUREMENT_OBSERVABLE_UNKNOWN", _E, "petab", "Measurements use defined observables."),
    Rule("MEASUREMENT_EXPERIMENT_UNKNOWN", _E, "petab", "Measurements use defined experiments."),
    Rule("MEASUREMENT_VALUE_INVALID", _E, "petab", "`measurement` is a finite number and "
         "`time` a number that is not NaN (`time` may be `inf`, not `-inf`); a measurement "
         "of a log-scale observable is > 0."),
    Rule("NOISE_VALUE_INVALID", _E, "petab", "Noise standard deviations (or scales) known "
         "before simulation are > 0: a numeric `noiseFormula`, and a numeric "
         "`noiseParameters` entry that is the whole noise formula of its observable."),
    Rule("EXPERIMENT_CONDITION_UNKNOWN", _E, "petab", "Experiment conditions are defined in a "
         "condition table (or, for array inputs, in an array file)."),
    Rule("EXPERIMENT_TIME_INVALID", _E, "petab", "Experiment period start times are numbers."),
    Rule("CONDITION_TARGET_UNKNOWN", _E, "petab", "Condition `targetId`s are model entities or "
         "network inputs."),
    Rule("EXPRESSION_INVALID", _E, "petab", "Math expressions (observable and noise formulas, "
         "condition and hybridization target values) follow the PEtab math grammar "
         "(operators, known functions with their numbers of arguments); `observableFormula` "
         "is not empty."),
    Rule("OBSERVABLE_UNKNOWN_SYMBOL", _E, "petab", "Observable and noise formulas use only "
         "defined symbols (model entities, parameters, network outputs, placeholders)."),
    Rule("LIBPETAB", _W, "tool", "A finding of libpetab-python's PEtab v2 (+ SciML) linter, "
         "shown beside ours with `--libpetab` on problems our checks accept; a second "
         "opinion that never decides validity."),
    # ---------------------------------------------------------------- budgets
    Rule("LIMIT_FILE_SIZE", _E, "tool", "A table, SBML model or other file read whole is at "
         "most `max_file_bytes` (256 MiB)."),
    Rule("LIMIT_YAML_SIZE", _E, "tool", "A YAML file (problem, network) is at most "
         "`max_yaml_bytes` (2 MiB)."),
    Rule("LIMIT_YAML_ALIASES", _E, "tool", "A YAML file has at most `max_yaml_nodes` "
         "(1,000,000) nodes once its aliases are expanded (no \"billion laughs\")."),
    Rule("LIMIT_YAML_DEPTH", _E, "tool", "YAML mappings and lists nest at most "
         "`max_yaml_depth` (100) deep."),
    Rule("LIMIT_ELEMENTS", _E, "tool", "A network declares at most `max_elements` "
         "(50,000,000) parameter scalars."),
    Rule("LIMIT_ARRAY_SHAPE", _E, "tool", "A dataset of an array file has at most "
         "`max_array_elements` (50,000,000) elements (by its declared shape)."),
    Rule("LIMIT_EXPRESSION_DEPTH", _E, "tool", "A math expression's tree is at most "
         "`max_expression_depth` (100) levels high."),
    Rule("LIMIT_EXPRESSION_SIZE", _E, "tool", "A math expression is at most "
         "`max_expression_chars` (100,000) characters long."),
    Rule("LIMIT_ARRAY_ENTRIES", _E, "tool", "An array file holds at most `max_array_entries` "
         "(10,000) groups and datasets."),
    Rule("LIMIT_CONSTANT_FOLDING", _E, "tool", "Folding the constants of an ONNX graph makes "
         "no value of more than `max_folded_elements` (10,000,000) elements."),
    Rule("LIMIT_ARCHIVE_MEMBER", _E, "tool", "A member of an NNEF `.tgz` archive is a "
         "regular file or folder of at most `max_archive_member_bytes` (256 MiB)."),
    Rule("INTERNAL_ERROR", _E, "tool", "A check failed unexpectedly; this is a bug in "
         "petab-sciml, please report it."),
]

RULES: dict[str, Rule] = {r.code: r for r in _RULE_LIST}

ROOT_CAUSES = frozenset({"LEGACY_LAYOUT"})
"""Codes whose issue explains many others: reports list them first."""


@dataclass(frozen=True)
class Issue:
    """One finding: severity, rule code, message and where it is.

    ``file`` is the file the issue is in (relative to the problem folder when inside it);
    ``row`` the 1-based line of a table (the header is line 1); ``column`` a table column;
    ``path`` a YAML path (``extensions.sciml.neural_networks.net1.format``) or an HDF5
    dataset path.
    """

    severity: Severity
    code: str
    message: str
    file: str | None = None
    row: int | None = None
    column: str | None = None
    path: str | None = None

    def location(self) -> str:
        parts = []
        if self.file:
            parts.append(self.file)
        if self.row is not None:
            parts.append(f"row {self.row}")
        if self.column:
            parts.append(f"column {self.column}")
        if self.path:
            parts.append(self.path)
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["severity"] = str(self.severity)
        return out

    def __str__(self) -> str:
        where = self.location()
        return f"{self.severity}: {self.code}: {where + ': ' if where else ''}{self.message}"


class IssueList(list):
    """A list of issues with helpers; ``add`` takes the severity from the rule."""

    def add(self, code: str, message: str, *, severity: Severity | None = None,
            **where: Any) -> Issue:
        if code not in RULES:  # pragma: no cover - programming error
            raise KeyError(code)
        issue = Issue(RULES[code].severity if severity is None else severity, code, message,
                      **where)
        self.append(issue)
        return issue

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self if i.severity == Severity.ERROR]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self if i.severity == Severity.WARNING]

    def sort_for_report(self) -> None:
        """Root causes first, then errors before warnings, then by file and row."""
        self.sort(key=lambda i: (i.code not in ROOT_CAUSES, -int(i.severity), i.file or "",
                                 i.row or 0))

    def codes(self) -> set[str]:
        return {i.code for i in self}

    @property
    def ok(self) -> bool:
        return not self.errors

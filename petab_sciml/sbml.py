"""SBML -> ODE: read an SBML model (python-libsbml) into a plain-data :class:`OdeModel`.

The result holds sympy expressions for the right-hand side ``dx/dt``, the initial values
and the assignment rules; :meth:`OdeModel.override` applies PEtab condition and
hybridization targets, :meth:`OdeModel.compile_rhs` and friends compile for JAX, PyTorch
or numpy through :mod:`petab_sciml.expressions`.

State units: every state has the units its *symbol* has in SBML math, which is what PEtab
formulas and condition targets refer to -- a species is a concentration unless it has
``hasOnlySubstanceUnits="true"`` (then an amount); reaction rates (substance/time) are
divided by the compartment size for concentration species.  See ``docs/sbml.md`` for the
supported subset.

Events are read as :mod:`petab_sciml.sbml_events` describes.  Unsupported constructs
(events with delays, algebraic rules, ``delay``, ``rateOf``, ``factorial``, fast
reactions, variable stoichiometry, required SBML packages, ...) raise
:class:`UnsupportedSbmlError` at load, naming the SBML element.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import sympy

from petab_sciml.errors import PetabSciMLError, require
from petab_sciml.expressions import (
    TIME,
    bool_to_number,
    compile_expressions,
    number_to_boolean,
    parse,
    sympy_number,
)
from petab_sciml.sbml_events import SbmlEvent, event_targets, read_events

__all__ = [
    "SbmlError",
    "UnsupportedSbmlError",
    "SpeciesInfo",
    "OdeModel",
    "load_sbml",
]


class SbmlError(PetabSciMLError):
    """The SBML model cannot be read or is inconsistent."""


class UnsupportedSbmlError(SbmlError):
    """The SBML model uses a construct outside the supported subset."""


@dataclass(frozen=True)
class SpeciesInfo:
    """What the ODE needs to know about one SBML species."""

    id: str
    compartment: str
    has_only_substance_units: bool
    boundary_condition: bool
    constant: bool

    @property
    def unit(self) -> str:
        """``"amount"`` or ``"concentration"``: the meaning of the species symbol."""
        return "amount" if self.has_only_substance_units else "concentration"


def _sym(name: str) -> sympy.Symbol:
    return sympy.Symbol(name)


@dataclass(frozen=True, eq=False)
class OdeModel:
    """An ODE model ``dx/dt = f(t, x, p)``, ``x(t0) = x0(p)`` as sympy expressions.

    Plain data; treat as immutable (methods return new models).  Ids are SBML ids, and
    every symbol of every expression is ``sympy.Symbol(id)``; time is
    :data:`petab_sciml.expressions.TIME` (``time``).

    Fields (the "raw" parts; use the methods for expanded expressions):

    ``state_ids``
        The ODE states in order: species without assignment rule (document order), then
        compartments and parameters with rate rules.
    ``state_kinds``
        ``id -> "species" | "compartment" | "parameter"``.
    ``species``
        ``id -> SpeciesInfo`` for every species (states and rule targets).
    ``parameters``
        Constant SBML parameters (no rule, no initial assignment) with their values
        (NaN where the SBML gives none), including promoted local parameters
        ``<reactionId>_<localId>``.
    ``compartments``
        Constant compartment sizes (default 1.0 where the SBML gives none).
    ``rates``
        ``state -> dx/dt`` before expansion (may use rule, reaction and derived symbols).
    ``initial``
        ``state -> initial value`` before expansion (may use any symbol; evaluated at t0).
    ``derived``
        Constants fixed by initial assignments (``id -> expression``).
    ``rules``
        Assignment rules ``id -> expression`` (also targets turned into rules by
        :meth:`override`), valid at all times including t0.
    ``fluxes``
        ``reaction id -> kinetic law`` (substance/time); a reaction id used in math is its
        rate.
    ``events``
        The SBML events (:mod:`petab_sciml.sbml_events`), in execution order for
        simultaneous ones.  Their targets are states.
    """

    model_id: str
    state_ids: tuple[str, ...]
    state_kinds: Mapping[str, str]
    species: Mapping[str, SpeciesInfo]
    parameters: Mapping[str, float]
    compartments: Mapping[str, float]
    rates: Mapping[str, sympy.Expr]
    initial: Mapping[str, sympy.Expr]
    derived: Mapping[str, sympy.Expr] = field(default_factory=dict)
    rules: Mapping[str, sympy.Expr] = field(default_factory=dict)
    fluxes: Mapping[str, sympy.Expr] = field(default_factory=dict)
    events: tuple[SbmlEvent, ...] = ()
    source: str | None = None

    # ----------------------------------------------------------------- ids and values

    @property
    def parameter_ids(self) -> tuple[str, ...]:
        return tuple(self.parameters)

    @property
    def compartment_ids(self) -> tuple[str, ...]:
        return tuple(self.compartments)

    @property
    def constant_ids(self) -> tuple[str, ...]:
        """Default order of the parameter vector ``p``: parameters, then compartments."""
        return tuple(self.parameters) + tuple(self.compartments)

    def constant_values(self, ids: Sequence[str] | None = None) -> np.ndarray:
        """Values of the constants (default order :attr:`constant_ids`) as float64."""
        values = {**self.parameters, **self.compartments}
        ids = self.constant_ids if ids is None else ids
        try:
            return np.array([values[i] for i in ids], dtype=np.float64)
        except KeyError as exc:
            raise SbmlError(f"{exc.args[0]!r} is not a constant of the model") from None

    def kind(self, entity_id: str) -> str | None:
        """What an id is: ``"state"``, ``"parameter"``, ``"compartment"``,
        ``"derived"``, ``"rule"``, ``"reaction"``, or ``None`` if unknown."""
        if entity_id in self.state_kinds:
            return "state"
        if entity_id in self.parameters:
            return "parameter"
        if entity_id in self.compartments:
            return "compartment"
        if entity_id in self.derived:
            return "derived"
        if entity_id in self.rules:
            return "rule"
        if entity_id in self.fluxes:
            return "reaction"
        return None

    # ------------------------------------------------------------------ expansions

    @cached_property
    def _t0(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Every defined symbol's value at t0, in constants (and time, externals)."""
        defs: dict[sympy.Symbol, sympy.Expr] = {}
        defs.update({_sym(k): v for k, v in self.rules.items()})
        defs.update({_sym(k): v for k, v in self.fluxes.items()})
        defs.update({_sym(k): v for k, v in self.derived.items()})
        defs.update({_sym(k): self.initial[k] for k in self.state_ids})
        resolved = _resolve(defs, "initial values", self.source)
        for d in self.derived:
            if TIME in resolved[_sym(d)].free_symbols:
                raise UnsupportedSbmlError(
                    "an initial assignment of a constant depends on time",
                    file=self.source,
                    entry=f"initialAssignment {d!r}",
                )
        return resolved

    @cached_property
    def _dynamic(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Rule, reaction and derived symbols in terms of states, constants and time."""
        derived = {_sym(d): self._t0[_sym(d)] for d in self.derived}
        defs: dict[sympy.Symbol, sympy.Expr] = {}
        defs.update({_sym(k): v.xreplace(derived) for k, v in self.rules.items()})
        defs.update({_sym(k): v.xreplace(derived) for k, v in self.fluxes.items()})
        resolved = _resolve(defs, "assignment rules", self.source)
        resolved.update(derived)
        return resolved

    def expand(self, expr: Any) -> sympy.Basic:
        """``expr`` (sympy, number or PEtab math string) with rule, reaction and derived
        symbols replaced: the result uses only states, constants, time and symbols the
        model does not define (e.g. network outputs)."""
        return parse(expr).xreplace(self._dynamic)

    def rhs(self) -> tuple[sympy.Expr, ...]:
        """``dx/dt`` per state (order :attr:`state_ids`), fully expanded."""
        return tuple(self.expand(self.rates[s]) for s in self.state_ids)

    def initial_values(self) -> tuple[sympy.Expr, ...]:
        """``x(t0)`` per state, in constants (and ``time`` = t0, and external symbols)."""
        return tuple(self._t0[_sym(s)] for s in self.state_ids)

    def assignments(self) -> dict[str, sympy.Expr]:
        """Expanded values of all non-state defined symbols (assignment-rule targets,
        reaction ids, derived constants): what observables may refer to."""
        return {s.name: e for s, e in self._dynamic.items()}

    def external_symbols(self) -> tuple[str, ...]:
        """Names the expanded model uses but does not define (e.g. network outputs or
        PEtab parameters introduced by :meth:`override`), sorted."""
        known = set(self.state_ids) | set(self.constant_ids) | {TIME.name}
        exprs = [*self.rhs(), *self.initial_values(), *self._dynamic.values()]
        return tuple(sorted({s.name for e in exprs for s in e.free_symbols} - known))

    # ------------------------------------------------------------------- overrides

    def override(self, targets: Mapping[str, Any], *, context: str | None = None) -> OdeModel:
        """Apply PEtab-style assignments ``{target id: expression}``; returns a new model.

        Values are sympy expressions, numbers or PEtab math strings, and may use any
        symbol (states, constants, ``time``, new symbols such as network outputs).

        * a **state** gets the expression as its initial value (evaluated at t0; other
          states in it mean their initial values);
        * a **parameter**, **derived constant** or **assignment-rule target** becomes
          the assignment rule ``target = expression``, valid at all times (the
          hybridization semantics; a constant expression is a plain value change);
        * a **compartment** likewise, but its expression must not depend on states or
          time (concentrations would need ``dV/dt``);
        * anything else (reaction ids, unknown ids) raises :class:`SbmlError`.
        """
        initial = dict(self.initial)
        rules = dict(self.rules)
        parameters = dict(self.parameters)
        compartments = dict(self.compartments)
        derived = dict(self.derived)
        states = set(self.state_ids)
        for target, value in targets.items():
            where = f"{context}: {target}" if context else target
            expr = parse(value, context=where)
            if target in states:
                initial[target] = expr
            elif target in parameters or target in derived or target in rules:
                parameters.pop(target, None)
                derived.pop(target, None)
                rules[target] = expr
            elif target in compartments:
                varying = {s.name for s in self.expand(expr).free_symbols} & (states | {TIME.name})
                if varying:
                    raise SbmlError(
                        f"compartment size would depend on {', '.join(sorted(varying))}: "
                        "time-varying compartments are only supported through rate rules",
                        file=self.source,
                        entry=where,
                    )
                del compartments[target]
                rules[target] = expr
            elif target in self.fluxes:
                raise SbmlError(
                    "a reaction rate cannot be overridden", file=self.source, entry=where
                )
            else:
                raise SbmlError(
                    "not a species, compartment or parameter of the SBML model",
                    file=self.source,
                    entry=where,
                )
        return dataclasses.replace(
            self,
            initial=initial,
            rules=rules,
            parameters=parameters,
            compartments=compartments,
            derived=derived,
        )

    def with_values(self, values: Mapping[str, float]) -> OdeModel:
        """New model with numeric values of constant parameters or compartment sizes."""
        parameters = dict(self.parameters)
        compartments = dict(self.compartments)
        for k, v in values.items():
            if k in parameters:
                parameters[k] = float(v)
            elif k in compartments:
                compartments[k] = float(v)
            else:
                raise SbmlError(
                    "not a constant parameter or compartment", file=self.source, entry=k
                )
        return dataclasses.replace(self, parameters=parameters, compartments=compartments)

    # ------------------------------------------------------------------- compiling

    def compile_rhs(
        self,
        backend: str,
        *,
        constants: Sequence[str] | None = None,
        extra: Sequence[Sequence[str]] = (),
    ):
        """``f(t, x, p, *extra) -> dx/dt`` (shape ``batch + (n_states,)``).

        ``p`` holds ``constants`` (default :attr:`constant_ids`); each ``extra`` group
        is one more array argument (e.g. ``[["net1_output1"]]`` for a network output).
        """
        constants = self.constant_ids if constants is None else tuple(constants)
        return compile_expressions(
            self.rhs(), [self.state_ids, constants, *extra], backend=backend, name="rhs"
        )

    def compile_initial(
        self,
        backend: str,
        *,
        constants: Sequence[str] | None = None,
        extra: Sequence[Sequence[str]] = (),
    ):
        """``f(t0, p, *extra) -> x0`` (shape ``batch + (n_states,)``)."""
        constants = self.constant_ids if constants is None else tuple(constants)
        return compile_expressions(
            self.initial_values(), [constants, *extra], backend=backend, name="initial"
        )

    def compile_expressions(
        self,
        exprs: Sequence[Any],
        backend: str,
        *,
        constants: Sequence[str] | None = None,
        extra: Sequence[Sequence[str]] = (),
    ):
        """Compile formulas over the model (e.g. observables) as ``f(t, x, p, *extra)``.

        ``exprs`` may use any model id (rule targets and reaction ids are expanded).
        """
        constants = self.constant_ids if constants is None else tuple(constants)
        expanded = [self.expand(e) for e in exprs]
        return compile_expressions(
            expanded, [self.state_ids, constants, *extra], backend=backend, name="formulas"
        )


def _resolve(
    defs: Mapping[sympy.Symbol, sympy.Expr], what: str, source: str | None
) -> dict[sympy.Symbol, sympy.Expr]:
    """Substitute definitions into each other (dependency order); cycles are errors."""
    resolved: dict[sympy.Symbol, sympy.Expr] = {}
    for root in defs:
        if root in resolved:
            continue
        stack: list[tuple[sympy.Symbol, bool]] = [(root, False)]
        on_path: list[sympy.Symbol] = []
        while stack:
            sym, done = stack.pop()
            if done:
                on_path.pop()
                expr = defs[sym]
                deps = {s: resolved[s] for s in expr.free_symbols if s in defs}
                resolved[sym] = expr.xreplace(deps) if deps else expr
                continue
            if sym in resolved:
                continue
            if sym in on_path:
                cycle = on_path[on_path.index(sym) :] + [sym]
                raise SbmlError(
                    f"circular definition in {what}: " + " -> ".join(s.name for s in cycle),
                    file=source,
                )
            on_path.append(sym)
            stack.append((sym, True))
            for dep in sorted(defs[sym].free_symbols, key=lambda s: s.name):
                if dep in defs and dep not in resolved:
                    if dep in on_path:
                        cycle = on_path[on_path.index(dep) :] + [dep]
                        raise SbmlError(
                            f"circular definition in {what}: " + " -> ".join(s.name for s in cycle),
                            file=source,
                        )
                    stack.append((dep, False))
    return resolved


# ---------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------


def load_sbml(source: Any) -> OdeModel:
    """Read an SBML model into an :class:`OdeModel`.

    ``source`` is a path, an SBML XML string, a ``libsbml.SBMLDocument`` or a
    ``libsbml.Model``.  Raises :class:`SbmlError` for unreadable or inconsistent models
    and :class:`UnsupportedSbmlError` (naming the element) for constructs outside the
    supported subset.
    """
    libsbml = require("libsbml", "sbml")
    file = None
    if isinstance(source, libsbml.Model):
        model = source
        doc = model.getSBMLDocument()
    elif isinstance(source, libsbml.SBMLDocument):
        doc = source
        model = doc.getModel()
    elif isinstance(source, str) and source.lstrip().startswith("<"):
        doc = libsbml.readSBMLFromString(source)
        model = doc.getModel()
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        file = str(path)
        if not path.is_file():
            raise SbmlError("SBML file not found", file=file)
        doc = libsbml.readSBMLFromFile(str(path))
        model = doc.getModel()
    else:
        raise TypeError(f"cannot read SBML from {type(source).__name__}")
    if doc is not None:
        severe = [
            doc.getError(i)
            for i in range(doc.getNumErrors())
            if doc.getError(i).getSeverity() >= libsbml.LIBSBML_SEV_ERROR
        ]
        if severe:
            msgs = "; ".join(f"line {e.getLine()}: {_specific(e.getMessage())}"
                             for e in severe[:5])
            raise SbmlError(f"invalid SBML: {msgs}", file=file)
    if doc is not None and doc.getLevel() >= 3 and doc.isPackageEnabled("comp"):
        _refuse_required_packages(doc, file, allowed=("comp",))
        doc = _flatten_comp(libsbml, doc, file)
        model = doc.getModel()
    if model is None:
        raise SbmlError("the document holds no model", file=file)
    return _Importer(libsbml, doc, model, file).build()


def _refuse_required_packages(doc: Any, file: str | None, allowed: tuple[str, ...] = ()
                              ) -> None:
    """Raise :class:`UnsupportedSbmlError` naming the first package ``doc`` requires
    (known to libsbml or not) other than ``allowed``."""
    for i in range(doc.getNumPlugins()):
        pkg = doc.getPlugin(i).getPackageName()
        if pkg == "l3v2extendedmath" or pkg in allowed:  # libsbml's internal L3V2 math
            continue
        if doc.isSetPackageRequired(pkg) and doc.getPackageRequired(pkg):
            raise UnsupportedSbmlError("required SBML package is not supported", file=file,
                                       entry=f"package {pkg!r}")
    for i in range(doc.getNumUnknownPackages()):
        uri = doc.getUnknownPackageURI(i)
        prefix = doc.getUnknownPackagePrefix(i)
        if doc.getPackageRequired(uri):
            raise UnsupportedSbmlError("required SBML package is not supported", file=file,
                                       entry=f"package {prefix!r}")


def _flatten_comp(libsbml: Any, doc: Any, file: str | None) -> Any:
    """A copy of ``doc`` with its hierarchical model composition (SBML ``comp``)
    flattened into one model by libsbml's ``CompFlatteningConverter``; raises
    :class:`SbmlError` with libsbml's reasons when it cannot be flattened."""
    flat = doc.clone()
    props = libsbml.ConversionProperties()
    props.addOption("flatten comp", True)
    props.addOption("leavePorts", False)
    status = flat.convert(props)
    if status != libsbml.LIBSBML_OPERATION_SUCCESS:
        msgs = "; ".join(_specific(flat.getError(i).getMessage())
                         for i in range(min(flat.getNumErrors(), 5)))
        raise SbmlError(f"cannot flatten the SBML comp model composition (libsbml status "
                        f"{status}){': ' + msgs if msgs else ''}", file=file)
    return flat


def _specific(message: str) -> str:
    """The part of a libsbml message about this document: its last line (the lines
    before restate the rule and its reference)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1] if lines else message.strip()


_UNSUPPORTED_MATH = {
    "AST_FUNCTION_DELAY": "delay()",
    "AST_FUNCTION_RATE_OF": "rateOf()",
    "AST_FUNCTION_FACTORIAL": "factorial()",
    "AST_LAMBDA": "a lambda outside a function definition",
    "AST_CSYMBOL_FUNCTION": "an unknown csymbol function",
}


class _Importer:
    def __init__(self, libsbml, doc, model, file: str | None):
        self.L = libsbml
        self.doc = doc
        self.m = model
        self.file = file
        self.level = model.getLevel()
        self.fdefs = {fd.getId(): fd for fd in model.getListOfFunctionDefinitions()}
        self.sref_values: dict[str, sympy.Expr] = {}
        self.known: set[str] = set()
        self.unsupported_types = {
            getattr(libsbml, k): v for k, v in _UNSUPPORTED_MATH.items() if hasattr(libsbml, k)
        }
        L = libsbml
        self.funcs = {
            L.AST_FUNCTION_EXP: sympy.exp,
            L.AST_FUNCTION_LN: sympy.log,
            L.AST_FUNCTION_ABS: sympy.Abs,
            L.AST_FUNCTION_FLOOR: sympy.floor,
            L.AST_FUNCTION_CEILING: sympy.ceiling,
            L.AST_FUNCTION_SIN: sympy.sin,
            L.AST_FUNCTION_COS: sympy.cos,
            L.AST_FUNCTION_TAN: sympy.tan,
            L.AST_FUNCTION_SEC: sympy.sec,
            L.AST_FUNCTION_CSC: sympy.csc,
            L.AST_FUNCTION_COT: sympy.cot,
            L.AST_FUNCTION_SINH: sympy.sinh,
            L.AST_FUNCTION_COSH: sympy.cosh,
            L.AST_FUNCTION_TANH: sympy.tanh,
            L.AST_FUNCTION_SECH: sympy.sech,
            L.AST_FUNCTION_CSCH: sympy.csch,
            L.AST_FUNCTION_COTH: sympy.coth,
            L.AST_FUNCTION_ARCSIN: sympy.asin,
            L.AST_FUNCTION_ARCCOS: sympy.acos,
            L.AST_FUNCTION_ARCTAN: sympy.atan,
            L.AST_FUNCTION_ARCSEC: sympy.asec,
            L.AST_FUNCTION_ARCCSC: sympy.acsc,
            L.AST_FUNCTION_ARCCOT: sympy.acot,
            L.AST_FUNCTION_ARCSINH: sympy.asinh,
            L.AST_FUNCTION_ARCCOSH: sympy.acosh,
            L.AST_FUNCTION_ARCTANH: sympy.atanh,
            L.AST_FUNCTION_ARCSECH: sympy.asech,
            L.AST_FUNCTION_ARCCSCH: sympy.acsch,
            L.AST_FUNCTION_ARCCOTH: sympy.acoth,
        }
        self.relations = {
            L.AST_RELATIONAL_EQ: sympy.Eq,
            L.AST_RELATIONAL_NEQ: sympy.Ne,
            L.AST_RELATIONAL_LT: sympy.StrictLessThan,
            L.AST_RELATIONAL_LEQ: sympy.LessThan,
            L.AST_RELATIONAL_GT: sympy.StrictGreaterThan,
            L.AST_RELATIONAL_GEQ: sympy.GreaterThan,
        }

    def fail(self, message: str, entry: str, unsupported: bool = True):
        cls = UnsupportedSbmlError if unsupported else SbmlError
        raise cls(message, file=self.file, entry=entry)

    # ---------------------------------------------------------------- math

    def math(self, node, where: str, env: Mapping[str, sympy.Basic] | None = None):
        if node is None:
            self.fail("has no math", where, unsupported=False)
        return self._ast(node, where, dict(env or {}), 0)

    def _ast(self, node, where, env, depth):
        L = self.L
        t = node.getType()
        if t in self.unsupported_types:
            self.fail(f"{self.unsupported_types[t]} is not supported", where)
        if t == L.AST_INTEGER:
            return sympy.Integer(node.getInteger())
        if t in (L.AST_REAL, L.AST_REAL_E):
            return sympy_number(node.getReal())
        if t == L.AST_RATIONAL:
            return sympy.Rational(node.getNumerator(), node.getDenominator())
        if t == L.AST_NAME:
            return self.name(node.getName(), where, env)
        if t == L.AST_NAME_TIME:
            return TIME
        if t == L.AST_NAME_AVOGADRO:
            return sympy.Float(node.getReal())
        if t == L.AST_CONSTANT_E:
            return sympy.E
        if t == L.AST_CONSTANT_PI:
            return sympy.pi
        if t == L.AST_CONSTANT_TRUE:
            return sympy.true
        if t == L.AST_CONSTANT_FALSE:
            return sympy.false

        n = node.getNumChildren()
        raw = [self._ast(node.getChild(i), where, env, depth) for i in range(n)]
        if t == L.AST_FUNCTION:
            return self.call(node.getName(), raw, where, depth)
        if t == L.AST_FUNCTION_PIECEWISE:
            pieces = [
                (bool_to_number(v), number_to_boolean(c)) for v, c in zip(raw[0::2], raw[1::2])
            ]
            if n % 2 == 1:
                pieces.append((bool_to_number(raw[-1]), sympy.true))
            return sympy.Piecewise(*pieces)
        if t in self.relations:
            args = [bool_to_number(a) for a in raw]
            if len(args) < 2:
                self.fail(f"relational {node.getName()} needs two operands", where, False)
            return sympy.And(*(self.relations[t](a, b) for a, b in zip(args[:-1], args[1:])))
        if t in (L.AST_LOGICAL_AND, L.AST_LOGICAL_OR, L.AST_LOGICAL_XOR):
            op = {L.AST_LOGICAL_AND: sympy.And, L.AST_LOGICAL_OR: sympy.Or,
                  L.AST_LOGICAL_XOR: sympy.Xor}[t]  # fmt: skip
            return op(*(number_to_boolean(a) for a in raw))
        if t == L.AST_LOGICAL_NOT:
            return sympy.Not(number_to_boolean(raw[0]))
        if t == L.AST_LOGICAL_IMPLIES:
            a, b = (number_to_boolean(x) for x in raw)
            return sympy.Or(sympy.Not(a), b)

        args = [bool_to_number(a) for a in raw]
        if t == L.AST_PLUS:
            return sympy.Add(*args)
        if t == L.AST_TIMES:
            return sympy.Mul(*args)
        if t == L.AST_MINUS:
            return -args[0] if n == 1 else args[0] - args[1]
        if t == L.AST_DIVIDE:
            return args[0] / args[1]
        if t in (L.AST_POWER, L.AST_FUNCTION_POWER):
            return sympy.Pow(args[0], args[1])
        if t == L.AST_FUNCTION_ROOT:
            return sympy.sqrt(args[0]) if n == 1 else sympy.Pow(args[1], 1 / args[0])
        if t == L.AST_FUNCTION_LOG:
            return sympy.log(args[0], 10) if n == 1 else sympy.log(args[1], args[0])
        if t == L.AST_FUNCTION_MAX:
            return sympy.Max(*args)
        if t == L.AST_FUNCTION_MIN:
            return sympy.Min(*args)
        if t == L.AST_FUNCTION_QUOTIENT:
            q = args[0] / args[1]
            return sympy.sign(q) * sympy.floor(sympy.Abs(q))
        if t == L.AST_FUNCTION_REM:
            q = args[0] / args[1]
            return args[0] - args[1] * sympy.sign(q) * sympy.floor(sympy.Abs(q))
        if t in self.funcs:
            if n != 1:
                self.fail(f"{node.getName()}() takes one argument", where, False)
            return self.funcs[t](args[0])
        name = node.getName() or f"AST type {t}"
        self.fail(f"MathML element {name!r} is not supported", where)

    def name(self, name: str, where: str, env):
        if name in env:
            return env[name]
        if name in self.sref_values:
            return self.sref_values[name]
        if name not in self.known:
            self.fail(f"undefined symbol {name!r}", where, unsupported=False)
        return _sym(name)

    def call(self, fname: str, args, where: str, depth: int):
        fd = self.fdefs.get(fname)
        if fd is None:
            self.fail(f"call of undefined function {fname!r}", where, unsupported=False)
        if depth > 50:
            self.fail(f"function definitions nested too deeply at {fname!r}", where, False)
        lam = fd.getMath()
        fwhere = f"functionDefinition {fname!r}"
        if lam is None or lam.getType() != self.L.AST_LAMBDA:
            self.fail("is not a lambda", fwhere, unsupported=False)
        nb = lam.getNumBvars()
        if nb != len(args):
            self.fail(
                f"called with {len(args)} argument(s), defined with {nb}",
                f"{where} -> {fwhere}",
                unsupported=False,
            )
        bvars = [lam.getChild(i).getName() for i in range(nb)]
        body = lam.getChild(lam.getNumChildren() - 1)
        return self._ast(body, f"{where} -> {fwhere}", dict(zip(bvars, args)), depth + 1)

    # ---------------------------------------------------------------- model

    def check_unsupported(self):
        m, doc = self.m, self.doc
        if doc is not None and doc.getLevel() >= 3:
            _refuse_required_packages(doc, self.file)
        for i, rule in enumerate(m.getListOfRules()):
            if rule.isAlgebraic():
                formula = self.L.formulaToL3String(rule.getMath()) if rule.getMath() else ""
                ident = rule.getId() if hasattr(rule, "getId") and rule.getId() else f"#{i + 1}"
                self.fail(
                    f"algebraic rules are not supported (0 = {formula})",
                    f"algebraicRule {ident}",
                )
        for r in m.getListOfReactions():
            if r.isSetFast() and r.getFast():
                self.fail("fast reactions are not supported", f"reaction {r.getId()!r}")
            for sr in [*r.getListOfReactants(), *r.getListOfProducts()]:
                if self.level < 3 and sr.isSetStoichiometryMath():
                    self.fail(
                        "variable stoichiometry (stoichiometryMath) is not supported",
                        f"reaction {r.getId()!r} speciesReference {sr.getSpecies()!r}",
                    )

    def build(self) -> OdeModel:
        m = self.m
        self.check_unsupported()

        compartments = list(m.getListOfCompartments())
        species = list(m.getListOfSpecies())
        parameters = list(m.getListOfParameters())
        reactions = list(m.getListOfReactions())
        ids = (
            [c.getId() for c in compartments]
            + [s.getId() for s in species]
            + [p.getId() for p in parameters]
            + [r.getId() for r in reactions]
        )
        if TIME.name in ids:
            self.fail(
                f"the id {TIME.name!r} is reserved for the simulation time",
                f"id {TIME.name!r}",
                unsupported=False,
            )
        self.known = set(ids)

        rate_rules: dict[str, Any] = {}
        assignment_rules: dict[str, Any] = {}
        for rule in m.getListOfRules():
            if rule.isRate():
                rate_rules[rule.getVariable()] = rule
            elif rule.isAssignment():
                assignment_rules[rule.getVariable()] = rule
        initial_assignments = {ia.getSymbol(): ia for ia in m.getListOfInitialAssignments()}

        # species references: constant stoichiometries only
        for r in reactions:
            for sr in [*r.getListOfReactants(), *r.getListOfProducts()]:
                sid = sr.getId() if sr.isSetId() else ""
                if not sid:
                    continue
                if sid in rate_rules or sid in assignment_rules or sid in initial_assignments:
                    self.fail(
                        "variable stoichiometry (rule or initial assignment on a "
                        "speciesReference) is not supported",
                        f"reaction {r.getId()!r} speciesReference {sid!r}",
                    )
                self.sref_values[sid] = sympy_number(self.stoichiometry(sr))
        for target in [*rate_rules, *assignment_rules, *initial_assignments]:
            if target not in self.known:
                self.fail(
                    f"rule or initial assignment for undefined symbol {target!r}",
                    f"rule {target!r}",
                    unsupported=False,
                )

        state_ids: list[str] = []
        state_kinds: dict[str, str] = {}
        rates: dict[str, sympy.Expr] = {}
        initial: dict[str, sympy.Expr] = {}
        derived: dict[str, sympy.Expr] = {}
        rules: dict[str, sympy.Expr] = {}
        fluxes: dict[str, sympy.Expr] = {}
        const_params: dict[str, float] = {}
        const_comps: dict[str, float] = {}
        species_info: dict[str, SpeciesInfo] = {}

        def ia_or(eid: str, default: sympy.Expr) -> sympy.Expr:
            ia = initial_assignments.get(eid)
            if ia is None:
                return default
            return self.math(ia.getMath(), f"initialAssignment {eid!r}")

        # compartments (constants that events assign are states: d/dt = 0)
        targets = event_targets(m)
        comp_state: list[str] = []
        for c in compartments:
            cid = c.getId()
            size = c.getSize() if c.isSetSize() else 1.0
            if cid in rate_rules or cid in targets:
                comp_state.append(cid)
                initial[cid] = ia_or(cid, sympy_number(size))
            elif cid in assignment_rules:
                pass
            elif cid in initial_assignments:
                derived[cid] = ia_or(cid, sympy.nan)
            else:
                const_comps[cid] = float(size)

        # parameters
        param_state: list[str] = []
        for p in parameters:
            pid = p.getId()
            value = p.getValue() if p.isSetValue() else float("nan")
            if pid in rate_rules or pid in targets:
                param_state.append(pid)
                initial[pid] = ia_or(pid, sympy_number(value))
            elif pid in assignment_rules:
                pass
            elif pid in initial_assignments:
                derived[pid] = ia_or(pid, sympy.nan)
            else:
                const_params[pid] = float(value)

        # species
        for s in species:
            sid = s.getId()
            cid = s.getCompartment()
            if (
                cid not in const_comps
                and cid not in derived
                and cid not in comp_state
                and (cid not in assignment_rules)
            ):
                self.fail(f"unknown compartment {cid!r}", f"species {sid!r}", False)
            info = SpeciesInfo(
                id=sid,
                compartment=cid,
                has_only_substance_units=bool(s.getHasOnlySubstanceUnits()),
                boundary_condition=bool(s.getBoundaryCondition()),
                constant=bool(s.getConstant()),
            )
            species_info[sid] = info
            if sid in assignment_rules:
                continue
            state_ids.append(sid)
            state_kinds[sid] = "species"
            volume = _sym(cid)
            if info.has_only_substance_units:
                if s.isSetInitialAmount():
                    x0 = sympy_number(s.getInitialAmount())
                elif s.isSetInitialConcentration():
                    x0 = sympy_number(s.getInitialConcentration()) * volume
                else:
                    x0 = sympy.nan
            else:
                if s.isSetInitialConcentration():
                    x0 = sympy_number(s.getInitialConcentration())
                elif s.isSetInitialAmount():
                    x0 = sympy_number(s.getInitialAmount()) / volume
                else:
                    x0 = sympy.nan
            initial[sid] = ia_or(sid, x0)
        for cid in comp_state:
            state_ids.append(cid)
            state_kinds[cid] = "compartment"
        for pid in param_state:
            state_ids.append(pid)
            state_kinds[pid] = "parameter"

        # reactions and local parameters
        taken = set(ids)
        net: dict[str, list[sympy.Expr]] = {sid: [] for sid in species_info}
        for r in reactions:
            rid = r.getId()
            kl = r.getKineticLaw()
            if kl is None:
                self.fail("reaction has no kinetic law", f"reaction {rid!r}", False)
            local_params = (
                list(kl.getListOfLocalParameters())
                if self.level >= 3
                else list(kl.getListOfParameters())
            )
            env: dict[str, sympy.Basic] = {}
            for lp in local_params:
                name = f"{rid}_{lp.getId()}"
                while name in taken:
                    name = f"_{name}"
                taken.add(name)
                value = lp.getValue() if lp.isSetValue() else float("nan")
                const_params[name] = float(value)
                env[lp.getId()] = _sym(name)
            fluxes[rid] = self.math(kl.getMath(), f"reaction {rid!r} kineticLaw", env)
            for sign, refs in ((-1, r.getListOfReactants()), (1, r.getListOfProducts())):
                for sr in refs:
                    sid = sr.getSpecies()
                    if sid not in species_info:
                        self.fail(f"unknown species {sid!r}", f"reaction {rid!r}", False)
                    nu = sympy_number(self.stoichiometry(sr))
                    net[sid].append(sign * nu * _sym(rid))

        # right-hand sides
        model_cf = m.getConversionFactor() if self.level >= 3 and m.isSetConversionFactor() else ""
        for sid in (s for s in state_ids if state_kinds[s] == "species"):
            info = species_info[sid]
            if sid in rate_rules:
                rates[sid] = self.math(rate_rules[sid].getMath(), f"rateRule {sid!r}")
                continue
            if info.boundary_condition or info.constant or not net[sid]:
                rates[sid] = sympy.Integer(0)
                continue
            amount_rate = sympy.Add(*net[sid])
            s_obj = m.getSpecies(sid)
            cf = (
                s_obj.getConversionFactor()
                if self.level >= 3 and s_obj.isSetConversionFactor()
                else model_cf
            )
            if cf:
                amount_rate = amount_rate * _sym(cf)
            if info.has_only_substance_units:
                rates[sid] = amount_rate
                continue
            cid = info.compartment
            volume = _sym(cid)
            rate = amount_rate / volume
            if cid in comp_state:
                rate = rate - _sym(sid) * _sym(f"__rate_{cid}") / volume
            elif cid in assignment_rules:
                self.fail(
                    "concentration species changed by reactions in a compartment whose "
                    "size is an assignment rule are not supported",
                    f"species {sid!r} in compartment {cid!r}",
                )
            rates[sid] = rate
        for eid in comp_state + param_state:
            rates[eid] = (self.math(rate_rules[eid].getMath(), f"rateRule {eid!r}")
                          if eid in rate_rules else sympy.Integer(0))
        # dV/dt of rate-rule compartments in concentration species
        dv = {_sym(f"__rate_{c}"): rates[c] for c in comp_state}
        if dv:
            for sid in state_ids:
                rates[sid] = rates[sid].xreplace(dv)

        for var, rule in assignment_rules.items():
            rules[var] = self.math(rule.getMath(), f"assignmentRule {var!r}")

        for sid in species_info:
            if sid in assignment_rules and net[sid] and not species_info[sid].boundary_condition:
                self.fail(
                    "a non-boundary species with an assignment rule takes part in reactions",
                    f"species {sid!r}",
                    unsupported=False,
                )

        return OdeModel(
            model_id=m.getId() or "",
            state_ids=tuple(state_ids),
            state_kinds=state_kinds,
            species=species_info,
            parameters=const_params,
            compartments=const_comps,
            rates=rates,
            initial=initial,
            derived=derived,
            rules=rules,
            fluxes=fluxes,
            events=read_events(self, species_info, state_kinds),
            source=self.file,
        )

    def stoichiometry(self, sr) -> float:
        if self.level >= 3 and not sr.isSetStoichiometry():
            return 1.0
        return float(sr.getStoichiometry())

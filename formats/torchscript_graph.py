"""Graph helpers and the values the TorchScript lifter passes around while it interprets
a module's graph.

A graph value is a tensor (:class:`~petab_sciml.formats.graph_building.Tensor`, an IR
node), a module (:class:`_Mod`), a size
known only at run time (:class:`_Size`, :class:`_Sizes`), the training flag
(:data:`TRAINING`), an array or input of a traced layer's own graph (:class:`_Param`,
:class:`_Input`), a plain Python constant, or :data:`_UNKNOWN`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from petab_sciml.catalogue import canonical_function

INT64_MAX = 2**63 - 1

# ----------------------------------------------------------------------------- values
class _Training:
    """The ``training`` flag of a module: unknown until run time."""

    def __repr__(self) -> str:
        return "self.training"


TRAINING = _Training()

@dataclass(frozen=True)
class _Mod:
    """A (sub)module at ``path`` of the root."""

    path: str
    obj: Any = field(compare=False, repr=False)


@dataclass(frozen=True)
class _Size:
    """``tensor.size(dim) * num // den``: known only at run time (``num = den = 1`` for
    the size itself; ``x.size(1) // 2`` in a channel shuffle)."""

    tensor: str
    dim: int
    num: int = 1
    den: int = 1

    @property
    def plain(self) -> bool:
        return self.num == 1 and self.den == 1

    def scaled(self, num: int, den: int) -> _Size:
        return _Size(self.tensor, self.dim, self.num * num, self.den * den)


@dataclass(frozen=True)
class _SizeProd:
    """A product of run-time sizes (``h * w`` after ``n, c, h, w = x.shape``)."""

    factors: tuple[_Size, ...]


@dataclass(frozen=True)
class _Sizes:
    """``tensor.size()``."""

    tensor: str


@dataclass(frozen=True)
class _Param:
    """An array of a traced layer's own graph (``weight``, ``bias``, ...)."""

    name: str


@dataclass(frozen=True)
class _Input:
    """A graph input of a traced layer's own graph."""

    index: int


_UNKNOWN = object()

_UNINITIALIZED = object()
"""``prim::Uninitialized``: a variable set only on branches not taken (an error if used)."""


@dataclass(frozen=True)
class _Full:
    """``aten::zeros`` / ``ones`` / ``full``: a filled tensor of ``sizes`` (ints, or
    :class:`_Size` known only at run time), made only where it is used."""

    sizes: tuple
    value: float


@dataclass(frozen=True)
class _Tuple:
    """A layer's tuple result (a recurrent layer's ``output, (h_n, c_n)``) seen through
    TorchScript's type for it: ``items`` mirrors that type, each leaf is the getitem path
    into the IR node ``ref`` (traced LSTMs return the flat ``(output, h_n, c_n)``)."""

    ref: str
    items: tuple


_MANGLE = re.compile(r"___torch_mangle_\d+\.")


def _qualified(type_name: str) -> str:
    """``__torch__.torch.nn.modules.linear.___torch_mangle_3.Linear`` ->
    ``torch.nn.modules.linear.Linear``."""
    name = _MANGLE.sub("", str(type_name))
    return name[len("__torch__."):] if name.startswith("__torch__.") else name


def _all_nodes(block: Any) -> Iterator[Any]:
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _all_nodes(sub)


# ----------------------------------------------------------------------------- graphs
_PROTECT = {"prim::CallMethod": "petab_sciml::protected_method",
            "prim::CallFunction": "petab_sciml::protected_function"}


_RESTORE = {v: k for k, v in _PROTECT.items()}


def _function_name(node: Any) -> str | None:
    """Catalogue name of a ``prim::CallFunction`` of a ``torch.nn.functional`` function."""
    qualified = _qualified(node.inputsAt(0).type().annotation_str)
    return canonical_function("call_function", qualified)


def _swap(graph: Any, kinds: Mapping[str, str], keep: Any = None) -> None:
    """Replace nodes of ``kinds`` by nodes of the mapped kind (same inputs, outputs and
    ``name`` attribute); ``keep(node)`` False leaves a node alone."""
    for node in list(_all_nodes(graph)):
        kind = node.kind()
        if kind not in kinds or (keep is not None and not keep(node)):
            continue
        new = graph.create(kinds[kind], list(node.inputs()), node.outputsSize())
        if node.hasAttribute("name"):
            new.s_("name", node.s("name"))
        new.insertBefore(node)
        for old_out, new_out in zip(node.outputs(), new.outputs()):
            new_out.setType(old_out.type())
            old_out.replaceAllUsesWith(new_out)
        node.destroy()


def _prepared(torch: Any, graph: Any) -> Any:
    """A copy of ``graph`` with plain functions inlined (method calls and catalogue
    ``torch.nn.functional`` calls kept), constants propagated and dead code removed."""
    g = graph.copy()
    _swap(g, _PROTECT, keep=lambda n: n.kind() == "prim::CallMethod"
          or _function_name(n) is not None)
    torch._C._jit_pass_inline(g)
    _swap(g, _RESTORE)
    torch._C._jit_pass_constant_propagation(g)
    torch._C._jit_pass_dce(g)
    return g


def _numpy(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().numpy().copy()

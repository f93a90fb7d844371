"""Tracing a ``torch.nn.Module`` with ``torch.fx`` for :mod:`petab_sciml.formats.torch_fx`:
a tracer that keeps catalogue layers as leaves and traces through parameter-free
``torch.nn`` modules, a wrapper for a catalogue layer traced on its own, and the nodes
that ``concrete_args`` leave behind.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from petab_sciml.catalogue import LAYERS
from petab_sciml.errors import NetworkError


def _catalogue_type(torch: Any, module: Any) -> str | None:
    """The catalogue layer type of ``module`` if it is exactly that ``torch.nn`` class."""
    name = type(module).__name__
    if name in LAYERS and type(module) is getattr(torch.nn, name, None):
        return name
    return None


def _tracer(torch: Any) -> Any:
    """A tracer that keeps catalogue layers as leaves and traces through parameter-free
    ``torch.nn`` modules outside the catalogue (activations, Identity)."""
    fx = torch.fx

    class Tracer(fx.Tracer):
        def _traced_through(self, m: Any, qualname: str) -> bool:
            return (
                _catalogue_type(torch, m) is None
                and super().is_leaf_module(m, qualname)
                and next(m.parameters(), None) is None
                and next(m.buffers(), None) is None
            )

        def is_leaf_module(self, m: Any, qualname: str) -> bool:
            if _catalogue_type(torch, m) is not None:
                return True
            if self._traced_through(m, qualname):
                return False
            return super().is_leaf_module(m, qualname)

        def call_module(self, m: Any, forward: Any, args: Any, kwargs: Any) -> Any:
            qualname = self.path_of_module(m)
            if not self._traced_through(m, qualname):
                return super().call_module(m, forward, args, kwargs)
            try:
                return super().call_module(m, forward, args, kwargs)
            except NetworkError:
                raise
            except Exception as exc:
                raise NetworkError(
                    f"{type(m).__name__} is not a catalogue layer and cannot be traced "
                    f"through: {type(exc).__name__}: {exc}",
                    entry=f"submodule {qualname!r}") from exc

    return Tracer()


ROOT_LAYER_ID = "layer1"
"""Layer id of a catalogue layer exported on its own (``network_from_module(nn.Conv2d(...))``)."""


def _wrap_root_layer(torch: Any, module: Any) -> Any:
    """A catalogue layer traced on its own becomes the submodule ``layer1`` of a wrapper
    (torch.fx never treats the root as a leaf); other modules are returned unchanged."""
    layer_type = _catalogue_type(torch, module)
    if layer_type is None:
        return module
    nn = torch.nn
    if LAYERS[layer_type].n_inputs == 2:
        class Wrapper2(nn.Module):
            def forward(self, net_input1, net_input2):
                return getattr(self, ROOT_LAYER_ID)(net_input1, net_input2)

        wrapper = Wrapper2()
    else:
        class Wrapper(nn.Module):
            def forward(self, net_input):
                return getattr(self, ROOT_LAYER_ID)(net_input)

        wrapper = Wrapper()
    wrapper.add_module(ROOT_LAYER_ID, module)
    return wrapper


def _trace(torch: Any, module: Any, concrete_args: Mapping[str, Any] | None) -> Any:
    try:
        return _tracer(torch).trace(module, concrete_args=concrete_args)
    except NetworkError:
        raise
    except Exception as exc:
        raise NetworkError(f"cannot trace {type(module).__name__} with torch.fx: "
                           f"{type(exc).__name__}: {exc}") from exc


def _concrete_placeholders(module: Any, placeholders: Sequence[Any],
                           concrete_args: Mapping[str, Any] | None) -> set[str]:
    """Names of the placeholders torch.fx keeps for ``concrete_args``."""
    if not concrete_args:
        return set()
    try:
        names = [p.name for p in inspect.signature(module.forward).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        names = []
    out = set()
    if len(names) == len(placeholders):
        out = {ph.name for ph, n in zip(placeholders, names) if n in concrete_args}
    else:
        for ph in placeholders:
            if any(ph.target == k or ph.target.startswith(f"{k}_") for k in concrete_args):
                out.add(ph.name)
    return out


def _is_guard(torch: Any, target: Any) -> bool:
    """Assertions torch.fx inserts for ``concrete_args``."""
    from torch.fx import _symbolic_trace

    return target is torch._assert or target is getattr(_symbolic_trace, "_assert_is_none",
                                                        None)


def _guard_nodes(torch: Any, nodes: list[Any], concrete: set[str]) -> set[str]:
    """The concrete-argument placeholders and the nodes that only serve their guards
    (they are dropped)."""
    dropped = set(concrete)
    for node in nodes:
        if node.op in ("call_function", "call_method"):
            inputs = node.all_input_nodes
            if (node.op == "call_function" and _is_guard(torch, node.target)) or (
                    inputs and all(i.name in dropped for i in inputs)):
                dropped.add(node.name)
    return dropped

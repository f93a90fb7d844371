"""An executor that wraps others and switches between them (framework-free): the PyTorch
auto-compiling executor and the JAX stiff-solver fallback share this delegation."""

from __future__ import annotations

from typing import Any


class SwitchingExecutor:
    """Reads of attributes not in :attr:`own` go to :attr:`active`; writes of them go to
    every executor of :meth:`members` (a setting applies whichever runs next).
    Subclasses name their own attributes in :attr:`own` and define both."""

    own: frozenset[str] = frozenset()

    @property
    def active(self) -> Any:
        raise NotImplementedError

    def members(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        # only reached for names not set on self
        if name in type(self).own or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.active, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).own:
            object.__setattr__(self, name, value)
            return
        for executor in self.members():
            if executor is not None:
                setattr(executor, name, value)

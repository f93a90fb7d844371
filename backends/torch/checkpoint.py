"""PyTorch checkpoints of a fit: one ``torch.save`` file per start, read back as
untrusted input (a fit folder may come from someone else; ``docs/security.md``).

A checkpoint is a dict: ``identity`` (:func:`~petab_sciml.fit.artifacts.checkpoint_identity`),
``module`` and ``optimizer`` (state dicts), ``generator`` (the dropout stream's state),
``step``, ``trace`` (the loss before each step), ``stopped_at`` and ``previous`` (the
trainable values of the step before).

Reading it (:func:`load_checkpoint`), in this order, and nothing is restored until all
of it passed:

1. the file: a regular file of the folder, no larger than this model's state can be;
2. the archive: a zip of stored members (:func:`~petab_sciml.fit.archive.stored_zip`);
3. unpickling with ``torch.load(weights_only=True)``: tensors, dicts, lists, tuples,
   numbers, strings; a pickle that asks for any other global (a function to call) is
   refused, naming it, and nothing of it runs;
4. the identity record against the resumed fit's (problem, start, settings);
5. every entry against the module and optimizer it is to restore: names, shapes and
   dtypes of the tensors, the optimizer's hyperparameters, the generator state's size,
   and a step, trace and ``stopped_at`` that agree.

Every failure is an :class:`~petab_sciml.fit.artifacts.ArtifactError` naming the file,
the entry and how to start over.
"""

from __future__ import annotations

import io
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from petab_sciml.fit.artifacts import (
    ArtifactError,
    check_identity,
    checkpoint_budget,
    read_checkpoint_bytes,
    refused,
)

ENTRIES = ("identity", "module", "optimizer", "generator", "step", "trace", "stopped_at",
           "previous")


@dataclass
class Restored:
    """Where a restored start continues."""

    step: int
    trace: list[float]
    stopped_at: int


def save_checkpoint(path: Path, identity: dict[str, Any], module: Any, opt: Any, step: int,
                    trace: list[float], stopped_at: int, previous: list[torch.Tensor]
                    ) -> None:
    """Write the checkpoint of one start atomically (interrupts held back until it is
    written)."""
    from petab_sciml.fit.signals import signals_deferred
    from petab_sciml.safe_write import write_bytes

    with signals_deferred():
        buffer = io.BytesIO()
        torch.save({"identity": identity, "module": module.state_dict(),
                    "optimizer": opt.state_dict(), "generator": module.generator.get_state(),
                    "step": step, "trace": trace, "stopped_at": stopped_at,
                    "previous": previous}, buffer)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, buffer.getvalue(), overwrite=True)


def load_checkpoint(path: Path, identity: dict[str, Any], module: Any, opt: Any,
                    params: list[torch.Tensor]) -> Restored:
    """Check the checkpoint ``path`` and restore ``module`` (its values and generator),
    ``opt`` and ``params`` (the trainable parameters' previous values, in place)."""
    state = module.state_dict()
    n_values = sum(t.numel() for t in state.values()) + sum(p.numel() for p in params)
    data = read_checkpoint_bytes(path, checkpoint_budget(n_values, 4 * len(state) + 16))
    from petab_sciml.fit.archive import stored_zip

    stored_zip(data, path, "a PyTorch checkpoint")
    saved = _unpickle(data, path)
    try:
        restored = _check(saved, identity, module, opt, params, path)
    except ArtifactError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a crafted value makes a check raise
        raise refused(path, f"is not a checkpoint of this model ({type(exc).__name__} while "
                      "checking it)") from None
    previous = saved["previous"]
    try:
        module.load_state_dict(saved["module"])
        opt.load_state_dict(saved["optimizer"])
        module.generator.set_state(saved["generator"])
        with torch.no_grad():
            for q, v in zip(params, previous):
                q.copy_(v)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise refused(path, f"cannot be restored: {str(exc).splitlines()[0][:200]}") from None
    return restored


def _check(saved: dict[str, Any], identity: dict[str, Any], module: Any, opt: Any,
           params: list[torch.Tensor], path: Path) -> Restored:
    """Every entry of ``saved`` against the fit and the model (nothing restored yet)."""
    check_identity(saved.get("identity"), identity, path)
    _check_tensors(saved["module"], dict(module.state_dict()), path, "module")
    _check_optimizer(saved["optimizer"], opt, params, path)
    generator = module.generator.get_state()
    _check_tensor(saved["generator"], generator.shape, generator.dtype, path, "generator")
    restored = _check_progress(saved, path)
    if not isinstance(saved["previous"], list):
        raise refused(path, "expected a list of tensors", entry="previous")
    _check_tensors(dict(enumerate(saved["previous"])), dict(enumerate(params)), path,
                   "previous")
    return restored


def _unpickle(data: bytes, path: Path) -> dict[str, Any]:
    """``torch.load`` with ``weights_only=True``: a refused global is named."""
    try:
        saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = f"to call {found.group(1)}" if found else "for objects other than tensors"
        raise refused(path, f"asks {what} when loaded; a checkpoint holds only tensors, "
                      "numbers and containers, so it is refused and nothing of it ran") \
            from None
    except Exception as exc:  # noqa: BLE001 - torch's reader fails variously on damage
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise refused(path, f"is not a readable PyTorch checkpoint (truncated or damaged?): "
                      f"{reason}") from None
    if not isinstance(saved, dict) or set(saved) != set(ENTRIES):
        found = sorted(map(str, saved))[:10] if isinstance(saved, dict) else \
            type(saved).__name__
        raise refused(path, f"is not a checkpoint of a fit: expected the entries "
                      f"{', '.join(ENTRIES)}, found {found}")
    return saved


def _check_tensor(value: Any, shape: Any, dtype: Any, path: Path, entry: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise refused(path, f"expected a tensor, found {type(value).__name__}", entry=entry)
    if value.shape != shape or value.dtype != dtype:
        raise refused(path, f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}; "
                      f"this model needs shape {tuple(shape)} and dtype {dtype} (another "
                      "problem or network?)", entry=entry)


def _check_tensors(saved: Any, expected: dict[Any, torch.Tensor], path: Path,
                   entry: str) -> None:
    """``saved`` maps exactly ``expected``'s keys to tensors of the same shapes and
    dtypes."""
    if not isinstance(saved, dict):
        raise refused(path, f"expected a mapping of tensors, found {type(saved).__name__}",
                      entry=entry)
    if set(saved) != set(expected):
        missing = sorted(map(str, set(expected) - set(saved)))[:5]
        extra = sorted(map(str, set(saved) - set(expected)))[:5]
        raise refused(path, f"holds other tensors than this model (missing: {missing}, "
                      f"unknown: {extra}); another problem or network?", entry=entry)
    for key, want in expected.items():
        _check_tensor(saved[key], want.shape, want.dtype, path, f"{entry}.{key}")


def _settings(groups: Any) -> Any:
    """Parameter groups without the current learning rate where a scheduler drives it
    (its base rate, ``initial_lr``, is compared instead)."""
    if not isinstance(groups, list):
        return groups
    return [{k: v for k, v in g.items() if not (k == "lr" and "initial_lr" in g)}
            if isinstance(g, dict) else g for g in groups]


def _check_optimizer(saved: Any, opt: Any, params: list[torch.Tensor], path: Path) -> None:
    """The optimizer state: the same hyperparameters as ``opt`` (a fresh optimizer of
    the resumed fit) and, per parameter, tensors of its shape or scalars."""
    if not isinstance(saved, dict) or set(saved) != {"state", "param_groups"}:
        raise refused(path, "expected an optimizer state (state, param_groups)",
                      entry="optimizer")
    if _settings(saved["param_groups"]) != _settings(opt.state_dict()["param_groups"]):
        raise refused(path, "was written by another optimizer or with other optimizer "
                      "settings", entry="optimizer.param_groups")
    state = saved["state"]
    if not isinstance(state, dict) or not set(state) <= set(range(len(params))):
        raise refused(path, "optimizer state of other parameters than this model's",
                      entry="optimizer.state")
    for index, entries in state.items():
        where = f"optimizer.state.{index}"
        if not isinstance(entries, dict):
            raise refused(path, "expected a mapping", entry=where)
        param = params[index]
        for name, value in entries.items():
            if value is None or isinstance(value, (int, float)) and not isinstance(value,
                                                                                  bool):
                continue
            if isinstance(value, torch.Tensor) and value.dim() == 0:
                continue
            _check_tensor(value, param.shape, param.dtype, path, f"{where}.{name}")


def _check_progress(saved: dict[str, Any], path: Path) -> Restored:
    step, trace, stopped_at = saved["step"], saved["trace"], saved["stopped_at"]
    if type(step) is not int or step < 0:
        raise refused(path, f"expected a step count, found {str(step)[:40]!r}", entry="step")
    if not isinstance(trace, list) or len(trace) != step or not all(
            type(v) is float for v in trace):
        raise refused(path, f"expected {step} loss values (one per step)", entry="trace")
    if type(stopped_at) is not int or not 0 <= stopped_at <= step:
        raise refused(path, f"expected a step between 0 and {step}", entry="stopped_at")
    return Restored(step, list(trace), stopped_at)


__all__ = ["ArtifactError", "Restored", "load_checkpoint", "save_checkpoint"]

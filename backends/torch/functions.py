"""Torch implementations of the catalogue functions.

Each entry maps a canonical catalogue name to a callable taking the catalogue's bound
parameters (ignored ones such as ``inplace`` already removed).  The callables are
module-level so that torch.fx code generation can reference them by qualified name.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from petab_sciml.catalogue import TRIGONOMETRIC, implicit_softmax_dim


def add(input: Any, other: Any, alpha: float = 1) -> Any:
    return input + other if alpha == 1 else input + alpha * other


def sub(input: Any, other: Any, alpha: float = 1) -> Any:
    return input - other if alpha == 1 else input - alpha * other


def div(input: Any, other: Any, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return input / other
    if not isinstance(input, torch.Tensor) and not isinstance(other, torch.Tensor):
        input = torch.as_tensor(input)
    return torch.div(input, other, rounding_mode=rounding_mode)


def floor_divide(input: Any, other: Any) -> Any:
    return div(input, other, "floor")


def remainder(input: Any, other: Any) -> Any:
    if not isinstance(input, torch.Tensor):
        return torch.remainder(torch.as_tensor(input, dtype=other.dtype), other)
    return torch.remainder(input, other)


def softmax(input: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    return F.softmax(input, dim=implicit_softmax_dim(input.dim()) if dim is None else dim)


def log_softmax(input: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    return F.log_softmax(input, dim=implicit_softmax_dim(input.dim()) if dim is None else dim)


def reshape(input: torch.Tensor, shape: Any) -> torch.Tensor:
    return torch.reshape(input, tuple(shape) if isinstance(shape, list) else (shape,)
                         if isinstance(shape, int) else shape)


def unflatten(input: torch.Tensor, dim: int, sizes: Any) -> torch.Tensor:
    return torch.unflatten(input, dim, tuple(sizes) if isinstance(sizes, list) else sizes)


def chunk(input: torch.Tensor, chunks: int, dim: int = 0) -> tuple[torch.Tensor, ...]:
    pieces = torch.chunk(input, chunks, dim)
    if len(pieces) != chunks:
        raise ValueError(f"chunk: a size of {input.shape[dim]} does not split into {chunks} "
                         "pieces")
    return pieces


def reshape_as(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return input.reshape(other.shape)


def permute(input: torch.Tensor, dims: Any) -> torch.Tensor:
    return torch.permute(input, tuple(dims) if isinstance(dims, (list, tuple)) else (dims,))


def squeeze(input: torch.Tensor, dim: Any = None) -> torch.Tensor:
    if dim is None:
        return torch.squeeze(input)
    return torch.squeeze(input, tuple(dim) if isinstance(dim, (list, tuple)) else dim)


def _reduce_dim(dim: Any) -> Any:
    return tuple(dim) if isinstance(dim, (list, tuple)) else dim


def sum(input: torch.Tensor, dim: Any = None, keepdim: bool = False) -> torch.Tensor:
    if dim is None:
        return torch.sum(input)
    return torch.sum(input, _reduce_dim(dim), keepdim=keepdim)


def mean(input: torch.Tensor, dim: Any = None, keepdim: bool = False) -> torch.Tensor:
    if dim is None:
        return torch.mean(input)
    return torch.mean(input, _reduce_dim(dim), keepdim=keepdim)


def clamp(input: torch.Tensor, min: float | None = None, max: float | None = None
          ) -> torch.Tensor:
    return torch.clamp(input, min=min, max=max)


def cat(tensors: Any, dim: int = 0) -> torch.Tensor:
    return torch.cat(list(tensors), dim=dim)


def stack(tensors: Any, dim: int = 0) -> torch.Tensor:
    return torch.stack(list(tensors), dim=dim)


def getitem(input: torch.Tensor, index: Any) -> torch.Tensor:
    return input[index]


def matmul(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return torch.matmul(input, other)


def pow(input: Any, exponent: Any) -> Any:
    return input**exponent


def contiguous(input: torch.Tensor) -> torch.Tensor:
    return input.contiguous()


def amax(input: torch.Tensor, dim: Any = (), keepdim: bool = False) -> torch.Tensor:
    return torch.amax(input, _reduce_dim(dim), keepdim=keepdim)


def amin(input: torch.Tensor, dim: Any = (), keepdim: bool = False) -> torch.Tensor:
    return torch.amin(input, _reduce_dim(dim), keepdim=keepdim)


def prod(input: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    if dim is None:  # every element; keepdim keeps all dimensions (as size 1)
        out = torch.prod(input)
        return out.reshape((1,) * input.dim()) if keepdim else out
    return torch.prod(input, dim, keepdim=keepdim)


def flip(input: torch.Tensor, dims: Any) -> torch.Tensor:
    return torch.flip(input, tuple(dims) if isinstance(dims, (list, tuple)) else (dims,))


def pad(input: torch.Tensor, pad: Any, mode: str = "constant", value: float | None = None
        ) -> torch.Tensor:
    return F.pad(input, list(pad), mode=mode, value=value)


def where(condition: torch.Tensor, input: Any, other: Any) -> torch.Tensor:
    return torch.where(condition, input, other)


TORCH_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "relu": F.relu, "relu6": F.relu6, "hardtanh": F.hardtanh, "hardswish": F.hardswish,
    "selu": F.selu, "silu": F.silu, "leaky_relu": F.leaky_relu, "gelu": F.gelu,
    "logsigmoid": F.logsigmoid, "tanhshrink": F.tanhshrink, "softsign": F.softsign,
    "softplus": F.softplus, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "hardsigmoid": F.hardsigmoid, "mish": F.mish, "elu": F.elu, "celu": F.celu,
    "softmax": softmax, "log_softmax": log_softmax,
    "add": add, "sub": sub, "mul": operator.mul, "div": div, "neg": operator.neg,
    "pow": pow, "matmul": matmul, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "abs": torch.abs, "clamp": clamp,
    "cat": cat, "stack": stack, "flatten": torch.flatten, "reshape": reshape,
    "permute": permute, "transpose": torch.transpose, "squeeze": squeeze,
    "unsqueeze": torch.unsqueeze, "contiguous": contiguous, "getitem": getitem, "sum": sum,
    "mean": mean,
    "maximum": torch.maximum, "minimum": torch.minimum, "erf": torch.erf, "sign": torch.sign,
    "sin": torch.sin, "cos": torch.cos,
    **{name: getattr(torch, name) for name in TRIGONOMETRIC},
    "gt": operator.gt, "lt": operator.lt, "ge": operator.ge, "le": operator.le,
    "eq": operator.eq, "where": where,
    "amax": amax, "amin": amin, "prod": prod, "flip": flip, "pad": pad,
    "floor_divide": floor_divide, "remainder": remainder, "cumsum": torch.cumsum,
    "reshape_as": reshape_as, "unflatten": unflatten, "chunk": chunk,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
    "local_response_norm": F.local_response_norm,
    **{f"{kind}{n}d": getattr(F, f"{kind}{n}d") for n in (1, 2, 3)
       for kind in ("max_pool", "avg_pool", "lp_pool", "adaptive_avg_pool",
                    "adaptive_max_pool")},
}

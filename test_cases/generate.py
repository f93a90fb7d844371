"""Generate the reference network test cases in ``test_cases/`` (official ML-import layout).

Run ``python test_cases/generate.py`` from the repository root (needs torch and h5py).
Every case is a small PyTorch module written below; its ``net.yaml`` is exported with
:func:`petab_sciml.formats.torch_fx.network_from_module`, and the reference outputs come
from PyTorch itself, running that original module (never from a petab_sciml backend).
Seeds derive from the case names, so regenerating gives the same numbers.

Each folder ``NNN_name/`` holds ``net.yaml``, ``net_input_i.hdf5`` (two-input cases:
``net_input_i_arg0.hdf5`` and ``net_input_i_arg1.hdf5``), ``net_ps_i.hdf5`` (only when the
network has parameters), ``net_output_i.hdf5`` for i = 1..3 (new random parameters and
inputs for each i) and ``solutions.yaml`` with the suite's keys plus ``tol`` (absolute
tolerance), ``dropout`` (number of training-mode passes whose mean is the reference) and
``mode: eval`` where the reference was computed in eval mode (default: train mode, as
in the official suite).

The test-suite imports :data:`CASES` and :func:`build` from here.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import nn

HERE = Path(__file__).resolve().parent
NET_ID = "net0"
REPETITIONS = 3
DROPOUT_PASSES = 20000


# ----------------------------------------------------------------------------- modules
class Net(nn.Module):
    """A module whose forward is ``fn(self, x)``; keyword arguments become attributes
    (submodules, parameters, or buffers for plain tensors)."""

    def __init__(self, fn: Callable[..., Any], **children: Any):
        super().__init__()
        self.fn = fn
        for name, child in children.items():
            if isinstance(child, torch.Tensor) and not isinstance(child, nn.Parameter):
                self.register_buffer(name, child)
            else:
                setattr(self, name, child)

    def forward(self, x):
        return self.fn(self, x)


class Net2(Net):
    """Two-input variant of :class:`Net`: forward is ``fn(self, x, y)``."""

    def forward(self, x, y):
        return self.fn(self, x, y)


def layer(module: nn.Module, *then: Callable[[Any], Any]) -> Callable[[], nn.Module]:
    """Factory of a one-layer net ``layer1`` (optionally followed by functions)."""

    def fn(m, x):
        y = m.layer1(x)
        for f in then:
            y = f(y)
        return y

    return lambda: Net(fn, layer1=_fresh(module))


def _fresh(module: nn.Module) -> nn.Module:
    """A newly initialised copy of ``module`` (same constructor arguments)."""
    clone = _clone(module)
    for sub in clone.modules():
        if hasattr(sub, "reset_parameters"):
            sub.reset_parameters()
    return clone


def _clone(module: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(module)


def fn1(f: Callable[..., Any], **children: Callable[[], Any]) -> Callable[[], nn.Module]:
    """Factory of a one-input net ``f(m, x)``; children are built by their factories."""
    return lambda: Net(f, **{k: c() for k, c in children.items()})


def fn2(f: Callable[..., Any], **children: Callable[[], Any]) -> Callable[[], nn.Module]:
    return lambda: Net2(f, **{k: c() for k, c in children.items()})


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    """One reference case: a module factory and the shapes of its inputs."""

    name: str
    factory: Callable[[], nn.Module]
    inputs: tuple[tuple[int, ...], ...]
    doc: str
    positive: bool = False
    """Inputs are |x| + 0.1 (log, sqrt, fractional powers, LPPool with odd norms)."""
    scale: float = 1.0
    """Inputs are scale * N(0, 1) (before ``positive``)."""
    dropout: int | None = None
    """Stochastic: the reference is the mean of this many training-mode passes."""
    mode: str = "train"
    buffers: bool = False
    """Write layer buffers (running statistics) into net_ps (needed in eval mode)."""

    @property
    def input_ids(self) -> list[str]:
        return [f"input{k}" for k in range(len(self.inputs))]


def _trigonometric(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = 0.9 * torch.tanh(x)   # in (-0.9, 0.9): asin, acos, atanh, tan defined and smooth
    return (torch.asin(y) * x + y.acos() * y + torch.atan(x) + y.atanh() + torch.atanh(0.5 * y)
            + torch.tan(y), torch.sinh(y) * x.cosh() + torch.asinh(x) + (2 + x * x).acosh())


def _lin(i: int, o: int, bias: bool = True) -> Callable[[], nn.Module]:
    return lambda: nn.Linear(i, o, bias=bias)


def _lstm_all(m: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out, (h, c) = m.rnn(x)
    return out, h, c


def _lstm_state(m: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h0 = torch.tanh(m.lin(x[:, 0])).unsqueeze(0)
    c0 = torch.tanh(m.lin2(x[:, -1])).unsqueeze(0)
    out, (h, c) = m.rnn(x, (h0, c0))
    return out, h, c


def _chunk_swap(x: torch.Tensor) -> torch.Tensor:
    left, right = torch.chunk(x, 2, 1)
    return torch.cat([right, left], 1)


_P = lambda *shape: (lambda: nn.Parameter(torch.randn(*shape) * 0.5))  # noqa: E731

CASES: list[Case] = [
    # --------------------------------------------------------------- layers
    Case("linear", layer(nn.Linear(4, 3)), ((5, 4),), "Linear, batched"),
    Case("linear_nobias_unbatched", layer(nn.Linear(4, 3, bias=False)), ((4,),),
         "Linear without bias, unbatched input"),
    Case("bilinear", fn2(lambda m, x, y: m.layer1(x, y),
                         layer1=lambda: nn.Bilinear(3, 4, 2)), ((5, 3), (5, 4)),
         "Bilinear of two inputs"),
    Case("flatten", layer(nn.Flatten(start_dim=1, end_dim=2)), ((2, 3, 4, 5),),
         "Flatten(start_dim=1, end_dim=2) of a 4-d input"),
    Case("dropout", fn1(lambda m, x: torch.tanh(m.drop(m.layer1(x))),
                        layer1=_lin(4, 6), drop=lambda: nn.Dropout(p=0.3)), ((3, 4),),
         "Linear, Dropout(p=0.3), tanh", dropout=DROPOUT_PASSES),
    # Channel dropout: the tanh of a per-channel mean tells channel masks from
    # element-wise ones (the mean of a single element cannot).
    Case("dropout1d", layer(nn.Dropout1d(p=0.4), lambda y: torch.tanh(y.mean(-1))),
         ((2, 3, 5),), "Dropout1d(p=0.4), tanh of the per-channel mean", scale=3.0,
         dropout=DROPOUT_PASSES),
    Case("dropout2d", layer(nn.Dropout2d(p=0.3), lambda y: torch.tanh(y.mean((-2, -1)))),
         ((2, 3, 3, 3),), "Dropout2d(p=0.3), tanh of the per-channel mean", scale=3.0,
         dropout=DROPOUT_PASSES),
    Case("dropout3d", layer(nn.Dropout3d(p=0.5),
                            lambda y: torch.tanh(y.mean((-3, -2, -1)))),
         ((2, 2, 2, 2, 3),), "Dropout3d(p=0.5), tanh of the per-channel mean", scale=3.0,
         dropout=DROPOUT_PASSES),
    Case("alpha_dropout", fn1(lambda m, x: torch.tanh(m.drop(m.layer1(x))),
                              layer1=_lin(4, 5), drop=lambda: nn.AlphaDropout(p=0.2)),
         ((3, 4),), "Linear, AlphaDropout(p=0.2), tanh", dropout=DROPOUT_PASSES),
    Case("conv1d", layer(nn.Conv1d(3, 4, 3, stride=2, padding=1)), ((2, 3, 9),),
         "Conv1d stride 2, padding 1"),
    Case("conv1d_groups_same_unbatched",
         layer(nn.Conv1d(4, 6, 3, groups=2, dilation=2, padding="same", bias=False)),
         ((4, 10),), "Conv1d groups=2, dilation=2, padding='same', no bias, unbatched"),
    Case("conv2d", layer(nn.Conv2d(2, 4, (3, 2), stride=(2, 1), padding=(1, 0),
                                   dilation=(1, 2), groups=2)), ((2, 2, 7, 6),),
         "Conv2d with per-dimension kernel/stride/padding/dilation, groups=2"),
    Case("conv2d_valid_unbatched", layer(nn.Conv2d(3, 2, 3, padding="valid")), ((3, 5, 6),),
         "Conv2d padding='valid', unbatched"),
    Case("conv3d", layer(nn.Conv3d(2, 3, 2, stride=(1, 2, 1), padding=1)),
         ((2, 2, 4, 5, 4),), "Conv3d stride (1, 2, 1), padding 1"),
    Case("convtranspose1d", layer(nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1,
                                                     output_padding=1)), ((2, 3, 5),),
         "ConvTranspose1d stride 2, padding 1, output_padding 1"),
    Case("convtranspose2d", layer(nn.ConvTranspose2d(4, 6, (2, 3), stride=(2, 1),
                                                     padding=(0, 1), groups=2,
                                                     dilation=(1, 2))), ((2, 4, 3, 4),),
         "ConvTranspose2d groups=2, dilation (1, 2)"),
    Case("convtranspose3d_unbatched", layer(nn.ConvTranspose3d(2, 2, 2, stride=2, bias=False)),
         ((2, 2, 3, 2),), "ConvTranspose3d stride 2, no bias, unbatched"),
    Case("maxpool1d", layer(nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True)),
         ((2, 3, 10),), "MaxPool1d padding 1, ceil_mode"),
    Case("maxpool2d_unbatched", layer(nn.MaxPool2d((2, 3), stride=(2, 1), padding=(1, 1))),
         ((3, 6, 7),), "MaxPool2d per-dimension kernel/stride/padding, unbatched"),
    Case("maxpool3d", layer(nn.MaxPool3d(2, stride=1, dilation=2)), ((2, 2, 5, 5, 5),),
         "MaxPool3d dilation 2"),
    Case("avgpool1d", layer(nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True,
                                         count_include_pad=False)), ((2, 3, 10),),
         "AvgPool1d padding 1, ceil_mode, count_include_pad=False"),
    Case("avgpool2d", layer(nn.AvgPool2d((3, 2), stride=2, padding=(1, 0),
                                         divisor_override=4)), ((2, 3, 7, 6),),
         "AvgPool2d padding (1, 0), divisor_override=4"),
    Case("avgpool3d", layer(nn.AvgPool3d(2, stride=(2, 1, 2), ceil_mode=True)),
         ((2, 2, 5, 4, 5),), "AvgPool3d stride (2, 1, 2), ceil_mode"),
    Case("lppool1d", layer(nn.LPPool1d(2, 3, stride=2)), ((2, 3, 9),),
         "LPPool1d norm 2, kernel 3, stride 2"),
    Case("lppool2d", layer(nn.LPPool2d(3, (2, 3), stride=(1, 2), ceil_mode=True)),
         ((2, 3, 6, 7),), "LPPool2d norm 3, ceil_mode (positive inputs)", positive=True),
    Case("lppool3d", layer(nn.LPPool3d(1.5, 2)), ((2, 2, 4, 4, 4),),
         "LPPool3d norm 1.5 (positive inputs)", positive=True),
    Case("adaptivemaxpool1d", layer(nn.AdaptiveMaxPool1d(4)), ((2, 3, 10),),
         "AdaptiveMaxPool1d(4) of length 10 (overlapping windows)"),
    Case("adaptivemaxpool2d", layer(nn.AdaptiveMaxPool2d((3, None))), ((2, 3, 7, 5),),
         "AdaptiveMaxPool2d((3, None))"),
    Case("adaptivemaxpool3d", layer(nn.AdaptiveMaxPool3d((2, 3, 2))), ((2, 2, 5, 7, 4),),
         "AdaptiveMaxPool3d((2, 3, 2))"),
    Case("adaptiveavgpool1d", layer(nn.AdaptiveAvgPool1d(3)), ((2, 3, 10),),
         "AdaptiveAvgPool1d(3) of length 10"),
    Case("adaptiveavgpool2d_unbatched", layer(nn.AdaptiveAvgPool2d((None, 3))), ((3, 5, 7),),
         "AdaptiveAvgPool2d((None, 3)), unbatched"),
    Case("adaptiveavgpool3d", layer(nn.AdaptiveAvgPool3d(2)), ((2, 2, 5, 4, 3),),
         "AdaptiveAvgPool3d(2)"),
    Case("batchnorm1d", layer(nn.BatchNorm1d(3, eps=1e-3, momentum=0.2)), ((6, 3, 5),),
         "BatchNorm1d, training mode (batch statistics)"),
    Case("batchnorm1d_2d_input", layer(nn.BatchNorm1d(4)), ((8, 4),),
         "BatchNorm1d of an (N, C) input, training mode"),
    Case("batchnorm2d_noaffine", layer(nn.BatchNorm2d(3, affine=False)), ((4, 3, 3, 3),),
         "BatchNorm2d affine=False, training mode"),
    Case("batchnorm3d", layer(nn.BatchNorm3d(2, eps=1e-4, momentum=None)),
         ((3, 2, 2, 3, 3),), "BatchNorm3d momentum=None, training mode"),
    Case("batchnorm2d_eval", layer(nn.BatchNorm2d(3)), ((2, 3, 4, 4),),
         "BatchNorm2d in eval mode with random running statistics (in net_ps)",
         mode="eval", buffers=True),
    Case("instancenorm1d", layer(nn.InstanceNorm1d(3, affine=True)), ((2, 3, 8),),
         "InstanceNorm1d affine=True"),
    Case("instancenorm2d", layer(nn.InstanceNorm2d(3, eps=1e-3, track_running_stats=True)),
         ((2, 3, 4, 5),), "InstanceNorm2d track_running_stats=True (training mode: "
         "instance statistics)"),
    Case("instancenorm3d_unbatched", layer(nn.InstanceNorm3d(2, affine=True)),
         ((2, 3, 4, 3),), "InstanceNorm3d affine=True, unbatched"),
    Case("layernorm", layer(nn.LayerNorm([4, 5], eps=1e-4)), ((3, 2, 4, 5),),
         "LayerNorm over the last two dimensions"),
    Case("layernorm_nobias", layer(nn.LayerNorm(6, bias=False)), ((3, 6),),
         "LayerNorm bias=False"),
    Case("layernorm_noaffine_unbatched", layer(nn.LayerNorm(6, elementwise_affine=False)),
         ((6,),), "LayerNorm elementwise_affine=False, unbatched"),
    # --------------------------------------------------------------- activations
    Case("relu", fn1(lambda m, x: torch.relu(x) + F.relu(-x)), ((3, 5),),
         "torch.relu, F.relu"),
    Case("relu6", fn1(lambda m, x: F.relu6(x)), ((3, 5),), "F.relu6", scale=5.0),
    Case("hardtanh", fn1(lambda m, x: F.hardtanh(x, -0.5, 1.5)), ((3, 5),),
         "F.hardtanh(min_val=-0.5, max_val=1.5)", scale=2.0),
    Case("hardswish", fn1(lambda m, x: F.hardswish(x)), ((3, 5),), "F.hardswish", scale=3.0),
    Case("selu", fn1(lambda m, x: torch.selu(x)), ((3, 5),), "torch.selu", scale=2.0),
    Case("silu", fn1(lambda m, x: F.silu(x)), ((3, 5),), "F.silu", scale=2.0),
    Case("leaky_relu", fn1(lambda m, x: F.leaky_relu(x, negative_slope=0.2)), ((3, 5),),
         "F.leaky_relu(negative_slope=0.2)"),
    Case("gelu", fn1(lambda m, x: F.gelu(x)), ((3, 5),), "F.gelu (exact)", scale=2.0),
    Case("gelu_tanh", fn1(lambda m, x: F.gelu(x, approximate="tanh")), ((3, 5),),
         "F.gelu(approximate='tanh')", scale=2.0),
    Case("logsigmoid", fn1(lambda m, x: F.logsigmoid(x)), ((3, 5),), "F.logsigmoid",
         scale=3.0),
    Case("tanhshrink", fn1(lambda m, x: F.tanhshrink(x)), ((3, 5),), "F.tanhshrink",
         scale=2.0),
    Case("softsign", fn1(lambda m, x: F.softsign(x)), ((3, 5),), "F.softsign", scale=3.0),
    Case("softplus", fn1(lambda m, x: F.softplus(x, beta=2.0, threshold=1.5)), ((3, 5),),
         "F.softplus(beta=2, threshold=1.5)", scale=2.0),
    Case("tanh", fn1(lambda m, x: x.tanh() + F.tanh(2 * x)), ((3, 5),),
         "Tensor.tanh method, F.tanh"),
    Case("sigmoid", fn1(lambda m, x: torch.sigmoid(x) * x.sigmoid()), ((3, 5),),
         "torch.sigmoid, Tensor.sigmoid", scale=3.0),
    Case("hardsigmoid", fn1(lambda m, x: F.hardsigmoid(x)), ((3, 5),), "F.hardsigmoid",
         scale=4.0),
    Case("mish", fn1(lambda m, x: F.mish(x)), ((3, 5),), "F.mish", scale=2.0),
    Case("elu", fn1(lambda m, x: F.elu(x, alpha=0.5)), ((3, 5),), "F.elu(alpha=0.5)",
         scale=2.0),
    Case("celu", fn1(lambda m, x: torch.celu(x, alpha=1.5)), ((3, 5),),
         "torch.celu(alpha=1.5)", scale=2.0),
    Case("softmax", fn1(lambda m, x: F.softmax(x, dim=1) + x.softmax(0)), ((3, 4, 2),),
         "F.softmax(dim=1), Tensor.softmax(0)", scale=2.0),
    Case("log_softmax", fn1(lambda m, x: x.log_softmax(dim=-1) - F.log_softmax(x, 0)),
         ((3, 5),), "Tensor.log_softmax(dim=-1), F.log_softmax(dim=0)", scale=2.0),
    Case("activation_modules", lambda: nn.Sequential(
        nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Softplus(beta=2.0), nn.Linear(8, 8),
        nn.LeakyReLU(0.1), nn.Linear(8, 6), nn.GELU(approximate="tanh"), nn.Hardtanh(-1, 2),
        nn.ELU(0.7), nn.SiLU(), nn.Identity(), nn.LogSoftmax(dim=1)),
         ((5, 4),), "nn.Sequential with activation modules (layers; nn.Identity is "
         "traced through); layer ids layer_0, layer_1, ..."),
    # --------------------------------------------------------------- arithmetic
    Case("add", fn1(lambda m, x: torch.add(x, m.layer1(x), alpha=0.5) + 1.5 + x.add(x)
                    , layer1=_lin(5, 5)), ((3, 5),),
         "torch.add(alpha=0.5), operator +, Tensor.add"),
    Case("sub", fn1(lambda m, x: (2.0 - x) - m.layer1(x).sub(x, alpha=2) - torch.sub(x, 1),
                    layer1=_lin(5, 5)), ((3, 5),),
         "number - tensor, Tensor.sub(alpha=2), torch.sub"),
    Case("mul", fn1(lambda m, x: x * m.layer1(x) * 3.0 + torch.mul(x, x).mul(0.5),
                    layer1=_lin(5, 5)), ((3, 5),), "operator *, torch.mul, Tensor.mul"),
    Case("div", fn1(lambda m, x: x / (m.layer1(x).abs() + 1.0) + 1.0 / (x * x + 1.0)
                    + torch.div(x, 4.0), layer1=_lin(5, 5)), ((3, 5),),
         "operator / (tensor and number operands), torch.div"),
    Case("neg", fn1(lambda m, x: -x + torch.neg(x * 2)), ((3, 5),),
         "unary minus, torch.neg"),
    Case("pow", fn1(lambda m, x: x ** 2 + torch.pow(x, 1.5) + x.pow(x) + 2.0 ** x),
         ((3, 5),), "operator **, torch.pow, Tensor.pow (tensor exponent), number ** tensor",
         positive=True),
    Case("matmul", fn1(lambda m, x: x @ m.w + torch.matmul(x, m.layer1.weight.transpose(0, 1)),
                       w=_P(4, 3), layer1=_lin(4, 3)), ((2, 5, 4),),
         "operator @ with a free parameter, torch.matmul with a layer's weight (get_attr)"),
    Case("exp", fn1(lambda m, x: torch.exp(x) + x.exp()), ((3, 5),), "torch.exp, Tensor.exp"),
    Case("log", fn1(lambda m, x: torch.log(x) + x.log()), ((3, 5),), "torch.log, Tensor.log",
         positive=True),
    Case("sqrt", fn1(lambda m, x: torch.sqrt(x) * x.sqrt()), ((3, 5),),
         "torch.sqrt, Tensor.sqrt", positive=True),
    Case("abs", fn1(lambda m, x: abs(x) + torch.abs(x - 1) + x.abs()), ((3, 5),),
         "abs(), torch.abs, Tensor.abs"),
    Case("clamp", fn1(lambda m, x: x.clamp(min=-0.5, max=0.8) + torch.clamp(x, max=0.3)
                      + torch.clip(x, -1, 1) + x.clip(-0.2, 0.2)), ((3, 5),),
         "Tensor.clamp(min, max), torch.clamp(max), torch.clip, Tensor.clip", scale=2.0),
    # --------------------------------------------------------------- shape and indexing
    Case("cat", fn1(lambda m, x: torch.cat([x, m.layer1(x), x * 2], dim=1),
                    layer1=_lin(4, 2)), ((3, 4),), "torch.cat of three tensors, dim=1"),
    Case("stack", fn1(lambda m, x: torch.stack([x, x * 2], dim=-1) + torch.stack((x, x))[0:1]
                      .unsqueeze(-1)), ((3, 4),), "torch.stack dim=-1 and default dim"),
    Case("flatten_function", fn1(lambda m, x: torch.flatten(x, 1) + x.flatten(start_dim=1)),
         ((2, 3, 4),), "torch.flatten(x, 1), Tensor.flatten(start_dim=1)"),
    Case("flatten_all", fn1(lambda m, x: torch.flatten(x)), ((2, 3, 4),),
         "torch.flatten with default dims (all)"),
    Case("reshape", fn1(lambda m, x: torch.reshape(x, (4, -1)) + x.reshape(4, 6)
                        + x.reshape([-1, 6])), ((2, 3, 4),),
         "torch.reshape(tuple), Tensor.reshape(variadic), Tensor.reshape(list)"),
    Case("view", fn1(lambda m, x: m.layer1(x.view(3, -1)).view(-1), layer1=_lin(8, 2)),
         ((3, 2, 4),), "Tensor.view before a Linear and to 1-d"),
    Case("permute", fn1(lambda m, x: x.permute(0, 2, 1).permute((2, 1, 0))
                        + torch.permute(x, (1, 2, 0))), ((2, 3, 4),),
         "Tensor.permute (variadic and tuple), torch.permute"),
    Case("transpose", fn1(lambda m, x: torch.transpose(x, 0, 2) + x.transpose(2, 0)
                          + torch.swapaxes(x, 0, 2) + x.swapaxes(0, 2).contiguous()),
         ((2, 3, 4),),
         "torch.transpose, Tensor.transpose, torch.swapaxes, Tensor.swapaxes, contiguous"),
    Case("squeeze", fn1(lambda m, x: x.squeeze(1).sum(-1) + torch.squeeze(x)
                        + x.squeeze((1, 3))), ((3, 1, 4, 1),),
         "Tensor.squeeze(dim), torch.squeeze, squeeze of a tuple of dims"),
    Case("unsqueeze", fn1(lambda m, x: torch.unsqueeze(x, 1) + x.unsqueeze(-2)), ((3, 4),),
         "torch.unsqueeze, Tensor.unsqueeze(-2)"),
    Case("getitem", fn1(lambda m, x: (x[:, 1:4:2], x[..., 0], x[0], x[:, None, -1],
                                      x[1:, ::2, 1:3])), ((3, 5, 4),),
         "indexing: slices with step, Ellipsis, integers, None (five outputs)"),
    Case("sum", fn1(lambda m, x: (x.sum(dim=1), torch.sum(x, dim=(0, 2), keepdim=True),
                                  x.sum())), ((2, 3, 4),),
         "Tensor.sum(dim), torch.sum(tuple dims, keepdim), full sum (three outputs)"),
    Case("mean", fn1(lambda m, x: (torch.mean(x, dim=-1, keepdim=True), x.mean((1, 2)),
                                   x.mean())), ((2, 3, 4),),
         "torch.mean(dim, keepdim), Tensor.mean(tuple), full mean (three outputs)"),
    # --------------------------------------------------------------- composite nets
    Case("cnn", fn1(lambda m, x: m.fc2(torch.tanh(m.fc1(m.flat(m.pool2(F.relu(m.conv2(
        m.pool1(torch.relu(m.conv1(x)))))))))),
        conv1=lambda: nn.Conv2d(1, 4, 3, padding=1), pool1=lambda: nn.MaxPool2d(2),
        conv2=lambda: nn.Conv2d(4, 6, 3), pool2=lambda: nn.AvgPool2d(2),
        flat=lambda: nn.Flatten(), fc1=_lin(24, 10), fc2=_lin(10, 3)), ((2, 1, 12, 12),),
        "Conv2d, relu, MaxPool2d, Conv2d, relu, AvgPool2d, Flatten, Linear, tanh, Linear"),
    Case("two_input_cat", fn2(lambda m, x, y: m.layer2(torch.tanh(
        torch.cat([m.layer1(x), y], dim=1))), layer1=_lin(3, 4), layer2=_lin(9, 2)),
        ((4, 3), (4, 5)), "two inputs: Linear of the first, torch.cat with the second, "
        "tanh, Linear"),
    Case("two_output", fn1(lambda m, x: (m.out1(torch.tanh(m.hidden(x))),
                                         F.softmax(m.out2(torch.tanh(m.hidden(x))), dim=1)),
                           hidden=_lin(3, 6), out1=_lin(6, 2), out2=_lin(6, 4)), ((5, 3),),
         "two outputs (Linear head and softmax head) of a shared hidden layer"),
    Case("mlp_unbatched", fn1(lambda m, x: m.layer3(torch.tanh(m.layer2(torch.tanh(
        m.layer1(x))))), layer1=_lin(2, 5), layer2=_lin(5, 5), layer3=_lin(5, 1)), ((2,),),
        "Linear-tanh-Linear-tanh-Linear on an unbatched input (as suite case 001)"),
    Case("nested_modules", lambda: Net(
        lambda m, x: m.head(m.block(x)),
        block=nn.Sequential(nn.Sequential(nn.Linear(3, 5), nn.Tanh()),
                            nn.LayerNorm(5), nn.Linear(5, 4)),
        head=nn.Sequential(nn.Sigmoid(), nn.Linear(4, 2))), ((4, 3),),
        "nested nn.Sequential: submodule paths block.0.0, ... become ids block_0_0, ..."),
    Case("shared_layer", fn1(lambda m, x: m.layer1(torch.tanh(m.layer1(x))),
                             layer1=_lin(4, 4)), ((3, 4),),
         "one Linear applied twice (weight sharing)"),
    Case("free_parameters", fn1(lambda m, x: m.layer1(x) * m.scale + m.offset,
                                layer1=_lin(3, 4), scale=_P(4),
                                offset=lambda: torch.randn(4)), ((5, 3),),
         "root-level nn.Parameter (params.scale) and buffer (params.offset)"),
    Case("residual_block", fn1(lambda m, x: F.relu(x + m.bn(m.conv(x))).mean((2, 3)),
                               conv=lambda: nn.Conv2d(3, 3, 3, padding=1),
                               bn=lambda: nn.BatchNorm2d(3)), ((2, 3, 5, 5),),
         "Conv2d, BatchNorm2d (training mode), residual add, relu, global mean"),
    # --------------------------------------------------------------- comparisons, where, math
    Case("where", fn1(lambda m, x: torch.where(x > 0, x, 0.1 * x) + x.where(x < 0.5, -x)
                      + torch.where(x.le(0.2), 1.0, x) + torch.where(0.3 <= x, -1.0, 2.0)),
         ((3, 5),), "torch.where (operator >, <=), Tensor.where, numbers as branches"),
    Case("comparisons", fn1(lambda m, x: (x > 0.3) * x + torch.gt(x, -0.2) * x
                            + torch.greater(x, 0.5) * 2.0 + x.lt(0.1) * x + torch.less(x, 0)
                            * x + x.ge(-0.4) * x + torch.greater_equal(x, 0.6) * x
                            + (x >= 0.7) * x + x.le(0.0) * x + torch.less_equal(x, 0.8) * x
                            + (x < -0.5) * x + torch.where(torch.eq(x.clamp(min=0.0), 0.0),
                                                           x, -x)
                            + (x.clamp(max=-0.3) == -0.3) * x + x.clamp(min=0.2).eq(0.2) * x),
         ((4, 5),), "gt, lt, ge, le, eq: operators, torch functions, aliases, methods; "
         "bool tensors times floats and as where conditions"),
    Case("erf_sign", fn1(lambda m, x: torch.erf(x) + x.erf() * torch.sign(x) + x.sign()
                         + torch.special.erf(2 * x)), ((3, 5),),
         "torch.erf, Tensor.erf, torch.special.erf, torch.sign, Tensor.sign", scale=2.0),
    Case("sin_cos", fn1(lambda m, x: torch.sin(x) * x.cos() + x.sin() + torch.cos(2 * x)),
         ((3, 5),), "torch.sin, Tensor.sin, torch.cos, Tensor.cos", scale=3.0),
    Case("maximum_minimum", fn1(lambda m, x: torch.maximum(x, m.layer1(x)) + x.maximum(0.5 * x)
                                + torch.minimum(x, -x) + x.minimum(m.w),
                                layer1=_lin(5, 5), w=_P(5)), ((3, 5),),
         "torch.maximum, Tensor.maximum, torch.minimum, Tensor.minimum (free parameter)"),
    Case("pad", fn1(lambda m, x: (F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), value=-0.5),
                                  F.pad(x, (-1, 2)), F.pad(x, (2, 1), mode="reflect"),
                                  F.pad(x, (1, 2, 1, 1), mode="replicate"),
                                  F.pad(x, (2, 1), mode="circular"))), ((2, 3, 5),),
         "F.pad: constant (value, negative pads), reflect, replicate, circular (six outputs)"),
    Case("pad_4d", fn1(lambda m, x: (F.pad(x, (1, 2, 2, 1), mode="reflect"),
                                     F.pad(x, (1, 1, 2, 0), mode="circular"),
                                     F.pad(x, (1, 0, 1, 2, 0, 1), mode="replicate"),
                                     F.pad(x, (1, 1, 0, 0, 0, 0, 1, 0), value=2.0))),
         ((2, 2, 4, 5),), "F.pad of a 4-d input: 2-d reflect and circular, 3-d replicate "
         "(unbatched), constant on every dimension (four outputs)"),
    Case("amax_amin", fn1(lambda m, x: (torch.amax(x, 1), x.amax(dim=(0, 2), keepdim=True),
                                        torch.amin(x, dim=-1, keepdim=True), x.amin())),
         ((2, 3, 4),), "torch.amax, Tensor.amax(tuple, keepdim), torch.amin, Tensor.amin() "
         "(four outputs)"),
    Case("prod", fn1(lambda m, x: (torch.prod(x), x.prod(1), torch.prod(x, dim=-1,
                                                                       keepdim=True))),
         ((2, 3, 4),), "torch.prod (all), Tensor.prod(dim), torch.prod(dim, keepdim) "
         "(three outputs)"),
    Case("flip", fn1(lambda m, x: torch.flip(x, [0, 2]) + x.flip(1, 2) + x.flip([-1])
                     + x.flip(0)), ((2, 3, 4),),
         "torch.flip, Tensor.flip (variadic and list)"),
    # --------------------------------------------------------------- PReLU
    Case("prelu", fn1(lambda m, x: m.act(x) + m.act1(x * 2),
                      act=lambda: nn.PReLU(3), act1=lambda: nn.PReLU()),
         ((2, 3, 4),), "PReLU(3) per channel (axis 1) and PReLU() (random weights)"),
    Case("prelu_rank1_2", fn1(lambda m, x: (m.act(x), m.act6(x.unsqueeze(0))),
                              act=lambda: nn.PReLU(), act6=lambda: nn.PReLU(6)), ((6,),),
         "PReLU() of a 1-d input (one channel), PReLU(6) of a (1, 6) input (two outputs)"),
    Case("prelu_conv", fn1(lambda m, x: m.fc(m.flat(m.act(m.conv(x)))),
                           conv=lambda: nn.Conv2d(2, 4, 3), act=lambda: nn.PReLU(4),
                           flat=lambda: nn.Flatten(), fc=_lin(16, 2)), ((3, 2, 4, 4),),
         "Conv2d, PReLU(4), Flatten, Linear"),
    # --------------------------------------------------------------- recurrent
    Case("lstm", fn1(_lstm_all, rnn=lambda: nn.LSTM(4, 6, num_layers=2, bidirectional=True)),
         ((5, 3, 4),), "LSTM(4, 6, num_layers=2, bidirectional=True): output, h_n, c_n"),
    Case("lstm_proj_state", fn1(_lstm_state, lin=_lin(4, 3), lin2=_lin(4, 6),
                                rnn=lambda: nn.LSTM(4, 6, batch_first=True, proj_size=3)),
         ((2, 5, 4),), "LSTM(batch_first=True, proj_size=3) from an initial state "
         "(h_0, c_0) computed from the input"),
    Case("gru", fn1(lambda m, x: m.rnn(x)[0].tanh() + m.rnn(x)[1].sum(0).unsqueeze(1),
                    rnn=lambda: nn.GRU(4, 5, num_layers=3, batch_first=True, dropout=0.3)),
         ((2, 6, 4),), "GRU(num_layers=3, batch_first=True, dropout=0.3) (no dropout in "
         "eval mode), output and h_n", mode="eval"),
    Case("gru_state", fn1(lambda m, x: m.rnn(x, torch.tanh(m.lin(x[0])).unsqueeze(0))[1],
                          lin=_lin(3, 4), rnn=lambda: nn.GRU(3, 4, bias=False)),
         ((6, 2, 3),), "GRU(bias=False) from an initial state h_0 computed from the input"),
    Case("rnn_unbatched", fn1(lambda m, x: m.rnn(x),
                              rnn=lambda: nn.RNN(3, 4, nonlinearity="relu",
                                                 bidirectional=True)),
         ((7, 3),), "RNN(nonlinearity='relu', bidirectional=True) of an unbatched sequence, "
         "returned whole (output, h_n)"),
    # --------------------------------------------------------------- more layers, functions
    Case("local_response_norm", fn1(lambda m, x: m.lrn(x) + F.local_response_norm(
        x, 2, alpha=0.1, beta=0.5, k=2.0), lrn=lambda: nn.LocalResponseNorm(3, k=1.5)),
         ((2, 6, 3, 3),), "LocalResponseNorm(3) and F.local_response_norm (even size)",
         scale=2.0),
    Case("activation_layers", fn1(
        lambda m, x: m.a(x) + m.b(x) + m.c(x) + m.d(x) + m.e(x) + m.sp(x) + m.g(x),
        a=lambda: nn.LeakyReLU(0.2), b=lambda: nn.ELU(0.5), c=lambda: nn.Hardtanh(-0.5, 0.8),
        d=lambda: nn.Softmax(dim=1), e=lambda: nn.GELU(), sp=lambda: nn.Softplus(2.0, 3.0),
        g=lambda: nn.Mish()), ((3, 5),),
         "activation modules as layers (LeakyReLU, ELU, Hardtanh, Softmax, GELU, "
         "Softplus, Mish)", scale=2.0),
    Case("activation_layers_more", fn1(
        lambda m, x: (m.a(x) + m.b(x) + m.c(x) + m.d(x) + m.e(x), m.sg(x) + m.g(x) + m.h(x)
                      + m.i(x) + m.j(x) + m.k(x)),
        a=nn.ReLU6, b=nn.SELU, c=lambda: nn.CELU(0.7), d=nn.Hardswish, e=nn.Hardsigmoid,
        sg=nn.Sigmoid, g=nn.Tanh, h=nn.LogSigmoid, i=nn.Softsign, j=nn.Tanhshrink,
        k=lambda: nn.LogSoftmax(dim=0)), ((3, 5),),
         "more activation modules as layers (two outputs)", scale=3.0),
    Case("functional_pools", fn1(lambda m, x: (
        F.max_pool2d(x, 2), F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
        F.adaptive_avg_pool2d(x, (2, 3)), F.adaptive_max_pool2d(x, 3),
        F.avg_pool1d(x.flatten(2), 4), F.lp_pool2d(x, 2.0, 2),
        torch.max_pool1d(x.flatten(2), 3, 2))), ((2, 3, 6, 6),),
         "functional pools and adaptive pools (seven outputs)"),
    Case("functional_pools_1d_3d", fn1(lambda m, x: (
        F.max_pool3d(x, 2, stride=1, dilation=(1, 2, 1)), F.avg_pool3d(x, 2, divisor_override=3),
        F.adaptive_avg_pool3d(x, (1, 2, None)), F.adaptive_max_pool3d(x, 2),
        F.lp_pool3d(x.abs() + 0.1, 3.0, 2), F.max_pool1d(x.flatten(2), 4, ceil_mode=True),
        F.adaptive_avg_pool1d(x.flatten(2), 5), F.adaptive_max_pool1d(x.flatten(2), 4),
        F.lp_pool1d(x.flatten(2).abs() + 0.1, 1.5, 3, stride=2))), ((2, 2, 4, 5, 4),),
         "functional 1-d and 3-d pools and adaptive pools (nine outputs)"),
    Case("rounding_division", fn1(lambda m, x: (
        torch.div(x, 0.7, rounding_mode="floor"), torch.div(x, 0.7, rounding_mode="trunc"),
        torch.floor_divide(x, 0.3), x // 0.4, x % 0.5, torch.remainder(x, -0.6))),
         ((4, 5),), "div(rounding_mode=floor/trunc), floor_divide, //, %, remainder",
         scale=3.0),
    Case("cumsum", fn1(lambda m, x: torch.cumsum(x, 1) + x.cumsum(dim=-1)), ((3, 4),),
         "torch.cumsum, Tensor.cumsum"),
    Case("reshape_as_rounding", fn1(lambda m, x: (
        torch.tanh(x).reshape_as(x.transpose(0, 1)) + x.view_as(x.transpose(0, 1))
        + torch.unflatten(x, 1, (2, -1)).flatten(1).reshape(4, 3)
        + x.unflatten(0, (1, 3))[0].transpose(0, 1)
        + _chunk_swap(x).transpose(0, 1) * x.chunk(3)[2].sum(),
        torch.floor(x) + x.ceil() + torch.round(x) + x.round(decimals=1) + torch.trunc(x))),
         ((3, 4),), "Tensor.reshape_as, Tensor.view_as, unflatten, chunk; floor, ceil, "
         "round, trunc (two outputs)", scale=3.0),
    Case("trigonometric", fn1(lambda m, x: _trigonometric(x)), ((3, 4),),
         "tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh (torch. and Tensor.; "
         "arguments kept inside their domains by tanh)", scale=2.0),
]


# ----------------------------------------------------------------------------- building
def case_seed(name: str, i: int) -> int:
    return (zlib.crc32(name.encode()) + 7919 * i) % (2**31)


def _randomize(module: nn.Module, case: Case) -> None:
    """Random affine parameters for norm layers (their defaults are 1 and 0), random
    PReLU weights (default: constant) and random running statistics where the case writes
    buffers."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.PReLU):  # default: init everywhere
                sub.weight.uniform_(-0.5, 0.5)
            if isinstance(sub, (nn.modules.batchnorm._NormBase, nn.LayerNorm)):
                if getattr(sub, "weight", None) is not None:
                    sub.weight.uniform_(0.5, 1.5)
                if getattr(sub, "bias", None) is not None:
                    sub.bias.uniform_(-0.5, 0.5)
                if case.buffers and getattr(sub, "running_mean", None) is not None:
                    sub.running_mean.normal_(0.0, 0.5)
                    sub.running_var.uniform_(0.5, 2.0)


def build(case: Case, i: int = 1) -> tuple[nn.Module, list[torch.Tensor]]:
    """The module of ``case`` with the parameters of repetition ``i`` (in the case's mode)
    and its float32 inputs."""
    seed = case_seed(case.name, i)
    torch.manual_seed(seed)
    module = case.factory()
    _randomize(module, case)
    module.train(case.mode == "train")
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = []
    for shape in case.inputs:
        x = torch.randn(shape, generator=generator) * case.scale
        if case.positive:
            x = x.abs() + 0.1
        inputs.append(x)
    return module, inputs


def _outputs(result: Any) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def reference(case: Case, module: nn.Module, inputs: list[torch.Tensor], i: int
              ) -> tuple[list[np.ndarray], float]:
    """PyTorch's outputs of the original module and the per-case error scale.

    For stochastic cases, the outputs are the float64 mean of ``case.dropout``
    training-mode passes and the scale is the largest standard error of that mean.
    """
    import copy

    module = copy.deepcopy(module)  # training-mode passes update running statistics
    with torch.no_grad():
        if not case.dropout:
            return [o.detach().numpy() for o in _outputs(module(*inputs))], 0.0
        torch.manual_seed(case_seed(case.name, i) + 2)
        batched = torch.func.vmap(lambda *xs: module(*xs), randomness="different")
        total = total_sq = None
        done = 0
        while done < case.dropout:
            n = min(4096, case.dropout - done)
            outs = _outputs(batched(*[x.unsqueeze(0).expand(n, *x.shape) for x in inputs]))
            sums = [o.double().sum(0) for o in outs]
            squares = [(o.double() ** 2).sum(0) for o in outs]
            total = sums if total is None else [a + b for a, b in zip(total, sums)]
            total_sq = squares if total_sq is None else [a + b for a, b in zip(total_sq, squares)]
            done += n
        n = case.dropout
        means = [t / n for t in total]
        std_err = max(float(((q / n - m**2).clamp(min=0) / n).sqrt().max())
                      for q, m in zip(total_sq, means))
        return [m.numpy() for m in means], std_err


def _round_up(x: float) -> float:
    exponent = math.floor(math.log10(x))
    mantissa = math.ceil(x / 10**exponent - 1e-9)
    return float(f"{mantissa}e{exponent}")


def tolerance(case: Case, outputs: list[list[np.ndarray]], std_err: float) -> float:
    if case.dropout:
        # Reference and runner means each carry std_err: 6 standard errors of the difference.
        return _round_up(max(6 * math.sqrt(2) * std_err, 1e-3))
    peak = max((float(np.max(np.abs(o))) for out in outputs for o in out if o.size),
               default=1.0)
    return _round_up(1e-5 * max(1.0, peak))


# ----------------------------------------------------------------------------- writing
def _write_arrays(path: Path, **groups: Any) -> None:
    from petab_sciml.arrays import write_array_file

    write_array_file(path, **groups)
    path.chmod(0o644)  # the atomic writer's temporary file is private (0600)


def _net_ps(case: Case, network: Any, module: nn.Module) -> dict[str, dict[str, np.ndarray]]:
    from petab_sciml.formats.torch_fx import parameters_from_module

    params = parameters_from_module(module, network)
    out: dict[str, dict[str, np.ndarray]] = {}
    for group, arrays in params.items():
        infos = (network.layers[group].arrays() if group in network.layers else None)
        for name, value in arrays.items():
            # Layer buffers (running statistics) only where the reference uses them.
            if infos is not None and not infos[name].trainable and not case.buffers:
                continue
            out.setdefault(group, {})[name] = value
    return out


def write_case(case: Case, folder: Path) -> dict[str, Any]:
    from petab_sciml.formats import yaml as yaml_format
    from petab_sciml.formats.torch_fx import network_from_module

    folder.mkdir(parents=True)
    module, _ = build(case, 1)
    network = network_from_module(module, NET_ID, input_ids=case.input_ids)
    yaml_format.write(network, folder / "net.yaml")
    solutions: dict[str, Any] = {"net_file": "net.yaml"}
    n_in = len(case.inputs)
    input_keys = ["net_input"] if n_in == 1 else [f"net_input_arg{k}" for k in range(n_in)]
    files: dict[str, list[str]] = {k: [] for k in (*input_keys, "net_ps", "net_output")}
    all_outputs, worst_err = [], 0.0
    for i in range(1, REPETITIONS + 1):
        module, inputs = build(case, i)
        for k, (key, x) in enumerate(zip(input_keys, inputs)):
            name = f"net_input_{i}.hdf5" if n_in == 1 else f"net_input_{i}_arg{k}.hdf5"
            _write_arrays(folder / name, inputs={case.input_ids[k]: {"data": x.numpy()}})
            files[key].append(name)
        ps = _net_ps(case, network, module)
        if ps:
            _write_arrays(folder / f"net_ps_{i}.hdf5", parameters={NET_ID: ps})
            files["net_ps"].append(f"net_ps_{i}.hdf5")
        outputs, std_err = reference(case, module, inputs, i)
        worst_err = max(worst_err, std_err)
        all_outputs.append(outputs)
        _write_arrays(folder / f"net_output_{i}.hdf5",
                      outputs={f"output{k}": {"data": o} for k, o in enumerate(outputs)})
        files["net_output"].append(f"net_output_{i}.hdf5")
    for key in (*input_keys, "net_ps", "net_output"):
        if files[key]:
            solutions[key] = files[key]
    solutions["tol"] = tolerance(case, all_outputs, worst_err)
    if case.dropout:
        solutions["dropout"] = case.dropout
    if case.mode != "train":
        solutions["mode"] = case.mode
    (folder / "solutions.yaml").write_text(yaml.safe_dump(solutions, sort_keys=False))
    return {"layers": sorted({layer.type for layer in network.layers.values()}),
            "functions": sorted({n.function for n in network.nodes if n.function}),
            "tol": solutions["tol"], "params": bool(files["net_ps"])}


def case_folder(index: int, case: Case) -> str:
    return f"{index:03d}_{case.name}"


def write_readme(summaries: list[tuple[str, Case, dict[str, Any]]]) -> None:
    lines = [
        "# Reference network test cases",
        "",
        "Generated by `python test_cases/generate.py` (from the repository root; needs torch",
        "and h5py). Do not edit by hand: change the modules in `generate.py` and regenerate.",
        "Seeds derive from the case names, so regeneration is reproducible",
        "(`python test_cases/generate.py --only NAME ...` rewrites single cases).",
        "Run them with `petab-sciml test-cases run test_cases` (`--backend all` adds",
        "cross-backend columns); `tests/test_torch_fx.py` checks that every `net.yaml`",
        "is what the generator exports today.",
        "",
        "Layout as in the official suite's `ml_model_import` cases: `net.yaml` (exported from",
        "the PyTorch module with `petab_sciml.formats.torch_fx`), `net_input_i.hdf5`",
        "(`inputs/<input_id>/data`; two-input cases `net_input_i_arg0.hdf5` and",
        "`net_input_i_arg1.hdf5`), `net_ps_i.hdf5` (`parameters/net0/<layer>/<array>`, only",
        "when the network has parameters), `net_output_i.hdf5` (`outputs/output<k>/data`),",
        "i = 1..3, and `solutions.yaml` with the suite's keys plus:",
        "",
        "- `tol`: absolute tolerance (float32: 1e-5 times the largest output magnitude, at",
        "  least 1e-5);",
        "- `dropout`: number of training-mode passes; the reference is the float64 mean of",
        "  that many PyTorch passes, and `tol` is 6 standard errors of the difference of two",
        "  such means (reference and the implementation under test);",
        "- `mode: eval` where the reference was computed in eval mode (default: training",
        "  mode, as in the official suite; BatchNorm then uses batch statistics and net_ps",
        "  carries no running statistics).",
        "",
        "Expected outputs come from PyTorch running the original module, never from a",
        "petab_sciml backend. All arrays are float32 in PyTorch index order, except dropout",
        "references (float64).",
        "",
        "| case | description | layers | functions | tol |",
        "|---|---|---|---|---|",
    ]
    for folder, case, info in summaries:
        extra = f" ({case.dropout} passes)" if case.dropout else ""
        extra += " (eval mode)" if case.mode != "train" else ""
        lines.append(f"| `{folder}` | {case.doc}{extra} | {', '.join(info['layers']) or '-'} "
                     f"| {', '.join(info['functions']) or '-'} | {info['tol']:g} |")
    (HERE / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="regenerate only these case names")
    args = parser.parse_args(argv)
    names = [c.name for c in CASES]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"duplicate case names: {sorted(dupes)}")
    summaries = []
    for index, case in enumerate(CASES, start=1):
        folder = HERE / case_folder(index, case)
        if args.only and case.name not in args.only:
            continue
        for old in HERE.glob(f"[0-9][0-9][0-9]_{case.name}"):
            shutil.rmtree(old)
        if folder.exists():
            shutil.rmtree(folder)
        info = write_case(case, folder)
        summaries.append((folder.name, case, info))
        print(f"{folder.name}: tol {info['tol']:g}", flush=True)
    if not args.only:
        wanted = {case_folder(i, c) for i, c in enumerate(CASES, start=1)}
        for old in HERE.iterdir():
            if old.is_dir() and re.fullmatch(r"\d{3}_.+", old.name) and old.name not in wanted:
                shutil.rmtree(old)
        write_readme(summaries)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""TorchScript patterns found in real networks (the torchvision table of
benchmarks/torchvision_table.py), each in a small module written here: scripted and traced,
saved and loaded back, lifted, and run in both backends against PyTorch's own output.
Anything still unsupported stops with one line naming the operation."""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import Tensor, nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats.torchscript import network_from_torchscript  # noqa: E402
from petab_sciml.plugins import get_backend  # noqa: E402


def _archive(module: nn.Module, x: Tensor, kind: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(module) if kind == "script" else torch.jit.trace(
            module, (x,))
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def _check(module: nn.Module, x: Tensor, kind: str, tol: float = 1e-5) -> Any:
    module = module.eval()
    with torch.no_grad():
        expected = module(x)
    expected = [e.numpy() for e in (expected if isinstance(expected, tuple) else (expected,))
                if e is not None]
    network, params = network_from_torchscript(_archive(module, x, kind))
    for name in ("torch", "jax"):
        backend = get_backend(name)
        model = backend.set_parameters(backend.build(network), params)
        got = backend.forward(model, [x.numpy()])
        assert len(got) == len(expected), name
        for g, e in zip(got, expected):
            assert g.shape == e.shape, name
            np.testing.assert_allclose(g, e, rtol=tol, atol=tol, err_msg=f"{name} {kind}")
    return network


KINDS = ("script", "trace")


# ----------------------------------------------------------------------------- recurrent
class ZeroStateGRU(nn.Module):
    """torch.zeros with the batch size of the input as the initial state (aten::zeros)."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(3, 5, num_layers=2)
        self.head = nn.Linear(5, 2)

    def forward(self, x: Tensor) -> Tensor:
        h0 = torch.zeros(2, x.size(1), 5)
        out, h = self.gru(x, h0)
        return self.head(h[-1]) + out.mean(0)[:, :2]


class LSTMStates(nn.Module):
    """An LSTM whose final states are used before its output (traces reorder them)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True, bidirectional=True)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        out, (h, c) = self.lstm(x)
        return torch.tanh(c).sum(0), out[:, -1] * torch.cat([h[0], h[1]], 1)


@pytest.mark.parametrize("kind", KINDS)
def test_recurrent_layers_with_zero_states(kind: str) -> None:
    network = _check(ZeroStateGRU(), torch.randn(6, 2, 3), kind)
    assert network.layers["gru"].type == "GRU"
    gru_calls = [n for n in network.nodes if n.op == "call_module" and n.target == "gru"]
    assert len(gru_calls[0].bound["inputs"]) == 1  # the zero state is PyTorch's default


@pytest.mark.parametrize("kind", KINDS)
def test_recurrent_tuple_results(kind: str) -> None:
    _check(LSTMStates(), torch.randn(2, 5, 3), kind)


# ----------------------------------------------------------------------------- sizes
def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    """torchvision's ShuffleNet V2 channel shuffle."""
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batchsize, num_channels, height, width)


class Shuffle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.conv(x).chunk(2, dim=1)
        return channel_shuffle(torch.cat((a, b * 2), dim=1), 2)


class Patches(nn.Module):
    """ViT's input processing: n, c, h, w = x.shape, then sizes in a reshape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 2, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        y = x.reshape(n, c, h * w)
        return self.conv(x).flatten(2).sum(-1) + torch.cat([y.mean(-1), y.mean(-1)], 1)


@pytest.mark.parametrize("kind", KINDS)
def test_channel_shuffle_and_chunk(kind: str) -> None:
    network = _check(Shuffle(), torch.randn(2, 3, 4, 5), kind)
    functions = {n.function for n in network.nodes}
    assert {"chunk", "unflatten", "flatten"} <= functions


@pytest.mark.parametrize("kind", KINDS)
def test_unpacked_sizes_in_a_reshape(kind: str) -> None:
    _check(Patches(), torch.randn(2, 3, 4, 6), kind)


# ----------------------------------------------------------------------------- operators
class Rounding(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return (torch.div(x, 0.7, rounding_mode="floor") + torch.div(x, 0.3, rounding_mode="trunc")
                + torch.floor_divide(x, 0.4) + x % 0.5 + torch.remainder(x, -0.6))


class FunctionalPools(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return (F.adaptive_avg_pool2d(x, (2, 3)) + F.adaptive_max_pool2d(x, (2, 3))
                + F.max_pool2d(x, 2, stride=(2, 1))[..., :2, :3]
                + F.avg_pool2d(x, 2, ceil_mode=True)[..., :, :3])


class Filled(nn.Module):
    """torch.zeros/ones/full of static sizes, x.dim() where the rank is known."""

    def forward(self, x: Tensor) -> Tensor:
        n, c, h = x.shape
        y = x + torch.ones(3, 4) * 0.5 - torch.full((4,), 0.25) + torch.zeros(1, 3, 1)
        if x.dim() == 3:
            y = y * 2
        return y.flatten(1) + x.reshape(n, c * h)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("module, shape", [(Rounding(), (3, 4)),
                                           (FunctionalPools(), (2, 3, 4, 6)),
                                           (Filled(), (2, 3, 4))],
                         ids=["rounding", "functional_pools", "filled"])
def test_operators(module: nn.Module, shape: tuple[int, ...], kind: str) -> None:
    _check(module, torch.randn(*shape) * 3, kind)


# ----------------------------------------------------------------------------- control flow
class Modes(nn.Module):
    """prim::Uninitialized (y is set on the branches not raising) and aten::__contains__
    of constants."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.scales = {"double": 2.0, "half": 0.5}

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "tanh":
            y = torch.tanh(x)
        elif self.mode in self.scales:
            y = x * self.scales[self.mode]
        else:
            raise ValueError("unknown mode")
        if "double" in self.scales:
            y = y + 1.0
        return y


class StochasticDepthLike(nn.Module):
    """torchvision's stochastic depth: an if on self.training outside dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        y = self.fc(x)
        if not self.training:
            return x + y
        return x + y * torch.bernoulli(torch.full_like(y[:, :1], 0.8))


class AuxOutputs(nn.Module):
    """GoogLeNet scripted in eval mode returns (x, None, None)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: Tensor) -> tuple[Tensor, torch.Tensor | None]:
        aux: torch.Tensor | None = None
        if self.training:
            aux = x
        return self.fc(x), aux


@pytest.mark.parametrize("mode", ["tanh", "half"])
def test_uninitialized_and_contains(mode: str) -> None:
    _check(Modes(mode), torch.randn(2, 3), "script")


def test_training_branch_follows_the_saved_mode() -> None:
    with pytest.warns(UserWarning, match="eval-mode branch"):
        _check(StochasticDepthLike(), torch.randn(4, 3), "script")


def test_none_outputs_are_dropped() -> None:
    _check(AuxOutputs(), torch.randn(4, 3), "script")


# ----------------------------------------------------------------------------- messages
class Unsupported(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.logcumsumexp(x, 0)


class RunTimeZeros(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x + torch.zeros(x.size(0), 3)


class ScriptedDim(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 2 if x.dim() == 2 else x


@pytest.mark.parametrize("module, x, message", [
    (Unsupported(), torch.randn(2, 3), "aten::logcumsumexp is not supported"),
    (RunTimeZeros(), torch.randn(2, 3), "known only at run time is supported only as the "
                                        "initial state of a recurrent layer"),
    (ScriptedDim(), torch.randn(2, 3), "aten::dim: the rank of this tensor is not in the graph"),
], ids=["unsupported_op", "run_time_zeros", "scripted_dim"])
def test_unsupported_operations_give_one_line(module: nn.Module, x: Tensor,
                                              message: str) -> None:
    with pytest.raises(NetworkError) as info:
        network_from_torchscript(_archive(module, x, "script"))
    text = str(info.value)
    assert message in text and "\n" not in text

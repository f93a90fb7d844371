"""Layers and functions added for networks from other tools: what the official package and
benchmark problems write (activation modules as layers, F.max_pool2d, gelu with an
``inplace`` argument) reads and runs as PyTorch does; recurrent layers' tuple results and
dropout between layers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from petab_sciml.errors import NetworkError  # noqa: E402
from petab_sciml.formats import yaml as yaml_format  # noqa: E402
from petab_sciml.network import Network  # noqa: E402
from petab_sciml.plugins import get_backend  # noqa: E402

OFFICIAL_STYLE = """
nn_model_id: net1
inputs:
- input_id: input0
layers:
- layer_id: conv
  layer_type: Conv2d
  args: {in_channels: 1, out_channels: 2, kernel_size: 3}
- layer_id: act
  layer_type: LeakyReLU
  args: {negative_slope: 0.2, inplace: false}
- layer_id: fc
  layer_type: Linear
  args: {in_features: 8, out_features: 1}
forward:
- {name: input0, op: placeholder, target: input0, args: [], kwargs: {}}
- {name: conv, op: call_module, target: conv, args: [input0], kwargs: {}}
- {name: act, op: call_module, target: act, args: [conv], kwargs: {}}
- {name: pool, op: call_function, target: max_pool2d, args: [act, 2], kwargs: {}}
- {name: flat, op: call_method, target: flatten, args: [pool, 1], kwargs: {}}
- {name: fc, op: call_module, target: fc, args: [flat], kwargs: {}}
- {name: g, op: call_function, target: gelu, args: [fc], kwargs: {inplace: false}}
- {name: output, op: output, target: output, args: [g], kwargs: {}}
"""


def test_official_package_style_network_runs_as_pytorch(tmp_path) -> None:
    path = tmp_path / "net.yaml"
    path.write_text(OFFICIAL_STYLE)
    network = yaml_format.read(path)
    assert network.layers["act"].type == "LeakyReLU"
    torch.manual_seed(0)
    conv, fc = torch.nn.Conv2d(1, 2, 3), torch.nn.Linear(8, 1)
    x = torch.randn(3, 1, 6, 6)
    with torch.no_grad():
        expected = torch.nn.functional.gelu(fc(torch.flatten(torch.nn.functional.max_pool2d(
            torch.nn.functional.leaky_relu(conv(x), 0.2), 2), 1))).numpy()
    params = {"conv": {"weight": conv.weight.detach().numpy(),
                       "bias": conv.bias.detach().numpy()},
              "fc": {"weight": fc.weight.detach().numpy(), "bias": fc.bias.detach().numpy()}}
    for name in ("torch", "jax"):
        backend = get_backend(name)
        model = backend.set_parameters(backend.build(network), params)
        (got,) = backend.forward(model, [x.numpy()])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=name)
    # the writer keeps what was read
    assert yaml_format.network_to_dict(yaml_format.read(path)) == \
        yaml_format.network_to_dict(network)


def _lstm_network(outputs, extra=()):
    nodes = [{"name": "x", "op": "placeholder"},
             {"name": "r", "op": "call_module", "target": "rnn", "args": ["x"]},
             *extra, {"name": "output", "op": "output", "args": outputs}]
    return Network.build("net", ["x"], [{"layer_id": "rnn", "layer_type": "LSTM", "args": {
        "input_size": 3, "hidden_size": 4, "num_layers": 2, "dropout": 1.0}}], nodes)


def test_tuple_results_must_be_indexed() -> None:
    with pytest.raises(NetworkError, match=r"'r' is a tuple \(tensor, \(tensor, tensor\)\)"):
        _lstm_network(["r"])
    with pytest.raises(NetworkError, match=r"index it with an integer in \[-2, 2\)"):
        _lstm_network(["g"], [{"name": "g", "op": "call_function", "target": "getitem",
                               "args": ["r", 2]}])
    with pytest.raises(NetworkError, match="takes 1 to 2 input"):
        Network.build("net", ["x"], [{"layer_id": "rnn", "layer_type": "GRU", "args": {
            "input_size": 3, "hidden_size": 4}}],
            [{"name": "x", "op": "placeholder"},
             {"name": "r", "op": "call_module", "target": "rnn", "args": ["x", "x", "x"]},
             {"name": "output", "op": "output", "args": ["r"]}])


def test_dropout_between_recurrent_layers_in_training() -> None:
    """dropout=1.0 zeroes the first layer's output in training mode: deterministic, so
    both backends can be compared with PyTorch in both modes."""
    network = _lstm_network(["o"], [{"name": "o", "op": "call_function", "target": "getitem",
                                     "args": ["r", 0]}])
    assert network.stochastic
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(3, 4, num_layers=2, dropout=1.0)
    params = {"rnn": {k: v.detach().numpy() for k, v in lstm.state_dict().items()}}
    x = torch.randn(5, 2, 3)
    for train in (False, True):
        lstm.train(train)
        with torch.no_grad():
            expected = lstm(x)[0].numpy()
        for name in ("torch", "jax"):
            backend = get_backend(name)
            model = backend.set_parameters(backend.build(network), params)
            (got,) = backend.forward(model, [x.numpy()], train=train, seed=0)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} train={train}")

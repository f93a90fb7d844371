"""Tests of the JAX backend: the official ML-import suite, PyTorch itself as the reference
(outputs, gradients, running statistics), dropout, purity and jit behaviour."""

from __future__ import annotations

import math
import operator
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("equinox")
torch = pytest.importorskip("torch")
h5py = pytest.importorskip("h5py")
yaml = pytest.importorskip("yaml")

import jax.numpy as jnp  # noqa: E402

from petab_sciml.backends.jax import BACKEND, build_model, make_forward  # noqa: E402
from petab_sciml.catalogue import FUNCTIONS, LAYERS  # noqa: E402
from petab_sciml.errors import PetabSciMLError  # noqa: E402
from petab_sciml.formats import yaml as yaml_format  # noqa: E402
from petab_sciml.network import Network, Ref  # noqa: E402

torch.set_num_threads(1)

SUITE = Path(os.environ.get("PETAB_SCIML_TESTSUITE")
             or Path(__file__).resolve().parents[4] / "shared" / "petab_sciml_testsuite")
ML_CASES = SUITE / "test_cases" / "ml_model_import"


def _case_params():
    if not ML_CASES.is_dir():
        reason = (f"PEtab SciML test suite not found at {ML_CASES} "
                  f"(set PETAB_SCIML_TESTSUITE to the suite's root)")
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-suite")]
    return sorted(p.name for p in ML_CASES.iterdir() if p.is_dir())


CASES = _case_params()



DTYPES = ["float32", pytest.param("float64", marks=pytest.mark.slow)]
"""The sweeps against PyTorch in both dtypes; the fast subset (``-m "not slow"``) keeps
float32, the dtype networks usually run in (each instance compiles anew)."""

# --------------------------------------------------------------------------- suite files
def _read_group(path: Path, top: str) -> dict:
    """``{name: array}`` of the datasets below ``top`` (one level of groups)."""
    with h5py.File(path, "r") as f:
        return {name: _read_tree(f[top][name]) for name in f[top]}


def _read_tree(node):
    if isinstance(node, h5py.Dataset):
        return node[()]
    return {name: _read_tree(node[name]) for name in node}


class SuiteCase:
    def __init__(self, name: str):
        self.dir = ML_CASES / name
        self.solutions = yaml.safe_load((self.dir / "solutions.yaml").read_text())
        self.network = yaml_format.read(self.dir / self.solutions["net_file"])
        self.dropout = self.solutions.get("dropout")

    @property
    def alpha(self) -> bool:
        return any(layer.type == "AlphaDropout" for layer in self.network.layers.values())

    def params(self, i: int) -> dict | None:
        files = self.solutions.get("net_ps")
        if not files:
            return None
        groups = _read_group(self.dir / files[i], "parameters")
        return groups[self.network.id]

    def inputs(self, i: int) -> list[np.ndarray]:
        if "net_input" in self.solutions:
            keys = ["net_input"]
        else:
            keys = sorted((k for k in self.solutions if k.startswith("net_input_arg")),
                          key=lambda k: int(k.removeprefix("net_input_arg")))
        out = []
        for k in keys:
            data = _read_group(self.dir / self.solutions[k][i], "inputs")
            out.append(next(iter(data.values()))["data"])
        return out

    def output(self, i: int) -> np.ndarray:
        data = _read_group(self.dir / self.solutions["net_output"][i], "outputs")
        return next(iter(data.values()))["data"]


# --------------------------------------------------------------------------- torch reference
def _torch_value(v):
    if v in ("inf", "-inf", "nan"):
        return float(v)
    return v


def _dims(v):
    return (v,) if isinstance(v, int) else tuple(v)


def _torch_index(item):
    if item == "...":
        return Ellipsis
    if isinstance(item, dict):
        return slice(*item["slice"])
    return item


def _reduce(fn):
    def call(input, dim, keepdim, **_):
        if dim is None or _dims(dim) == ():
            return fn(input, dim=None, keepdim=keepdim)
        return fn(input, dim=_dims(dim), keepdim=keepdim)
    return call


TORCH_SPECIAL = {
    "add": lambda input, other, alpha: input + (other if alpha == 1 else alpha * other),
    "sub": lambda input, other, alpha: input - (other if alpha == 1 else alpha * other),
    "mul": lambda input, other: input * other,
    # PyTorch has no derivative of rounded division: its values, and the zero gradient
    # of a step function (what torch.floor gives).
    "div": lambda input, other, rounding_mode: input / other if rounding_mode is None else (
        torch.div(input, other, rounding_mode=rounding_mode).detach() + 0 * input),
    "floor_divide": lambda input, other: (torch.floor_divide(input, other).detach()
                                          + 0 * input),
    "gelu": lambda input, approximate, inplace: torch.nn.functional.gelu(
        input, approximate=approximate),
    "reshape_as": lambda input, other: input.reshape_as(other),
    "pow": lambda input, exponent: input ** exponent,
    "neg": lambda input: -input,
    "contiguous": lambda input, memory_format: input.contiguous(),
    "reshape": lambda input, shape: torch.reshape(input, _dims(shape)),
    "permute": lambda input, dims: input.permute(*_dims(dims)),
    "squeeze": lambda input, dim: (torch.squeeze(input) if dim is None
                                   else torch.squeeze(input, _dims(dim))),
    "getitem": lambda input, index: operator.getitem(
        input, tuple(map(_torch_index, index)) if isinstance(index, (list, tuple))
        else _torch_index(index)),
    "cat": lambda tensors, dim: torch.cat(list(tensors), dim=dim),
    "stack": lambda tensors, dim: torch.stack(list(tensors), dim=dim),
    "sum": _reduce(torch.sum),
    "mean": _reduce(torch.mean),
    "prod": lambda input, dim, keepdim, dtype: (
        torch.prod(input).reshape((1,) * input.dim() if keepdim else ()) if dim is None
        else torch.prod(input, dim, keepdim=keepdim)),
}


def _torch_function(name):
    if name in TORCH_SPECIAL:
        return TORCH_SPECIAL[name]
    fn = getattr(torch.nn.functional, name, None) or getattr(torch, name)
    return lambda **kw: fn(**kw)


class TorchRef:
    """The IR executed with ``torch.nn`` modules built from the same catalogue arguments."""

    def __init__(self, network: Network, dtype: str = "float32"):
        self.network = network
        self.dtype = torch.float64 if dtype == "float64" else torch.float32
        self.mods = {}
        for lid, layer in network.layers.items():
            kw = {k: _torch_value(v) for k, v in layer.spec.torch_kwargs(layer.config).items()}
            self.mods[lid] = getattr(torch.nn, layer.type)(**kw).to(self.dtype)
        self.free = {}
        for p in network.free_parameters.values():
            t = torch.zeros(p.shape, dtype=self.dtype)
            self.free.setdefault(p.group, {})[p.array] = t.requires_grad_(p.trainable)

    def load(self, nested):
        for group, arrays in (nested or {}).items():
            if group in self.mods:
                sd = {k: torch.as_tensor(np.array(v)) for k, v in arrays.items()}
                self.mods[group].load_state_dict(sd, strict=False)
            else:
                for name, v in arrays.items():
                    self.free[group][name].data = torch.as_tensor(np.array(v), dtype=self.dtype)
        return self

    def trainable(self) -> dict:
        out = {}
        for group, info in self.network.parameter_arrays().items():
            for name, a in info.items():
                if a.trainable:
                    out.setdefault(group, {})[name] = self._get(group, name)
        return out

    def state(self) -> dict:
        out = {}
        for group, info in self.network.parameter_arrays().items():
            out[group] = {n: self._get(group, n).detach().numpy().copy() for n in info}
        return out

    def _get(self, group, name):
        if group in self.mods:
            return getattr(self.mods[group], name)
        return self.free[group][name]

    def forward(self, inputs, train=False):
        for m in self.mods.values():
            m.train(train)
        env = {}
        xs = iter(inputs)
        nodes = self.network.node_map

        def res(v):
            if isinstance(v, Ref):
                return env[v.name]
            if isinstance(v, tuple):
                return tuple(res(u) for u in v)
            return v

        for name in self.network.order:
            node = nodes[name]
            if node.op == "placeholder":
                env[name] = torch.as_tensor(np.array(next(xs)), dtype=self.dtype)
            elif node.op == "call_module":
                env[name] = self.mods[node.target](*[env[r.name] for r in node.bound["inputs"]])
            elif node.op in ("call_function", "call_method"):
                env[name] = _torch_function(node.function)(
                    **{k: res(v) for k, v in node.bound.items()})
            elif node.op == "get_attr":
                env[name] = self._get(node.bound["group"], node.bound["array"])
            else:
                return tuple(env[r.name] for r in node.bound["outputs"])

    def gradients(self, inputs, train=False):
        params = self.trainable()
        for arrays in params.values():
            for t in arrays.values():
                t.grad = None
        outs = self.forward(inputs, train)
        loss = sum(o.sum() for o in outs)
        if loss.requires_grad:  # else no parameter is used: all gradients are zero
            loss.backward()
        return {g: {n: np.zeros(t.shape) if t.grad is None else t.grad.numpy().copy()
                    for n, t in a.items()} for g, a in params.items()}


_MODE_DEPENDENT = ("BatchNorm", "InstanceNorm", "Dropout", "AlphaDropout")


def _modes(network: Network) -> list[bool]:
    """Train/eval modes worth comparing: both where a layer behaves differently, eval only
    for stochastic networks (masks cannot match PyTorch's), else training mode only."""
    if network.stochastic:
        return [False]
    if any(layer.type.startswith(_MODE_DEPENDENT) for layer in network.layers.values()):
        return [False, True]
    return [True]


def _assert_grads_close(g_jax, g_torch, rtol):
    """Element-wise ``rtol``, with an absolute floor of ``rtol`` times the largest gradient
    of the whole network: elements far below that scale are rounding-dominated in both
    frameworks (a float32 tanh near saturation, 1 - y*y, has only a few significant bits;
    gradients through a final training-mode BatchNorm are zero up to rounding)."""
    assert g_jax.keys() == g_torch.keys()
    scale = max((float(np.abs(a).max(initial=0.0)) for arrays in g_torch.values()
                 for a in arrays.values()), default=0.0)
    for group in g_torch:
        assert g_jax[group].keys() == g_torch[group].keys(), group
        for name, ref in g_torch[group].items():
            np.testing.assert_allclose(g_jax[group][name], ref, rtol=rtol,
                                       atol=rtol * max(scale, 1e-12),
                                       err_msg=f"gradient of {group}.{name}")


# --------------------------------------------------------------------------- official suite
@pytest.mark.parametrize("case", CASES)
def test_suite_case(case):
    c = SuiteCase(case)
    net = BACKEND.build(c.network)
    for i in range(3):
        params = c.params(i)
        if params is not None:
            net = BACKEND.set_parameters(net, params)
        inputs = c.inputs(i)
        expected = c.output(i)
        if c.dropout:
            # Four times the reference's number of passes: our own sampling noise then
            # stays well below the reference's (std ~3e-3 for 40000 passes).
            got = BACKEND.mean_forward(net, inputs, passes=4 * int(c.dropout), seed=i)[0]
            tol = 2e-2 if c.alpha else 1e-2
        else:
            # The references come from modules in their default (training) mode.
            got = BACKEND.forward(net, inputs, train=True, seed=i)[0]
            tol = 1e-3
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=tol,
                                   err_msg=f"case {case}, data set {i + 1}")


# --------------------------------------------------------------------------- cross-backend
@pytest.mark.filterwarnings("ignore:dropout2d")
@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_suite_case_matches_torch(case, dtype):
    c = SuiteCase(case)
    tol = 1e-5 if dtype == "float32" else 1e-10
    # float64 gradients: PyTorch uses float32 constants in some float64 kernels
    # (hardsigmoid_backward multiplies by 1.0f / 6.0f), hence 1e-6.
    gtol = 1e-4 if dtype == "float32" else 1e-6
    net = BACKEND.build(c.network, dtype=dtype)
    initial = BACKEND.get_parameters(net)
    modes = _modes(c.network)
    for i in range(3):
        params = {g: {**a, **(c.params(i) or {}).get(g, {})} for g, a in initial.items()}
        for train in modes:
            # Fresh running statistics for every comparison (train mode updates them).
            ref = TorchRef(c.network, dtype).load(params)
            net = BACKEND.set_parameters(net, params)
            inputs = [np.asarray(x, dtype) for x in c.inputs(i)]
            with torch.no_grad():
                expected = [o.numpy() for o in ref.forward(inputs, train)]
            got = BACKEND.forward(net, inputs, train=train)
            for g, e in zip(got, expected, strict=True):
                assert g.dtype == np.dtype(dtype)
                np.testing.assert_allclose(g, e, rtol=tol, atol=tol,
                                           err_msg=f"case {case}, train={train}")
            if c.network.parameter_count():
                net = BACKEND.set_parameters(net, params)
                _assert_grads_close(BACKEND.gradients(net, inputs, train=train),
                                    TorchRef(c.network, dtype).load(params)
                                    .gradients(inputs, train), gtol)


# Layer configurations the suite does not cover: (type, args, input shapes, positive input).
EXTRA_LAYERS = [
    ("Linear", dict(in_features=4, out_features=3, bias=False), [(2, 5, 4)]),
    # above ops.TRANSPOSED_PRODUCT_MAX: the dot_general product, unbatched and batched
    ("Linear", dict(in_features=40, out_features=30), [(40,)]),
    ("Linear", dict(in_features=150, out_features=130), [(150,)]),
    ("Linear", dict(in_features=150, out_features=130, bias=False), [(2, 3, 150)]),
    ("Linear", dict(in_features=40, out_features=30, bias=False), [(2, 3, 40)]),
    ("Bilinear", dict(in1_features=3, in2_features=4, out_features=2), [(5, 3), (5, 4)]),
    ("Bilinear", dict(in1_features=3, in2_features=4, out_features=2), [(2, 5, 3),
                                                                       (2, 5, 4)]),
    ("Bilinear", dict(in1_features=3, in2_features=2, out_features=2, bias=False),
     [(3,), (2,)]),
    ("Flatten", dict(start_dim=0, end_dim=-2), [(2, 3, 4)]),
    ("Flatten", {}, [(3, 4)]),
    ("Dropout", dict(p=0.3), [(4, 5)]),
    ("Dropout1d", dict(p=0.3), [(4, 5)]),
    ("Dropout2d", dict(p=0.3), [(2, 3, 4, 5)]),
    ("Dropout3d", dict(p=0.3), [(3, 2, 4, 5)]),
    ("AlphaDropout", dict(p=0.3), [(4, 5)]),
    ("Conv1d", dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1,
                    dilation=2, groups=2), [(3, 4, 17)]),
    ("Conv1d", dict(in_channels=2, out_channels=3, kernel_size=4, padding="same",
                    padding_mode="reflect"), [(2, 11)]),
    ("Conv1d", dict(in_channels=2, out_channels=2, kernel_size=3, padding=2,
                    padding_mode="circular"), [(2, 2, 9)]),
    ("Conv2d", dict(in_channels=4, out_channels=4, kernel_size=(3, 2), stride=(2, 1),
                    padding=(1, 0), groups=4, padding_mode="circular"), [(2, 4, 9, 8)]),
    ("Conv2d", dict(in_channels=3, out_channels=2, kernel_size=4, dilation=2,
                    padding="same", padding_mode="replicate"), [(3, 9, 8)]),
    ("Conv2d", dict(in_channels=3, out_channels=2, kernel_size=2, padding="valid",
                    bias=False), [(2, 3, 5, 4)]),
    ("Conv3d", dict(in_channels=2, out_channels=4, kernel_size=(2, 3, 2), stride=(1, 2, 1),
                    padding=(1, 0, 1), groups=2, padding_mode="reflect"), [(2, 2, 4, 7, 5)]),
    ("Conv3d", dict(in_channels=2, out_channels=1, kernel_size=2), [(2, 4, 3, 5)]),
    ("ConvTranspose1d", dict(in_channels=4, out_channels=6, kernel_size=3, stride=2,
                             padding=1, output_padding=1, dilation=2, groups=2), [(2, 4, 7)]),
    ("ConvTranspose1d", dict(in_channels=2, out_channels=3, kernel_size=2, padding=3),
     [(2, 9)]),
    ("ConvTranspose2d", dict(in_channels=4, out_channels=2, kernel_size=(3, 4),
                             stride=(2, 3), padding=(2, 1), output_padding=(1, 2),
                             dilation=(1, 2)), [(2, 4, 5, 6)]),
    ("ConvTranspose2d", dict(in_channels=2, out_channels=4, kernel_size=3, groups=2,
                             bias=False), [(2, 4, 5)]),
    ("ConvTranspose3d", dict(in_channels=2, out_channels=2, kernel_size=(2, 3, 2),
                             stride=(2, 1, 3), padding=(0, 1, 1), output_padding=(1, 0, 2)),
     [(1, 2, 3, 4, 3)]),
    ("MaxPool1d", dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True),
     [(2, 3, 12)]),
    ("MaxPool1d", dict(kernel_size=2), [(3, 7)]),
    ("MaxPool2d", dict(kernel_size=(3, 2), ceil_mode=True), [(3, 8, 7)]),
    ("MaxPool2d", dict(kernel_size=3, stride=(2, 1), padding=1, dilation=(1, 2)),
     [(2, 2, 9, 8)]),
    ("MaxPool3d", dict(kernel_size=2, stride=1, padding=1, ceil_mode=True),
     [(1, 2, 3, 4, 5)]),
    ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                       count_include_pad=False), [(2, 3, 10)]),
    ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), [(3, 10)]),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
     [(2, 2, 8, 9)]),
    ("AvgPool2d", dict(kernel_size=(3, 2), padding=1, divisor_override=5), [(2, 7, 6)]),
    ("AvgPool2d", dict(kernel_size=(3, 2), stride=2, padding=(1, 1), ceil_mode=True,
                       count_include_pad=False), [(1, 2, 8, 7)]),
    ("AvgPool3d", dict(kernel_size=(2, 3, 2), stride=(2, 2, 1), padding=1, ceil_mode=True,
                       count_include_pad=False, divisor_override=None), [(1, 2, 5, 6, 4)]),
    ("AvgPool3d", dict(kernel_size=2, divisor_override=3), [(2, 4, 4, 4)]),
    ("LPPool1d", dict(norm_type=2, kernel_size=3, stride=2, ceil_mode=True), [(2, 3, 10)],
     True),
    ("LPPool1d", dict(norm_type="inf", kernel_size=2), [(2, 3, 9)]),
    ("LPPool2d", dict(norm_type=1.5, kernel_size=(2, 3)), [(2, 6, 7)], True),
    ("LPPool2d", dict(norm_type=2.0, kernel_size=3, stride=2, ceil_mode=True),
     [(1, 2, 8, 7)], True),
    ("LPPool3d", dict(norm_type=3, kernel_size=2, stride=(1, 2, 2)), [(1, 2, 4, 5, 4)], True),
    ("AdaptiveMaxPool1d", dict(output_size=3), [(2, 3, 10)]),
    ("AdaptiveAvgPool1d", dict(output_size=4), [(3, 10)]),
    ("AdaptiveAvgPool2d", dict(output_size=[3, None]), [(2, 3, 7, 5)]),
    ("AdaptiveMaxPool2d", dict(output_size=[4, 3]), [(3, 7, 5)]),
    ("AdaptiveMaxPool2d", dict(output_size=2), [(1, 2, 4, 6)]),
    ("AdaptiveAvgPool3d", dict(output_size=[2, 3, 4]), [(1, 2, 5, 7, 9)]),
    ("AdaptiveMaxPool3d", dict(output_size=[2, 3, None]), [(2, 5, 7, 3)]),
    ("BatchNorm1d", dict(num_features=3, momentum=None), [(4, 3)]),
    ("BatchNorm1d", dict(num_features=3, momentum=0.3, eps=1e-3), [(4, 3, 5)]),
    ("BatchNorm2d", dict(num_features=3, affine=False), [(2, 3, 4, 5)]),
    ("BatchNorm3d", dict(num_features=2, track_running_stats=False), [(2, 2, 3, 4, 2)]),
    ("InstanceNorm1d", dict(num_features=3, affine=True, track_running_stats=True),
     [(2, 3, 7)]),
    ("InstanceNorm1d", dict(num_features=3), [(3, 7)]),
    ("InstanceNorm2d", dict(num_features=3, momentum=None, track_running_stats=True),
     [(2, 3, 4, 5)]),
    ("InstanceNorm3d", dict(num_features=2, affine=True), [(2, 3, 4, 5)]),
    ("LayerNorm", dict(normalized_shape=[4, 5]), [(2, 3, 4, 5)]),
    ("LayerNorm", dict(normalized_shape=5, bias=False), [(3, 5)]),
    ("LayerNorm", dict(normalized_shape=5, elementwise_affine=False, eps=1e-2), [(5,)]),
    ("PReLU", {}, [(3, 4)]),
    ("PReLU", dict(num_parameters=3, init=0.1), [(2, 3, 4, 5)]),
    ("PReLU", dict(num_parameters=4), [(5, 4)]),
    ("PReLU", {}, [(6,)]),
    ("PReLU", dict(num_parameters=2), [(2, 2)]),
    ("LocalResponseNorm", dict(size=3, alpha=0.2, beta=0.6, k=1.5), [(2, 5, 4)]),
    ("LocalResponseNorm", dict(size=4), [(2, 6, 3, 2)]),
    ("LeakyReLU", dict(negative_slope=0.3), [(3, 4)]),
    ("GELU", dict(approximate="tanh"), [(3, 4)]),
    ("Softmax", dict(dim=0), [(3, 4)]),
    ("LogSoftmax", {}, [(2, 3, 4)]),
    ("Hardtanh", dict(min_val=-0.3, max_val=0.5), [(3, 4)]),
    ("ReLU", {}, [(3, 4)]), ("ReLU6", {}, [(3, 4)]), ("ELU", dict(alpha=0.5), [(3, 4)]),
    ("CELU", {}, [(3, 4)]), ("SELU", {}, [(3, 4)]), ("SiLU", {}, [(3, 4)]),
    ("Mish", {}, [(3, 4)]), ("Sigmoid", {}, [(3, 4)]), ("Tanh", {}, [(3, 4)]),
    ("Hardswish", {}, [(3, 4)]), ("Hardsigmoid", {}, [(3, 4)]), ("LogSigmoid", {}, [(3, 4)]),
    ("Softplus", dict(beta=2.0, threshold=1.0), [(3, 4)]), ("Softsign", {}, [(3, 4)]),
    ("Tanhshrink", {}, [(3, 4)]),
    ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True),
     [(5, 2, 3)]),
    ("LSTM", dict(input_size=3, hidden_size=4, proj_size=2, batch_first=True), [(2, 5, 3)]),
    ("GRU", dict(input_size=3, hidden_size=4, bias=False, batch_first=True), [(2, 4, 3)]),
    ("GRU", dict(input_size=3, hidden_size=2, num_layers=2), [(4, 3)]),
    ("RNN", dict(input_size=3, hidden_size=4, nonlinearity="relu", bidirectional=True),
     [(4, 2, 3)]),
    ("RNN", dict(input_size=3, hidden_size=4), [(4, 3)]),
]


def _layer_network(layer_type, args, n_inputs, input_shape=None):
    """x -> layer -> tanh.  With ``input_shape`` the first input is first multiplied by a
    trainable free parameter ``p.w`` of that shape, so gradients flow through the layer
    even when it has no parameters of its own."""
    names = [f"x{i}" for i in range(n_inputs)]
    nodes = [{"name": n, "op": "placeholder"} for n in names]
    free = []
    args_in = list(names)
    if input_shape is not None:
        free = [{"id": "p.w", "shape": list(input_shape)}]
        nodes += [{"name": "w", "op": "get_attr", "target": "p.w"},
                  {"name": "xw", "op": "call_function", "target": "mul",
                   "args": [names[0], "w"]}]
        args_in[0] = "xw"
    nodes += [{"name": "y", "op": "call_module", "target": "l", "args": args_in}]
    if LAYERS[layer_type].output != "tensor":  # recurrent: output + tanh(h_n) as well
        nodes += [{"name": "y0", "op": "call_function", "target": "getitem",
                   "args": ["y", 0]},
                  {"name": "h", "op": "call_function", "target": "getitem", "args": ["y", 1]}]
        if layer_type == "LSTM":
            nodes.append({"name": "h0", "op": "call_function", "target": "getitem",
                          "args": ["h", 1]})
        nodes += [{"name": "out", "op": "call_function", "target": "tanh",
                   "args": [nodes[-1]["name"]]},
                  {"name": "output", "op": "output", "args": [["y0", "out"]]}]
    else:
        nodes += [{"name": "out", "op": "call_function", "target": "tanh", "args": ["y"]},
                  {"name": "output", "op": "output", "args": ["out"]}]
    return Network.build("net", names, [{"layer_id": "l", "layer_type": layer_type,
                                         "args": args}], nodes, free)


def _random_params(network, rng, dtype):
    out = {}
    for group, arrays in network.parameter_arrays().items():
        for name, info in arrays.items():
            if info.dtype:
                value = np.asarray(rng.integers(0, 5), dtype=info.dtype)
            elif name == "running_var":
                value = rng.uniform(0.5, 2.0, info.shape)
            else:
                value = rng.normal(size=info.shape)
            out.setdefault(group, {})[name] = np.asarray(value, info.dtype or dtype)
    return out


def test_extra_layers_cover_catalogue():
    covered = {t for t, *_ in EXTRA_LAYERS}
    suite = set()
    if ML_CASES.is_dir():
        for case in CASES:
            suite |= {layer.type for layer in SuiteCase(case).network.layers.values()}
    assert set(LAYERS) <= covered | suite, sorted(set(LAYERS) - covered - suite)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", EXTRA_LAYERS, ids=lambda s: f"{s[0]}-{len(s[1])}-{s[2]}")
def test_layer_matches_torch(spec, dtype):
    layer_type, args, shapes, *positive = spec
    network = _layer_network(layer_type, args, len(shapes), input_shape=shapes[0])
    rng = np.random.default_rng(0)
    params = _random_params(network, rng, dtype)
    inputs = [rng.normal(size=s).astype(dtype) for s in shapes]
    if positive and positive[0]:
        inputs = [np.abs(x) + 0.1 for x in inputs]
        params["p"]["w"] = np.abs(params["p"]["w"]) + 0.1
    tol = 1e-5 if dtype == "float32" else 1e-10
    for train in _modes(network):
        ref = TorchRef(network, dtype).load(params)
        net = BACKEND.set_parameters(BACKEND.build(network, dtype=dtype), params)
        with torch.no_grad():
            expected = [o.numpy() for o in ref.forward(inputs, train)]
        got = BACKEND.forward(net, inputs, train=train)
        for g, e in zip(got, expected, strict=True):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=tol, atol=tol, err_msg=f"train={train}")
        np.testing.assert_equal(BACKEND.get_parameters(net).keys(), ref.state().keys())
        for group, arrays in ref.state().items():
            for name, value in arrays.items():
                np.testing.assert_allclose(BACKEND.get_parameters(net)[group][name], value,
                                           rtol=tol, atol=tol, err_msg=f"{group}.{name}")
        # p.w makes every network differentiable, also through parameter-free layers.
        _assert_grads_close(
            BACKEND.gradients(BACKEND.set_parameters(net, params), inputs, train=train),
            TorchRef(network, dtype).load(params).gradients(inputs, train),
            1e-4 if dtype == "float32" else 1e-6)


# Functions: (name, args after the first tensor, kwargs, input shape, domain, method);
# domain: True (positive), "unit" (inside (-1, 1)) or "above_one".
# The first argument is x * w with w a trainable free parameter, so gradients reach w.
EXTRA_FUNCTIONS = [
    ("relu", [], {}, (3, 4)), ("relu6", [], {}, (3, 4)),
    ("hardtanh", [], {"min_val": -0.5, "max_val": 0.7}, (3, 4)),
    ("hardswish", [], {}, (3, 4)), ("selu", [], {}, (3, 4)), ("silu", [], {}, (3, 4)),
    ("leaky_relu", [], {"negative_slope": 0.2}, (3, 4)),
    ("gelu", [], {}, (3, 4)), ("gelu", [], {"approximate": "tanh"}, (3, 4)),
    ("logsigmoid", [], {}, (3, 4)), ("tanhshrink", [], {}, (3, 4)),
    ("softsign", [], {}, (3, 4)), ("softplus", [], {"beta": 2.0, "threshold": 1.0}, (3, 4)),
    ("tanh", [], {}, (3, 4)), ("sigmoid", [], {}, (3, 4)), ("hardsigmoid", [], {}, (3, 4)),
    ("mish", [], {}, (3, 4)), ("elu", [], {"alpha": 0.7}, (3, 4)),
    ("celu", [], {"alpha": 1.3}, (3, 4)),
    ("softmax", [], {"dim": None}, (2, 3, 4)), ("softmax", [], {"dim": None}, (3, 4)),
    ("softmax", [], {"dim": -1}, (3, 4)), ("log_softmax", [], {"dim": None}, (4,)),
    ("log_softmax", [], {"dim": 1}, (2, 3, 4)),
    ("add", ["x"], {"alpha": 0.5}, (3, 4)), ("add", [2.5], {}, (3, 4)),
    ("sub", ["x"], {"alpha": 2}, (3, 4)), ("mul", [3.0], {}, (3, 4)),
    ("div", ["x"], {}, (3, 4), True), ("neg", [], {}, (3, 4)),
    ("pow", [1.5], {}, (3, 4), True), ("pow", [2], {}, (3, 4)), ("pow", ["x"], {}, (3, 4), True),
    ("matmul", ["xt"], {}, (3, 4)), ("exp", [], {}, (3, 4)), ("log", [], {}, (3, 4), True),
    ("sqrt", [], {}, (3, 4), True), ("abs", [], {}, (3, 4)),
    ("clamp", [], {"min": -0.5, "max": 0.3}, (3, 4)), ("clamp", [], {"max": 0.1}, (3, 4)),
    ("clamp", [], {"min": 0.5, "max": -0.3}, (3, 4)),
    ("flatten", [], {"start_dim": 1}, (2, 3, 4)), ("flatten", [], {}, (2, 3, 4)),
    ("reshape", [[4, -1]], {}, (2, 3, 4)), ("reshape", [2, 12], {}, (2, 3, 4), False, True),
    ("permute", [[2, 0, 1]], {}, (2, 3, 4)), ("permute", [1, 2, 0], {}, (2, 3, 4), False, True),
    ("transpose", [0, -1], {}, (2, 3, 4)),
    ("squeeze", [], {}, (1, 3, 1)), ("squeeze", [], {"dim": [0, 1]}, (1, 3, 1)),
    ("squeeze", [], {"dim": -1}, (2, 3, 1)),
    ("unsqueeze", [], {"dim": -1}, (2, 3)), ("unsqueeze", [], {"dim": 1}, (2, 3)),
    ("contiguous", [], {}, (2, 3), False, True),
    ("getitem", [[{"slice": [None, None, None]}, 1, None, "..."]], {}, (3, 4, 5)),
    ("getitem", [{"slice": [1, None, 2]}], {}, (5, 2)), ("getitem", [-1], {}, (5, 2)),
    ("sum", [], {"dim": [0, 2], "keepdim": True}, (2, 3, 4)), ("sum", [], {}, (2, 3)),
    ("mean", [], {"dim": -1}, (2, 3, 4)), ("mean", [], {"dim": 1, "keepdim": True}, (2, 3)),
    ("maximum", ["x"], {}, (3, 4)), ("maximum", ["x"], {}, (3, 4), False, True),
    ("minimum", ["x"], {}, (3, 4)), ("erf", [], {}, (3, 4)), ("sign", [], {}, (3, 4)),
    ("sin", [], {}, (3, 4)), ("cos", [], {}, (3, 4), False, True),
    ("tan", [], {}, (3, 4), "unit"), ("asin", [], {}, (3, 4), "unit"),
    ("acos", [], {}, (3, 4), "unit", True), ("atan", [], {}, (3, 4)),
    ("sinh", [], {}, (3, 4)), ("cosh", [], {}, (3, 4), False, True),
    ("asinh", [], {}, (3, 4)), ("acosh", [], {}, (3, 4), "above_one"),
    ("atanh", [], {}, (3, 4), "unit", True),
    # comparisons: the bool result is multiplied by h (see _function_network)
    ("gt", [0.2], {}, (3, 4)), ("lt", ["x"], {}, (3, 4)), ("ge", [0.0], {}, (3, 4), False, True),
    ("le", ["x"], {}, (3, 4)), ("eq", ["h"], {}, (3, 4)), ("eq", [0.5], {}, (3, 4), False, True),
    # where: function form where(cond, h, *rest), method form h.where(*rest)
    ("where", ["x"], {}, (3, 4)), ("where", [2.0], {}, (3, 4)),
    ("where", ["cond", -0.5], {}, (3, 4), False, True),
    ("amax", [], {"dim": [0, 2], "keepdim": True}, (2, 3, 4)), ("amax", [], {}, (2, 3)),
    ("amin", [], {"dim": -1}, (2, 3, 4)), ("amin", [1], {"keepdim": True}, (2, 3), False, True),
    ("prod", [], {}, (2, 3)), ("prod", [1], {"keepdim": True}, (2, 3, 4)),
    ("prod", [], {"dim": None, "keepdim": True}, (2, 3)), ("prod", [-1], {}, (2, 3), False, True),
    ("flip", [[0, 2]], {}, (2, 3, 4)), ("flip", [1, 2], {}, (2, 3, 4), False, True),
    ("pad", [[1, 2]], {}, (2, 3, 4)), ("pad", [[1, 1, 2, 0]], {"value": -0.5}, (2, 3, 4)),
    ("pad", [[-1, 2, 0, -1]], {}, (2, 3, 4)), ("pad", [[1, 0, 0, 1, 1, 1]], {}, (2, 3, 4)),
    ("pad", [[2, 1]], {"mode": "reflect"}, (2, 3, 4)),
    ("pad", [[-1, 3]], {"mode": "reflect"}, (2, 3, 4)),
    ("pad", [[1, 2, 2, 1]], {"mode": "replicate"}, (2, 3, 4)),
    ("pad", [[-2, 5]], {"mode": "replicate"}, (3, 4)),
    ("pad", [[2, 3]], {"mode": "circular"}, (2, 3, 4)),
    ("pad", [[3, -1, 1, 1]], {"mode": "circular"}, (2, 3, 4)),
    ("pad", [[1, 0, 1, 2, 0, 1]], {"mode": "replicate"}, (2, 3, 4, 5)),
    ("pad", [[1, 1, 1, 0, 2, 1]], {"mode": "reflect"}, (1, 2, 3, 4, 5)),
    ("max_pool1d", [2], {}, (2, 3, 6)), ("max_pool2d", [3], {"stride": 1, "padding": 1},
                                         (1, 2, 4, 5)),
    ("max_pool3d", [2], {"ceil_mode": True}, (1, 2, 3, 5, 4)),
    ("avg_pool1d", [3], {"stride": 2, "count_include_pad": False, "padding": 1}, (2, 3, 7)),
    ("avg_pool2d", [2], {"divisor_override": 3}, (2, 2, 4, 4)),
    ("avg_pool3d", [2], {}, (1, 2, 4, 4, 4)),
    ("lp_pool1d", [2.0, 2], {}, (2, 3, 6)), ("lp_pool2d", [3.0, 2], {}, (2, 2, 4, 4), True),
    ("lp_pool3d", [1.5, 2], {}, (1, 2, 4, 4, 4), True),
    ("adaptive_avg_pool1d", [3], {}, (2, 3, 7)),
    ("adaptive_avg_pool2d", [[2, None]], {}, (2, 3, 5, 4)),
    ("adaptive_avg_pool3d", [2], {}, (1, 2, 5, 4, 3)),
    ("adaptive_max_pool1d", [4], {}, (2, 3, 7)),
    ("adaptive_max_pool2d", [3], {}, (1, 2, 5, 4)),
    ("adaptive_max_pool3d", [[1, 2, 2]], {}, (1, 2, 3, 4, 5)),
    ("local_response_norm", [2], {"alpha": 0.1, "k": 2.0}, (2, 4, 3)),
    ("floor_divide", [0.3], {}, (3, 4)), ("remainder", [0.7], {}, (3, 4)),
    ("remainder", ["x"], {}, (3, 4), True),
    ("div", [0.7], {"rounding_mode": "floor"}, (3, 4)),
    ("div", [0.7], {"rounding_mode": "trunc"}, (3, 4)),
    ("floor", [], {}, (3, 4)), ("ceil", [], {}, (3, 4)), ("round", [], {}, (3, 4)),
    ("round", [], {"decimals": 1}, (3, 4)), ("trunc", [], {}, (3, 4)),
    ("cumsum", [1], {}, (3, 4)), ("cumsum", [], {"dim": 0}, (3, 4), False, True),
    ("reshape_as", ["xt"], {}, (3, 4)), ("unflatten", [1, [2, -1]], {}, (3, 4)),
    ("chunk", [2], {"dim": 1}, (3, 4)), ("chunk", [3], {}, (6, 2), False, True),
]


def _function_network(name, rest, kwargs, shape, method):
    nodes = [{"name": "x", "op": "placeholder"},
             {"name": "w", "op": "get_attr", "target": "p.w"},
             {"name": "h", "op": "call_function", "target": "mul", "args": ["x", "w"]}]
    if "xt" in rest:
        nodes.append({"name": "xt", "op": "call_method", "target": "transpose",
                      "args": ["x", 0, 1]})
    if name == "where":  # a bool condition
        nodes.append({"name": "cond", "op": "call_function", "target": "gt",
                      "args": ["x", 0.1]})
    args = ["h", *rest]
    if name in ("cat", "stack"):
        args = [["h", "x"]]
    if name == "where" and not method:
        args = ["cond", "h", *rest]
    op = "call_method" if method else "call_function"
    nodes.append({"name": "f", "op": op, "target": name, "args": args, "kwargs": kwargs})
    if FUNCTIONS[name].tuple_of is not None:  # chunk: take the last piece
        nodes.append({"name": "f1", "op": "call_function", "target": "getitem",
                      "args": ["f", -1]})
    if name == "softmax":  # the sum of a softmax is constant: square it for a useful gradient
        nodes.append({"name": "f2", "op": "call_function", "target": "pow", "args": ["f", 2]})
    if name in ("gt", "lt", "ge", "le", "eq"):  # bool: mask h, for a float output
        nodes.append({"name": "f2", "op": "call_function", "target": "mul", "args": ["f", "h"]})
    nodes.append({"name": "output", "op": "output", "args": [nodes[-1]["name"]]})
    return Network.build("net", ["x"], [], nodes, [{"id": "p.w", "shape": list(shape)}])


EXTRA_FUNCTIONS += [("cat", [], {"dim": 1}, (2, 3)), ("stack", [], {"dim": -1}, (2, 3))]


def test_extra_functions_cover_catalogue():
    assert {spec[0] for spec in EXTRA_FUNCTIONS} == set(FUNCTIONS)


@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", EXTRA_FUNCTIONS, ids=lambda s: f"{s[0]}-{s[1]}-{s[2]}")
def test_function_matches_torch(spec, dtype):
    name, rest, kwargs, shape, *flags = spec
    domain = flags[0] if flags else False   # True: positive
    method = bool(len(flags) > 1 and flags[1])
    network = _function_network(name, rest, kwargs, shape, method)
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape)
    w = rng.normal(size=shape)
    if domain is True:
        x, w = np.abs(x) + 0.2, np.abs(w) + 0.2
    elif domain == "unit":   # asin, acos, atanh: inside (-1, 1)
        x, w = 0.9 * np.tanh(x), 0.9 * np.tanh(w)
    elif domain == "above_one":   # acosh
        x, w = np.abs(x) + 1.2, np.abs(w) + 1.2
    params = {"p": {"w": w.astype(dtype)}}
    inputs = [x.astype(dtype)]
    tol = 1e-5 if dtype == "float32" else 1e-10
    ref = TorchRef(network, dtype).load(params)
    net = BACKEND.set_parameters(BACKEND.build(network, dtype=dtype), params)
    with torch.no_grad():
        expected = ref.forward(inputs)[0].numpy()
    got = BACKEND.forward(net, inputs)[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    _assert_grads_close(BACKEND.gradients(net, inputs), ref.gradients(inputs),
                        1e-4 if dtype == "float32" else 1e-6)


def test_get_attr_of_layer_array():
    nodes = [{"name": "x", "op": "placeholder"},
             {"name": "lin", "op": "call_module", "target": "l", "args": ["x"]},
             {"name": "w", "op": "get_attr", "target": "l.weight"},
             {"name": "xw", "op": "call_function", "target": "matmul", "args": ["lin", "w"]},
             {"name": "output", "op": "output", "args": ["xw", "lin"]}]
    network = Network.build("net", ["x"], [{"layer_id": "l", "layer_type": "Linear",
                                            "args": {"in_features": 3, "out_features": 3}}],
                            nodes)
    rng = np.random.default_rng(2)
    params = _random_params(network, rng, "float32")
    x = rng.normal(size=(4, 3)).astype("float32")
    net = BACKEND.set_parameters(BACKEND.build(network), params)
    ref = TorchRef(network).load(params)
    got = BACKEND.forward(net, [x])
    with torch.no_grad():
        expected = ref.forward([x])
    assert len(got) == 2
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-5)
    _assert_grads_close(BACKEND.gradients(net, [x]), ref.gradients([x]), 1e-4)


# --------------------------------------------------------------------------- running statistics
@pytest.mark.parametrize("layer_type,args,shape", [
    ("BatchNorm1d", dict(num_features=3), (5, 3)),
    ("BatchNorm1d", dict(num_features=3, momentum=None), (4, 3, 6)),
    ("BatchNorm2d", dict(num_features=2, momentum=0.25, affine=False), (3, 2, 4, 5)),
    ("BatchNorm3d", dict(num_features=2, momentum=None), (2, 2, 3, 4, 2)),
    ("InstanceNorm1d", dict(num_features=3, track_running_stats=True), (4, 3, 6)),
    ("InstanceNorm2d", dict(num_features=3, track_running_stats=True, momentum=None,
                            affine=True), (2, 3, 4, 5)),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_running_statistics_match_torch(layer_type, args, shape, dtype):
    network = _layer_network(layer_type, args, 1)
    rng = np.random.default_rng(3)
    batches = [rng.normal(loc=1.0, scale=2.0, size=shape).astype(dtype) for _ in range(3)]
    ref = TorchRef(network, dtype)
    net = BACKEND.build(network, dtype=dtype)
    for x in batches:
        with torch.no_grad():
            expected = ref.forward([x], train=True)[0].numpy()
        np.testing.assert_allclose(BACKEND.forward(net, [x], train=True)[0], expected,
                                   rtol=1e-5, atol=1e-5)
    got = BACKEND.get_parameters(net)["l"]
    for name, value in ref.state()["l"].items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-6, err_msg=name)
    # Eval mode then uses the running statistics.
    with torch.no_grad():
        expected = ref.forward([batches[0]], train=False)[0].numpy()
    np.testing.assert_allclose(BACKEND.forward(net, [batches[0]])[0], expected,
                               rtol=1e-5, atol=1e-5)


def test_train_forward_is_pure():
    network = _layer_network("BatchNorm1d", dict(num_features=3), 1)
    model = build_model(network)
    fn, params = make_forward(model, train=True)
    before = model.buffers()
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)), jnp.float32)
    (y,), new = jax.jit(fn)(params, (x,))
    assert int(new["l"]["num_batches_tracked"]) == 1
    assert int(model.buffers()["l"]["num_batches_tracked"]) == 0
    np.testing.assert_array_equal(model.buffers()["l"]["running_mean"],
                                  before["l"]["running_mean"])
    assert not np.allclose(new["l"]["running_mean"], 0)
    # Feeding the new state back continues the statistics.
    _, newer = jax.jit(fn)(params, (x,), None, new)
    assert int(newer["l"]["num_batches_tracked"]) == 2


def test_batchnorm_single_value_per_channel_is_an_error():
    net = BACKEND.build(_layer_network("BatchNorm1d", dict(num_features=3), 1))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        BACKEND.forward(net, [np.ones((1, 3), np.float32)], train=True)


# --------------------------------------------------------------------------- dropout
def _dropout_net(layer_type, p=0.5):
    return BACKEND.build(_identity_network(layer_type, p))


def _identity_network(layer_type, p):
    nodes = [{"name": "x", "op": "placeholder"},
             {"name": "d", "op": "call_module", "target": "d", "args": ["x"]},
             {"name": "output", "op": "output", "args": ["d"]}]
    return Network.build("net", ["x"], [{"layer_id": "d", "layer_type": layer_type,
                                         "args": {"p": p}}], nodes)


@pytest.mark.parametrize("layer_type,shape", [
    ("Dropout", (8, 50)), ("AlphaDropout", (8, 50)), ("Dropout1d", (8, 6, 5)),
    ("Dropout2d", (8, 6, 4, 3)), ("Dropout3d", (8, 6, 2, 3, 2)),
])
def test_dropout_masks(layer_type, shape):
    net = _dropout_net(layer_type)
    x = np.ones(shape, np.float32)
    np.testing.assert_array_equal(BACKEND.forward(net, [x])[0], x)  # eval: identity
    y = BACKEND.forward(net, [x], train=True, seed=1)[0]
    np.testing.assert_array_equal(BACKEND.forward(net, [x], train=True, seed=1)[0], y)
    assert not np.array_equal(BACKEND.forward(net, [x], train=True, seed=2)[0], y)
    rows = y.reshape(shape[0], -1)
    assert len({r.tobytes() for r in rows}) == shape[0], "every sample needs its own mask"
    values = np.unique(y)
    assert len(values) == 2
    if layer_type != "AlphaDropout":
        np.testing.assert_allclose(sorted(values), [0.0, 2.0])
    if layer_type[-2:] in ("1d", "2d", "3d"):
        # Channel-wise: constant over the spatial positions of each (sample, channel).
        per_channel = y.reshape(shape[0], shape[1], -1)
        assert np.all(per_channel == per_channel[..., :1])


def test_dropout_unbatched_and_legacy_ranks():
    # Dropout1d on (C, L): per-channel; Dropout2d on 3-D input: PyTorch treats it as (N, C, L).
    y = BACKEND.forward(_dropout_net("Dropout1d"), [np.ones((40, 6), np.float32)],
                        train=True, seed=0)[0]
    assert np.all(y == y[:, :1])
    y = BACKEND.forward(_dropout_net("Dropout2d"), [np.ones((5, 40, 6), np.float32)],
                        train=True, seed=0)[0]
    assert np.all(y == y[..., :1]) and not np.all(y == y[:, :1, :])
    y = BACKEND.forward(_dropout_net("Dropout3d"), [np.ones((40, 2, 3, 2), np.float32)],
                        train=True, seed=0)[0]
    assert np.all(y.reshape(40, -1) == y.reshape(40, -1)[:, :1])


def test_dropout_needs_key_and_handles_p_bounds():
    model = build_model(_identity_network("Dropout", 0.5))
    with pytest.raises(ValueError, match="PRNG key"):
        model(jnp.ones(3), train=True)
    for p, expected in ((0.0, 1.0), (1.0, 0.0)):
        net = _dropout_net("Dropout", p)
        np.testing.assert_array_equal(
            BACKEND.forward(net, [np.ones(4, np.float32)], train=True)[0], expected)


def test_alpha_dropout_statistics():
    net = _dropout_net("AlphaDropout", 0.2)
    x = np.random.default_rng(0).normal(size=(200000,)).astype(np.float32)
    y = BACKEND.forward(net, [x], train=True, seed=3)[0]
    assert abs(y.mean()) < 0.01 and abs(y.std() - 1) < 0.01  # self-normalising


# --------------------------------------------------------------------------- jit / purity
def _mlp():
    nodes = [{"name": "x", "op": "placeholder"},
             {"name": "h", "op": "call_module", "target": "l1", "args": ["x"]},
             {"name": "t", "op": "call_method", "target": "tanh", "args": ["h"]},
             {"name": "y", "op": "call_module", "target": "l2", "args": ["t"]},
             {"name": "output", "op": "output", "args": ["y"]}]
    layers = [{"layer_id": "l1", "layer_type": "Linear",
               "args": {"in_features": 2, "out_features": 5}},
              {"layer_id": "l2", "layer_type": "Linear",
               "args": {"in_features": 5, "out_features": 1}}]
    return Network.build("mlp", ["x"], layers, nodes)


def test_no_retracing_when_parameters_change():
    fn, params = make_forward(_mlp())
    traces = []

    def counted(p, x):
        traces.append(1)
        return fn(p, x)

    jitted = jax.jit(counted)
    x = jnp.ones((4, 2))
    outs = []
    for k in range(5):
        new = jax.tree_util.tree_map(lambda a, k=k: a + 0.1 * k, params)
        outs.append(jitted(new, (x,))[0])
    assert len(traces) == 1
    assert not np.allclose(outs[0], outs[-1])
    # Inside another jitted function (an ODE right-hand side), gradients included.
    rhs = jax.jit(lambda p, u: fn(p, (u,))[0].sum())
    g = jax.jit(jax.grad(rhs))
    assert jax.tree_util.tree_structure(g(params, x)) == jax.tree_util.tree_structure(params)


def test_backend_does_not_retrace():
    network = _mlp()
    net = BACKEND.build(network)
    x = np.ones((3, 2), np.float32)
    rng = np.random.default_rng(0)
    for _ in range(4):
        net = BACKEND.set_parameters(net, _random_params(network, rng, "float32"))
        BACKEND.forward(net, [x])
        BACKEND.gradients(net, [x])
    assert net.eval_fn._cache_size() == 1
    assert net.eval_grad._cache_size() == 1


def test_make_forward_single_and_multi_input():
    fn, params = make_forward(_mlp())
    x = jnp.ones((3, 2))
    np.testing.assert_array_equal(fn(params, x)[0], fn(params, (x,))[0])
    model = build_model(_mlp())
    np.testing.assert_allclose(model(x)[0], fn(model.parameters(), x)[0])


def test_model_is_a_usable_equinox_module():
    import equinox as eqx

    model = build_model(_mlp(), seed=1)
    x = jnp.ones((3, 2))
    y = eqx.filter_jit(lambda m, x: m(x)[0])(model, x)
    np.testing.assert_allclose(y, model(x)[0], rtol=1e-6)
    grads = eqx.filter_grad(lambda m: m(x)[0].sum())(model)
    assert grads.layers["l1"].weight.shape == (5, 2)
    fn, params = make_forward(model)
    g = jax.grad(lambda p: fn(p, x)[0].sum())(params)
    np.testing.assert_allclose(g["l1"]["weight"], grads.layers["l1"].weight, rtol=1e-6)
    assert set(model.arrays()) == {"l1", "l2"} and model.buffers() == {}


def test_float64_model():
    network = _mlp()
    net = BACKEND.build(network, dtype="float64")
    assert jax.config.jax_enable_x64
    y = BACKEND.forward(net, [np.ones((2, 2))])[0]
    assert y.dtype == np.float64
    assert BACKEND.get_parameters(net)["l1"]["weight"].dtype == np.float64
    with pytest.raises(ValueError, match="dtype"):
        BACKEND.build(network, dtype="float16")


def test_prelu_initial_weight_is_init():
    for args in (dict(num_parameters=3, init=0.1), {}):
        network = _layer_network("PReLU", args, 1)
        got = BACKEND.get_parameters(BACKEND.build(network))["l"]["weight"]
        torch_net = get_torch_backend().build(network)
        expected = get_torch_backend().get_parameters(torch_net)["l"]["weight"]
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.float32


def get_torch_backend():
    from petab_sciml.backends.torch import BACKEND as TORCH

    return TORCH


def test_initial_parameters_follow_pytorch_bounds():
    net = BACKEND.build(_mlp(), seed=3)
    p = BACKEND.get_parameters(net)
    assert np.abs(p["l1"]["weight"]).max() <= 1 / math.sqrt(2)
    assert np.abs(p["l2"]["weight"]).max() <= 1 / math.sqrt(5)
    assert p["l1"]["weight"].std() > 0.1
    other = BACKEND.get_parameters(BACKEND.build(_mlp(), seed=4))
    assert not np.allclose(p["l1"]["weight"], other["l1"]["weight"])


# --------------------------------------------------------------------------- parameters
def test_set_parameters_checks():
    network = _layer_network("BatchNorm1d", dict(num_features=3), 1)
    net = BACKEND.build(network)
    good = {"l": {"weight": np.full(3, 2.0), "bias": np.zeros(3)}}
    BACKEND.set_parameters(net, good)  # buffers are optional
    with pytest.raises(PetabSciMLError, match=r"missing trainable.*l\.bias"):
        BACKEND.set_parameters(net, {"l": {"weight": np.ones(3)}})
    BACKEND.set_parameters(net, {"l": {"weight": np.ones(3)}}, strict=False)
    with pytest.raises(PetabSciMLError, match="shape mismatch"):
        BACKEND.set_parameters(net, {"l": {"weight": np.ones(4), "bias": np.zeros(3)}})
    with pytest.raises(PetabSciMLError, match="unknown array"):
        BACKEND.set_parameters(net, {"l": {"weight": np.ones(3), "bias": np.zeros(3),
                                           "scale": np.ones(3)}})
    with pytest.raises(PetabSciMLError, match="unknown parameter group"):
        BACKEND.set_parameters(net, {"l2": {"weight": np.ones(3)}}, strict=False)
    BACKEND.set_parameters(net, {"l": {"running_mean": np.ones(3),
                                       "num_batches_tracked": np.int64(7)}}, strict=False)
    p = BACKEND.get_parameters(net)["l"]
    assert p["num_batches_tracked"].dtype == np.int64 and p["num_batches_tracked"] == 7
    np.testing.assert_array_equal(p["running_mean"], 1.0)
    assert set(p) == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}


def test_gradients_cover_exactly_the_trainable_arrays():
    network = _layer_network("BatchNorm1d", dict(num_features=3), 1)
    net = BACKEND.build(network)
    g = BACKEND.gradients(net, [np.random.default_rng(0).normal(size=(4, 3))], train=True)
    assert set(g) == {"l"} and set(g["l"]) == {"weight", "bias"}


def test_wrong_input_rank_is_reported():
    network = _layer_network("Conv2d", dict(in_channels=1, out_channels=1, kernel_size=2), 1)
    with pytest.raises(ValueError, match="Conv2d: expected 3D or 4D input"):
        BACKEND.forward(BACKEND.build(network), [np.ones((4, 4), np.float32)])


def test_missing_jax_names_the_extra():
    code = ("import sys; sys.modules['jax'] = None\n"
            "import petab_sciml.backends.jax as b\n"
            "try:\n    b.BACKEND.build\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert "petab-sciml-toolkit[jax]" in out and "\n" not in out

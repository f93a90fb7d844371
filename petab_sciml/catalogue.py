"""The layer and function catalogue: the one place for every fact about a layer.

For each layer type (PyTorch names: ``Linear``, ``Conv2d``, ...) the catalogue lists its
constructor arguments with their PyTorch defaults, and the parameter arrays it owns with
their shapes as a function of the arguments and whether they are trainable or buffers.
For each function (``relu``, ``add``, ``reshape``, ...) it lists the signature and every
spelling torch.fx writes for it (``torch.relu``, ``torch.nn.functional.relu``, method
``relu``, ``operator.add`` ...), mapped to one canonical name.

Backends, formats and the validator read these facts from here; nothing else restates
them.  The module is numpy-free and imports nothing heavy.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from petab_sciml.errors import NetworkError

REQUIRED = object()
"""Sentinel default of an argument that must be given."""


# --------------------------------------------------------------------------- arguments
# An argument kind is a name understood by :func:`check_value`.
#   int, float, bool, str            plain scalars (an int is accepted for a float)
#   ints:N                           an int or a list of N ints (kernel_size, stride, ...)
#   ints?:N                          like ints:N, or null
#   shape                            an int or a list of ints (LayerNorm normalized_shape)
#   sizes?:N                         an int, null, or a list of N ints-or-nulls (adaptive pools)
#   padding:N                        ints:N, or the strings "same" / "valid"
#   float?, int?, str?               the scalar or null
#   none                             only null is accepted (dtype, device)
#   choice:a|b|c                     one of the listed strings
#   choice?:a|b                      null or one of the listed strings
#   false                            only false (return_indices of functional pools)
#   any                              anything (kept as written)
# Function-only kinds:
#   tensor                           a node reference
#   tensor|number                    a node reference or a number
#   tensors                          a list of node references
#   dims                             an int or a list of ints (possibly variadic in methods)
#   dims?                            dims or null
#   pads                             a list of an even number of ints (F.pad's pad)
#   index                            a getitem index (int, null, "...", {slice: [a, b, c]}
#                                    or a list of those)


@dataclass(frozen=True)
class Arg:
    """One constructor or function argument.

    ``torch`` is False for arguments that the PEtab SciML YAML carries but the PyTorch
    constructor does not accept (e.g. ``bias`` on BatchNorm layers); backends skip them.
    ``ignored`` marks arguments that have no effect on the result (``inplace``).
    """

    name: str
    kind: str
    default: Any = REQUIRED
    torch: bool = True
    ignored: bool = False

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and not isinstance(v, bool)


def _ints(v: Any, n: int | None) -> bool:
    if _is_int(v):
        return True
    if isinstance(v, (list, tuple)) and all(_is_int(x) for x in v):
        return n is None or len(v) == n
    return False


def kind_description(kind: str) -> str:
    """Human-readable description of an argument kind, for error messages."""
    base, _, n = kind.partition(":")
    return {
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "str": "a string",
        "ints": f"an integer or a list of {n} integers",
        "ints?": f"null, an integer or a list of {n} integers",
        "shape": "an integer or a list of integers",
        "sizes?": f"an integer, null, or a list of {n} integers or nulls",
        "padding": f'an integer, a list of {n} integers, "same" or "valid"',
        "float?": "a number or null",
        "int?": "an integer or null",
        "str?": "a string or null",
        "none": "null",
        "choice": "one of " + ", ".join(repr(c) for c in n.split("|")),
        "choice?": "null or one of " + ", ".join(repr(c) for c in n.split("|")),
        "false": "false (true is not supported)",
        "any": "any value",
        "tensor": "the name of an earlier node",
        "tensor|number": "the name of an earlier node or a number",
        "tensors": "a list of names of earlier nodes",
        "dims": "an integer or a list of integers",
        "dims?": "null, an integer or a list of integers",
        "pads": "a list of an even number of integers",
        "index": "an index (integer, null, '...', {slice: [start, stop, step]} or a list)",
    }.get(base, kind)


def _is_index_item(v: Any) -> bool:
    if v is None or _is_int(v) or v == "...":
        return True
    if isinstance(v, Mapping) and set(v) == {"slice"}:
        s = v["slice"]
        return (
            isinstance(s, (list, tuple))
            and len(s) == 3
            and all(x is None or _is_int(x) for x in s)
        )
    return False


def check_value(kind: str, value: Any) -> bool:
    """True if ``value`` is acceptable for an argument of ``kind`` (see module notes).

    Tensor kinds are checked structurally only (a string); whether the name is defined
    is checked by the network IR.
    """
    base, _, n = kind.partition(":")
    size = int(n) if n.isdigit() else None
    if base == "int":
        return _is_int(value)
    if base == "float":
        return _is_number(value) or value in ("inf", "-inf", "nan")
    if base == "bool":
        return isinstance(value, bool)
    if base == "str":
        return isinstance(value, str)
    if base == "ints":
        return _ints(value, size)
    if base == "ints?":
        return value is None or _ints(value, size)
    if base == "shape":
        return _ints(value, None)
    if base == "sizes?":
        if value is None or _is_int(value):
            return True
        return (
            isinstance(value, (list, tuple))
            and len(value) == size
            and all(x is None or _is_int(x) for x in value)
        )
    if base == "padding":
        return value in ("same", "valid") or _ints(value, size)
    if base == "float?":
        return value is None or _is_number(value)
    if base == "int?":
        return value is None or _is_int(value)
    if base == "str?":
        return value is None or isinstance(value, str)
    if base == "none":
        return value is None
    if base == "choice":
        return value in n.split("|")
    if base == "choice?":
        return value is None or value in n.split("|")
    if base == "false":
        return value is False
    if base == "any":
        return True
    if base == "tensor":
        return isinstance(value, str)
    if base == "tensor|number":
        return isinstance(value, str) or _is_number(value)
    if base == "tensors":
        return isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value)
    if base == "dims":
        return _ints(value, None)
    if base == "dims?":
        return value is None or _ints(value, None)
    if base == "pads":
        return (isinstance(value, (list, tuple)) and len(value) % 2 == 0
                and all(_is_int(x) for x in value))
    if base == "index":
        if isinstance(value, (list, tuple)):
            return all(_is_index_item(x) for x in value)
        return _is_index_item(value)
    raise ValueError(f"unknown argument kind {kind!r}")  # a catalogue bug, not user input


def as_tuple(value: Any, n: int) -> tuple[int, ...]:
    """Expand an int-or-list argument to an n-tuple (PyTorch's ``_ntuple``)."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,) * n


# --------------------------------------------------------------------------- layers
ShapeFn = Callable[[Mapping[str, Any]], tuple[int, ...]]


@dataclass(frozen=True)
class ArraySpec:
    """A parameter array owned by a layer.

    ``shape(args)`` gives its PyTorch shape from the layer's resolved arguments;
    ``present(args)`` tells whether the layer has it at all (``bias=False``);
    ``trainable`` is False for buffers such as BatchNorm running statistics;
    ``dtype`` is the numpy dtype name for buffers of fixed type, else None (the model's).
    """

    name: str
    shape: ShapeFn
    present: Callable[[Mapping[str, Any]], bool] = lambda args: True
    trainable: bool = True
    dtype: str | None = None


@dataclass(frozen=True)
class LayerSpec:
    """Everything known about one layer type."""

    type: str
    args: tuple[Arg, ...]
    arrays: tuple[ArraySpec, ...] = ()
    n_inputs: int = 1
    stochastic: bool | Callable[[Mapping[str, Any]], bool] = False
    """True (or a rule on resolved args) when the layer draws random numbers in training."""
    spatial_dims: int | None = None
    check: Callable[[Mapping[str, Any]], str | None] | None = None
    """Extra consistency rule on resolved args; returns an error message or None."""
    array_rule: Callable[[Mapping[str, Any]], tuple[ArraySpec, ...]] | None = None
    """For layers whose array names depend on the arguments (recurrent layers:
    ``weight_ih_l0``, ``weight_ih_l1_reverse``, ...): the arrays of resolved args.
    ``arrays`` then lists the arrays of the default arguments, for documentation."""
    optional_inputs: tuple[str, ...] = ()
    """Inputs that may follow the ``n_inputs`` required ones: ``tensor``, or ``tensors:K``
    for a tuple of K tensors (an LSTM's ``(h_0, c_0)``)."""
    output: Any = "tensor"
    """What a call returns: ``"tensor"``, or a tuple of such descriptions
    (``("tensor", ("tensor", "tensor"))`` for an LSTM's ``output, (h_n, c_n)``)."""
    function: str | None = None
    """For activation modules (``nn.ReLU``...): the catalogue function the layer applies,
    called with the layer's arguments (ignored ones dropped)."""

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    def array_specs(self, args: Mapping[str, Any]) -> tuple[ArraySpec, ...]:
        """The arrays a layer with resolved ``args`` may have (``present`` still applies)."""
        return self.array_rule(args) if self.array_rule is not None else self.arrays

    def is_stochastic(self, args: Mapping[str, Any]) -> bool:
        """Whether a layer with resolved ``args`` draws random numbers in training mode."""
        return self.stochastic(args) if callable(self.stochastic) else bool(self.stochastic)

    @property
    def max_inputs(self) -> int:
        return self.n_inputs + len(self.optional_inputs)

    def resolve_args(
        self, given: Mapping[str, Any], *, file: object = None, entry: str = ""
    ) -> dict[str, Any]:
        """Check ``given`` against the signature and fill in defaults.

        Raises :class:`NetworkError` for unknown, missing or ill-typed arguments.
        """
        if not isinstance(given, Mapping):
            raise NetworkError(
                f"args of layer type {self.type} must be a mapping, got {type(given).__name__}",
                file=file, entry=entry,
            )
        unknown = [k for k in given if k not in self.arg_names]
        if unknown:
            raise NetworkError(
                f"unknown argument {unknown[0]!r} for layer type {self.type}; "
                f"expected one of: {', '.join(self.arg_names)}",
                file=file, entry=entry,
            )
        resolved: dict[str, Any] = {}
        for arg in self.args:
            if arg.name in given:
                value = given[arg.name]
                if not check_value(arg.kind, value):
                    raise NetworkError(
                        f"argument {arg.name!r} of layer type {self.type} must be "
                        f"{kind_description(arg.kind)}, got {value!r}",
                        file=file, entry=entry,
                    )
                resolved[arg.name] = value
            elif arg.required:
                raise NetworkError(
                    f"missing required argument {arg.name!r} for layer type {self.type}",
                    file=file, entry=entry,
                )
            else:
                resolved[arg.name] = arg.default
        # Arguments that default to another argument's value (``bias`` of norms = affine).
        for name, value in list(resolved.items()):
            if isinstance(value, _SameAs):
                resolved[name] = resolved[value.other]
        if self.check is not None:
            message = self.check(resolved)
            if message:
                raise NetworkError(f"layer type {self.type}: {message}", file=file, entry=entry)
        return resolved

    def array_shapes(self, args: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        """Shapes of the arrays present for resolved ``args``, in catalogue order."""
        return {a.name: tuple(a.shape(args)) for a in self.array_specs(args)
                if a.present(args)}

    def torch_kwargs(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Resolved arguments accepted by the PyTorch constructor.

        One-element size lists of 1-d layers become plain ints: some PyTorch 1-d layers
        (LPPool1d) accept only an int there.
        """
        out = {}
        for a in self.args:
            if a.torch and a.name in args:
                value = args[a.name]
                if a.kind.endswith(":1") and isinstance(value, (list, tuple)) and len(value) == 1:
                    value = value[0]
                out[a.name] = value
        return out


@dataclass(frozen=True)
class _SameAs:
    """Default that copies another argument's resolved value."""

    other: str

    def __repr__(self) -> str:
        return f"<same as {self.other}>"


LAYERS: dict[str, LayerSpec] = {}


def _layer(spec: LayerSpec) -> None:
    LAYERS[spec.type] = spec


def _has(name: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda args: bool(args[name])


_DEVICE = (Arg("device", "none", None, ignored=True), Arg("dtype", "none", None, ignored=True))

_layer(LayerSpec(
    "Linear",
    (Arg("in_features", "int"), Arg("out_features", "int"), Arg("bias", "bool", True), *_DEVICE),
    (
        ArraySpec("weight", lambda a: (a["out_features"], a["in_features"])),
        ArraySpec("bias", lambda a: (a["out_features"],), _has("bias")),
    ),
))
_layer(LayerSpec(
    "Bilinear",
    (
        Arg("in1_features", "int"), Arg("in2_features", "int"), Arg("out_features", "int"),
        Arg("bias", "bool", True), *_DEVICE,
    ),
    (
        ArraySpec("weight", lambda a: (a["out_features"], a["in1_features"], a["in2_features"])),
        ArraySpec("bias", lambda a: (a["out_features"],), _has("bias")),
    ),
    n_inputs=2,
))
_layer(LayerSpec("Flatten", (Arg("start_dim", "int", 1), Arg("end_dim", "int", -1))))

_DROPOUT_ARGS = (Arg("p", "float", 0.5), Arg("inplace", "bool", False, ignored=True))


def _check_p(args: Mapping[str, Any]) -> str | None:
    p = args["p"]
    if not 0 <= p <= 1:
        return f"dropout probability p must be in [0, 1], got {p}"
    return None


for _name in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"):
    _layer(LayerSpec(_name, _DROPOUT_ARGS, stochastic=True, check=_check_p))


def _conv_check(args: Mapping[str, Any]) -> str | None:
    if args.get("padding") == "same" and any(s != 1 for s in as_tuple(args["stride"], 1)):
        return "padding='same' needs stride 1 (as in PyTorch)"
    g = args["groups"]
    if g < 1 or args["in_channels"] % g or args["out_channels"] % g:
        return (
            f"in_channels ({args['in_channels']}) and out_channels ({args['out_channels']}) "
            f"must be divisible by groups ({g})"
        )
    return None


for _n in (1, 2, 3):
    _conv_args = (
        Arg("in_channels", "int"), Arg("out_channels", "int"),
        Arg("kernel_size", f"ints:{_n}"), Arg("stride", f"ints:{_n}", 1),
        Arg("padding", f"padding:{_n}", 0), Arg("dilation", f"ints:{_n}", 1),
        Arg("groups", "int", 1), Arg("bias", "bool", True),
        Arg("padding_mode", "choice:zeros|reflect|replicate|circular", "zeros"), *_DEVICE,
    )
    _layer(LayerSpec(
        f"Conv{_n}d", _conv_args,
        (
            ArraySpec("weight", lambda a, n=_n: (
                a["out_channels"], a["in_channels"] // a["groups"],
                *as_tuple(a["kernel_size"], n))),
            ArraySpec("bias", lambda a: (a["out_channels"],), _has("bias")),
        ),
        spatial_dims=_n, check=_conv_check,
    ))
    _convt_args = (
        Arg("in_channels", "int"), Arg("out_channels", "int"),
        Arg("kernel_size", f"ints:{_n}"), Arg("stride", f"ints:{_n}", 1),
        Arg("padding", f"ints:{_n}", 0), Arg("output_padding", f"ints:{_n}", 0),
        Arg("groups", "int", 1), Arg("bias", "bool", True), Arg("dilation", f"ints:{_n}", 1),
        Arg("padding_mode", "choice:zeros", "zeros"), *_DEVICE,
    )
    _layer(LayerSpec(
        f"ConvTranspose{_n}d", _convt_args,
        (
            ArraySpec("weight", lambda a, n=_n: (
                a["in_channels"], a["out_channels"] // a["groups"],
                *as_tuple(a["kernel_size"], n))),
            ArraySpec("bias", lambda a: (a["out_channels"],), _has("bias")),
        ),
        spatial_dims=_n, check=_conv_check,
    ))
    _layer(LayerSpec(
        f"MaxPool{_n}d",
        (
            Arg("kernel_size", f"ints:{_n}"), Arg("stride", f"ints?:{_n}", None),
            Arg("padding", f"ints:{_n}", 0), Arg("dilation", f"ints:{_n}", 1),
            Arg("return_indices", "bool", False), Arg("ceil_mode", "bool", False),
        ),
        spatial_dims=_n,
        check=lambda a: "return_indices=True is not supported" if a["return_indices"] else None,
    ))
    _avg_args: tuple[Arg, ...] = (
        Arg("kernel_size", f"ints:{_n}"), Arg("stride", f"ints?:{_n}", None),
        Arg("padding", f"ints:{_n}", 0), Arg("ceil_mode", "bool", False),
        Arg("count_include_pad", "bool", True),
    )
    if _n > 1:
        _avg_args += (Arg("divisor_override", "int?", None),)
    else:
        # AvgPool1d has no divisor_override in PyTorch; the YAML may still carry null.
        _avg_args += (Arg("divisor_override", "none", None, torch=False),)
    _layer(LayerSpec(f"AvgPool{_n}d", _avg_args, spatial_dims=_n))
    _layer(LayerSpec(
        f"LPPool{_n}d",
        (
            Arg("norm_type", "float"), Arg("kernel_size", f"ints:{_n}"),
            Arg("stride", f"ints?:{_n}", None), Arg("ceil_mode", "bool", False),
        ),
        spatial_dims=_n,
    ))
    _layer(LayerSpec(
        f"AdaptiveMaxPool{_n}d",
        (Arg("output_size", f"sizes?:{_n}"), Arg("return_indices", "bool", False)),
        spatial_dims=_n,
        check=lambda a: "return_indices=True is not supported" if a["return_indices"] else None,
    ))
    _layer(LayerSpec(
        f"AdaptiveAvgPool{_n}d", (Arg("output_size", f"sizes?:{_n}"),), spatial_dims=_n,
    ))

    def _norm_check(a: Mapping[str, Any]) -> str | None:
        if a["bias"] != a["affine"]:
            return (
                f"bias ({a['bias']}) must equal affine ({a['affine']}): PyTorch norm layers "
                "have a learnable bias exactly when they are affine"
            )
        return None

    _norm_arrays = (
        ArraySpec("weight", lambda a: (a["num_features"],), _has("affine")),
        ArraySpec("bias", lambda a: (a["num_features"],), _has("affine")),
        ArraySpec("running_mean", lambda a: (a["num_features"],), _has("track_running_stats"),
                  trainable=False),
        ArraySpec("running_var", lambda a: (a["num_features"],), _has("track_running_stats"),
                  trainable=False),
        ArraySpec("num_batches_tracked", lambda a: (), _has("track_running_stats"),
                  trainable=False, dtype="int64"),
    )
    _layer(LayerSpec(
        f"BatchNorm{_n}d",
        (
            Arg("num_features", "int"), Arg("eps", "float", 1e-5),
            Arg("momentum", "float?", 0.1), Arg("affine", "bool", True),
            Arg("track_running_stats", "bool", True),
            Arg("bias", "bool", _SameAs("affine"), torch=False), *_DEVICE,
        ),
        _norm_arrays, spatial_dims=_n, check=_norm_check,
    ))
    _layer(LayerSpec(
        f"InstanceNorm{_n}d",
        (
            Arg("num_features", "int"), Arg("eps", "float", 1e-5),
            Arg("momentum", "float?", 0.1), Arg("affine", "bool", False),
            Arg("track_running_stats", "bool", False),
            Arg("bias", "bool", _SameAs("affine"), torch=False), *_DEVICE,
        ),
        _norm_arrays, spatial_dims=_n, check=_norm_check,
    ))


def _normalized_shape(a: Mapping[str, Any]) -> tuple[int, ...]:
    return as_tuple(a["normalized_shape"], 1)


_layer(LayerSpec(
    "LayerNorm",
    (
        Arg("normalized_shape", "shape"), Arg("eps", "float", 1e-5),
        Arg("elementwise_affine", "bool", True), Arg("bias", "bool", True), *_DEVICE,
    ),
    (
        ArraySpec("weight", _normalized_shape, _has("elementwise_affine")),
        ArraySpec("bias", _normalized_shape,
                  lambda a: bool(a["elementwise_affine"] and a["bias"])),
    ),
))



def _check_prelu(args: Mapping[str, Any]) -> str | None:
    if args["num_parameters"] < 1:
        return f"num_parameters must be at least 1, got {args['num_parameters']}"
    return None


# PReLU: weight per channel (axis 1 of the input; inputs of rank < 2 have one channel).
_layer(LayerSpec(
    "PReLU",
    (Arg("num_parameters", "int", 1), Arg("init", "float", 0.25), *_DEVICE),
    (ArraySpec("weight", lambda a: (a["num_parameters"],)),),
    check=_check_prelu,
))


_layer(LayerSpec(
    "LocalResponseNorm",
    (Arg("size", "int"), Arg("alpha", "float", 1e-4), Arg("beta", "float", 0.75),
     Arg("k", "float", 1.0)),
    check=lambda a: None if a["size"] >= 1 else f"size must be at least 1, got {a['size']}",
))


# Recurrent layers (torch.nn.RNN, LSTM, GRU): PyTorch's arguments, parameter names
# (weight_ih_l0, weight_hh_l0_reverse, ...), layouts (gates stacked along axis 0 in
# PyTorch's order: LSTM i, f, g, o; GRU r, z, n) and call convention: ``layer(x)`` or
# ``layer(x, h_0)`` (LSTM: ``layer(x, (h_0, c_0))``) returning ``output, h_n`` (LSTM:
# ``output, (h_n, c_n)``).
RECURRENT_GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}


def recurrent_arrays(layer_type: str, args: Mapping[str, Any]) -> tuple[ArraySpec, ...]:
    """The arrays of a recurrent layer in PyTorch's ``_flat_weights_names`` order."""
    gates = RECURRENT_GATES[layer_type] * args["hidden_size"]
    hidden, proj = args["hidden_size"], args.get("proj_size", 0)
    out_size = proj or hidden
    directions = ("", "_reverse") if args["bidirectional"] else ("",)
    out: list[ArraySpec] = []
    for k in range(args["num_layers"]):
        in_size = args["input_size"] if k == 0 else out_size * len(directions)
        for sfx in directions:
            out.append(ArraySpec(f"weight_ih_l{k}{sfx}", lambda a, n=in_size: (gates, n)))
            out.append(ArraySpec(f"weight_hh_l{k}{sfx}", lambda a: (gates, out_size)))
            if args["bias"]:
                out.append(ArraySpec(f"bias_ih_l{k}{sfx}", lambda a: (gates,)))
                out.append(ArraySpec(f"bias_hh_l{k}{sfx}", lambda a: (gates,)))
            if proj:
                out.append(ArraySpec(f"weight_hr_l{k}{sfx}", lambda a: (proj, hidden)))
    return tuple(out)


def _check_recurrent(args: Mapping[str, Any]) -> str | None:
    if args["input_size"] < 1 or args["hidden_size"] < 1:
        return "input_size and hidden_size must be at least 1"
    if args["num_layers"] < 1:
        return f"num_layers must be at least 1, got {args['num_layers']}"
    if not 0 <= args["dropout"] <= 1:
        return f"dropout must be in [0, 1], got {args['dropout']}"
    proj = args.get("proj_size", 0)
    if proj < 0 or (proj and proj >= args["hidden_size"]):
        return f"proj_size must be 0 or in [1, hidden_size), got {proj}"
    return None


def _recurrent_dropout(args: Mapping[str, Any]) -> bool:
    return args["dropout"] > 0 and args["num_layers"] > 1


for _type in ("RNN", "LSTM", "GRU"):
    _rnn_args: tuple[Arg, ...] = (
        Arg("input_size", "int"), Arg("hidden_size", "int"), Arg("num_layers", "int", 1))
    if _type == "RNN":
        _rnn_args += (Arg("nonlinearity", "choice:tanh|relu", "tanh"),)
    _rnn_args += (Arg("bias", "bool", True), Arg("batch_first", "bool", False),
                  Arg("dropout", "float", 0.0), Arg("bidirectional", "bool", False))
    if _type == "LSTM":
        _rnn_args += (Arg("proj_size", "int", 0),)
    _rnn_args += _DEVICE
    _state = "tensors:2" if _type == "LSTM" else "tensor"
    _layer(LayerSpec(
        _type, _rnn_args,
        recurrent_arrays(_type, {"input_size": 1, "hidden_size": 1, "num_layers": 1,
                                 "bias": True, "bidirectional": False}),
        stochastic=_recurrent_dropout, check=_check_recurrent,
        array_rule=lambda a, t=_type: recurrent_arrays(t, a),
        optional_inputs=(_state,),
        output=("tensor", ("tensor", "tensor")) if _type == "LSTM" else ("tensor", "tensor"),
    ))


# Activation modules: layers without arrays that apply one catalogue function with their
# arguments (nn.LeakyReLU(0.2) is leaky_relu(x, negative_slope=0.2)).  Their arguments
# are the function's, except the input.
ACTIVATION_LAYERS = {
    "ReLU": "relu", "ReLU6": "relu6", "LeakyReLU": "leaky_relu", "ELU": "elu",
    "CELU": "celu", "SELU": "selu", "GELU": "gelu", "SiLU": "silu", "Mish": "mish",
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Hardtanh": "hardtanh", "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid", "LogSigmoid": "logsigmoid", "Softplus": "softplus",
    "Softsign": "softsign", "Tanhshrink": "tanhshrink", "Softmax": "softmax",
    "LogSoftmax": "log_softmax",
}
"""Activation layer type -> the catalogue function it applies (filled in below, once the
functions are defined)."""


def _register_activation_layers() -> None:
    for layer_type, function in ACTIVATION_LAYERS.items():
        params = FUNCTIONS[function].params[1:]
        if function in ("softmax", "log_softmax"):  # nn.Softmax(dim=None)
            params = tuple(p for p in params if p.name == "dim")
        _layer(LayerSpec(layer_type, tuple(params), function=function))


def layer_spec(layer_type: str, *, file: object = None, entry: str = "") -> LayerSpec:
    """The catalogue entry of ``layer_type`` or a :class:`NetworkError` with suggestions."""
    try:
        return LAYERS[layer_type]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(layer_type), LAYERS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise NetworkError(
            f"unknown layer type {layer_type!r}{hint} (supported: {', '.join(sorted(LAYERS))})",
            file=file, entry=entry,
        ) from None


# --------------------------------------------------------------------------- functions
@dataclass(frozen=True)
class FunctionSpec:
    """A function of the forward graph.

    ``params`` is the PyTorch signature (first the tensor inputs).  ``variadic`` names a
    ``dims`` parameter that methods may spread over several positional arguments
    (``x.view(2, 3)``, ``x.permute(0, 2, 1)``).  ``aliases`` are the other spellings
    torch.fx and exporters write; ``methods`` the ``call_method`` names.
    ``method_order`` is the positional order of the parameters in the method spelling
    when it differs from the function's (``x.where(condition, y)`` is
    ``where(condition, x, y)``: the tensor the method is called on comes first).
    """

    name: str
    params: tuple[Arg, ...]
    aliases: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    variadic: str | None = None
    returns_tensor: bool = True
    method_order: tuple[str, ...] | None = None
    tuple_of: str | None = None
    """For functions that return a tuple of tensors (``chunk``): the parameter giving
    their number; the elements are read with ``getitem``."""

    def output(self, bound: Mapping[str, Any]) -> Any:
        """What a call with ``bound`` arguments returns (see ``LayerSpec.output``)."""
        if self.tuple_of is None:
            return "tensor"
        return ("tensor",) * int(bound[self.tuple_of])

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def bind(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        method: bool = False,
        file: object = None,
        entry: str = "",
    ) -> dict[str, Any]:
        """Bind positional and keyword arguments to the signature, fill defaults, check kinds.

        Returns ``{param: value}`` for every parameter.  Raises :class:`NetworkError` on
        wrong arity, unknown, duplicate or ill-typed arguments.
        """
        args = list(args)
        if (
            method
            and self.variadic is not None
            and len(args) > 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in args[1:])
        ):
            args = [args[0], list(args[1:])]
        positional = self.params
        if method and self.method_order is not None:
            by_name = {p.name: p for p in self.params}
            positional = tuple(by_name[n] for n in self.method_order)
        if len(args) > len(positional):
            raise NetworkError(
                f"function {self.name} takes at most {len(positional)} positional "
                f"arguments ({', '.join(p.name for p in positional)}), got {len(args)}",
                file=file, entry=entry,
            )
        bound: dict[str, Any] = {}
        for param, value in zip(positional, args):
            bound[param.name] = value
        for key, value in kwargs.items():
            if key not in self.param_names:
                raise NetworkError(
                    f"unknown keyword argument {key!r} for function {self.name}; "
                    f"expected one of: {', '.join(self.param_names)}",
                    file=file, entry=entry,
                )
            if key in bound:
                raise NetworkError(
                    f"argument {key!r} of function {self.name} given twice",
                    file=file, entry=entry,
                )
            bound[key] = value
        for param in self.params:
            if param.name not in bound:
                if param.required:
                    raise NetworkError(
                        f"function {self.name} is missing its argument {param.name!r}",
                        file=file, entry=entry,
                    )
                bound[param.name] = param.default
            elif not check_value(param.kind, bound[param.name]):
                raise NetworkError(
                    f"argument {param.name!r} of function {self.name} must be "
                    f"{kind_description(param.kind)}, got {bound[param.name]!r}",
                    file=file, entry=entry,
                )
        return {p.name: bound[p.name] for p in self.params}

    def tensor_params(self) -> tuple[Arg, ...]:
        return tuple(p for p in self.params if p.kind in ("tensor", "tensor|number", "tensors"))


FUNCTIONS: dict[str, FunctionSpec] = {}
_SPELLINGS: dict[tuple[str, str], str] = {}  # (op, spelling) -> canonical name

_X = Arg("input", "tensor")
_INPLACE = Arg("inplace", "bool", False, ignored=True)


def _fn(
    name: str,
    *params: Arg,
    aliases: Sequence[str] = (),
    methods: Sequence[str] = (),
    torch_ns: bool = True,
    functional: bool = False,
    operator: Sequence[str] = (),
    variadic: str | None = None,
    returns_tensor: bool = True,
    method_order: Sequence[str] | None = None,
    tuple_of: str | None = None,
) -> None:
    spellings = [name, *aliases]
    if torch_ns:
        spellings += [f"torch.{name}"]
    if functional:
        spellings += [f"torch.nn.functional.{name}", f"F.{name}"]
    for op_name in operator:
        spellings += [f"operator.{op_name}", f"_operator.{op_name}",
                      f"<built-in function {op_name}>"]
    spec = FunctionSpec(name, tuple(params), tuple(spellings[1:]), tuple(methods),
                        variadic, returns_tensor,
                        None if method_order is None else tuple(method_order), tuple_of)
    FUNCTIONS[name] = spec
    for s in spellings:
        _SPELLINGS[("call_function", s)] = name
    for m in methods:
        _SPELLINGS[("call_method", m)] = name


# Activations (torch.nn.functional signatures).
_fn("relu", _X, _INPLACE, functional=True, methods=["relu"])
_fn("relu6", _X, _INPLACE, functional=True, torch_ns=False)
_fn("hardtanh", _X, Arg("min_val", "float", -1.0), Arg("max_val", "float", 1.0), _INPLACE,
    functional=True, torch_ns=False)
_fn("hardswish", _X, _INPLACE, functional=True, torch_ns=False)
_fn("selu", _X, _INPLACE, functional=True)
_fn("silu", _X, _INPLACE, functional=True, torch_ns=False)
_fn("leaky_relu", _X, Arg("negative_slope", "float", 0.01), _INPLACE, functional=True,
    torch_ns=False)
# F.gelu takes no ``inplace``, but networks written for other tools carry it; it has no
# effect (torch=False keeps it away from nn.GELU's constructor).
_fn("gelu", _X, Arg("approximate", "choice:none|tanh", "none"),
    Arg("inplace", "bool", False, torch=False, ignored=True), functional=True, torch_ns=False)
_fn("logsigmoid", _X, functional=True, torch_ns=False, aliases=["log_sigmoid"])
_fn("tanhshrink", _X, functional=True, torch_ns=False)
_fn("softsign", _X, functional=True, torch_ns=False)
_fn("softplus", _X, Arg("beta", "float", 1.0), Arg("threshold", "float", 20.0),
    functional=True, torch_ns=False)
_fn("tanh", _X, functional=True, methods=["tanh"])
_fn("sigmoid", _X, functional=True, methods=["sigmoid"])
_fn("hardsigmoid", _X, _INPLACE, functional=True, torch_ns=False)
_fn("mish", _X, _INPLACE, functional=True, torch_ns=False)
_fn("elu", _X, Arg("alpha", "float", 1.0), _INPLACE, functional=True, torch_ns=False)
_fn("celu", _X, Arg("alpha", "float", 1.0), _INPLACE, functional=True)
_SOFTMAX = (_X, Arg("dim", "int?", None), Arg("_stacklevel", "int", 3, ignored=True),
            Arg("dtype", "none", None, ignored=True))
_fn("softmax", *_SOFTMAX, functional=True, methods=["softmax"])
_fn("log_softmax", *_SOFTMAX, functional=True, methods=["log_softmax"])

# Arithmetic.
_A = Arg("input", "tensor|number")
_B = Arg("other", "tensor|number")
_fn("add", _A, _B, Arg("alpha", "float", 1), methods=["add"], operator=["add", "iadd"])
_fn("sub", _A, _B, Arg("alpha", "float", 1), methods=["sub"], operator=["sub", "isub"],
    aliases=["subtract", "torch.subtract"])
_fn("mul", _A, _B, methods=["mul"], operator=["mul", "imul"],
    aliases=["multiply", "torch.multiply"])
_fn("div", _A, _B, Arg("rounding_mode", "choice?:trunc|floor", None), methods=["div"],
    operator=["truediv", "itruediv"], aliases=["divide", "torch.divide", "true_divide",
                                               "torch.true_divide"])
_fn("floor_divide", _A, _B, methods=["floor_divide"], operator=["floordiv", "ifloordiv"])
_fn("remainder", _A, _B, methods=["remainder"], operator=["mod", "imod"])
_fn("neg", _X, methods=["neg"], operator=["neg"], aliases=["negative", "torch.negative"])
_fn("pow", _A, Arg("exponent", "tensor|number"), methods=["pow"], operator=["pow", "ipow"])
_fn("matmul", _X, Arg("other", "tensor"), methods=["matmul"], operator=["matmul"])
_fn("exp", _X, methods=["exp"])
_fn("log", _X, methods=["log"])
_fn("sqrt", _X, methods=["sqrt"])
_fn("abs", _X, methods=["abs"], operator=["abs"])
_fn("clamp", _X, Arg("min", "float?", None), Arg("max", "float?", None),
    methods=["clamp", "clip"],
    aliases=["clip", "torch.clip"])
_fn("maximum", _X, Arg("other", "tensor"), methods=["maximum"])
_fn("minimum", _X, Arg("other", "tensor"), methods=["minimum"])
_fn("erf", _X, methods=["erf"], aliases=["torch.special.erf"])
_fn("sign", _X, methods=["sign"])
_fn("floor", _X, methods=["floor"])
_fn("ceil", _X, methods=["ceil"])
_fn("round", _X, Arg("decimals", "int", 0), methods=["round"])
_fn("trunc", _X, methods=["trunc"], aliases=["fix", "torch.fix"])
_fn("sin", _X, methods=["sin"])
_fn("cos", _X, methods=["cos"])
TRIGONOMETRIC = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
"""Elementwise functions named as in PyTorch (``torch.asin``, ``Tensor.asin``; NumPy's
``arcsin``), each of one tensor, with no arguments."""
for _name in TRIGONOMETRIC:
    _fn(_name, _X, methods=[_name])

# Comparisons (bool tensors, as in PyTorch) and selection.
_fn("gt", _A, _B, methods=["gt", "greater"], operator=["gt"],
    aliases=["greater", "torch.greater"])
_fn("lt", _A, _B, methods=["lt", "less"], operator=["lt"], aliases=["less", "torch.less"])
_fn("ge", _A, _B, methods=["ge", "greater_equal"], operator=["ge"],
    aliases=["greater_equal", "torch.greater_equal"])
_fn("le", _A, _B, methods=["le", "less_equal"], operator=["le"],
    aliases=["less_equal", "torch.less_equal"])
_fn("eq", _A, _B, methods=["eq"], operator=["eq"])
_fn("where", Arg("condition", "tensor"), _A, _B, methods=["where"],
    method_order=["input", "condition", "other"])

# Shape and indexing.
_fn("cat", Arg("tensors", "tensors"), Arg("dim", "int", 0), aliases=["concat", "torch.concat",
                                                                     "concatenate"])
_fn("stack", Arg("tensors", "tensors"), Arg("dim", "int", 0))
_fn("flatten", _X, Arg("start_dim", "int", 0), Arg("end_dim", "int", -1), methods=["flatten"])
_fn("reshape", _X, Arg("shape", "dims"), methods=["reshape", "view"], variadic="shape")
# torch.chunk: `chunks` pieces of ceil(size / chunks) along dim (torchvision's ShuffleNet
# splits channels so); the network must divide the size into exactly `chunks` pieces.
_fn("chunk", _X, Arg("chunks", "int"), Arg("dim", "int", 0), methods=["chunk"],
    tuple_of="chunks")
_fn("unflatten", _X, Arg("dim", "int"), Arg("sizes", "dims"), methods=["unflatten"])
_fn("reshape_as", _X, Arg("other", "tensor"), methods=["reshape_as", "view_as"],
    torch_ns=False)
_fn("permute", _X, Arg("dims", "dims"), methods=["permute"], variadic="dims")
_fn("transpose", _X, Arg("dim0", "int"), Arg("dim1", "int"),
    methods=["transpose", "swapaxes"],
    aliases=["swapaxes", "torch.swapaxes"])
_fn("squeeze", _X, Arg("dim", "dims?", None), methods=["squeeze"])
_fn("contiguous", _X, Arg("memory_format", "any", None, ignored=True), methods=["contiguous"],
    torch_ns=False)
_fn("unsqueeze", _X, Arg("dim", "int"), methods=["unsqueeze"])
_fn("getitem", _X, Arg("index", "index"), torch_ns=False, operator=["getitem"])
_REDUCE = (_X, Arg("dim", "dims?", None), Arg("keepdim", "bool", False),
           Arg("dtype", "none", None, ignored=True))
_fn("sum", *_REDUCE, methods=["sum"])
_fn("mean", *_REDUCE, methods=["mean"])
_fn("amax", _X, Arg("dim", "dims", []), Arg("keepdim", "bool", False), methods=["amax"])
_fn("amin", _X, Arg("dim", "dims", []), Arg("keepdim", "bool", False), methods=["amin"])
# torch.prod reduces one dimension (or, without dim, all: keepdim then keeps them as 1s).
_fn("prod", _X, Arg("dim", "int?", None), Arg("keepdim", "bool", False),
    Arg("dtype", "none", None, ignored=True), methods=["prod"])
_fn("flip", _X, Arg("dims", "dims"), methods=["flip"], variadic="dims")
_fn("cumsum", _X, Arg("dim", "int"), Arg("dtype", "none", None, ignored=True),
    methods=["cumsum"])
_fn("pad", _X, Arg("pad", "pads"),
    Arg("mode", "choice:constant|reflect|replicate|circular", "constant"),
    Arg("value", "float?", None), functional=True, torch_ns=False)


# Functional pools and normalisation (torch.nn.functional signatures; the layers' maths).
for _n in (1, 2, 3):
    # F.max_pool2d and F.adaptive_max_pool2d dispatch on return_indices to private
    # functions, whose names scripted modules call.
    _fn(f"max_pool{_n}d", _X, Arg("kernel_size", f"ints:{_n}"),
        Arg("stride", f"ints?:{_n}", None), Arg("padding", f"ints:{_n}", 0),
        Arg("dilation", f"ints:{_n}", 1), Arg("ceil_mode", "bool", False),
        Arg("return_indices", "false", False), functional=True,
        aliases=[f"torch.nn.functional._max_pool{_n}d"])
    _fn(f"avg_pool{_n}d", _X, Arg("kernel_size", f"ints:{_n}"),
        Arg("stride", f"ints?:{_n}", None), Arg("padding", f"ints:{_n}", 0),
        Arg("ceil_mode", "bool", False), Arg("count_include_pad", "bool", True),
        *((Arg("divisor_override", "int?", None),) if _n > 1 else ()), functional=True)
    _fn(f"lp_pool{_n}d", _X, Arg("norm_type", "float"), Arg("kernel_size", f"ints:{_n}"),
        Arg("stride", f"ints?:{_n}", None), Arg("ceil_mode", "bool", False),
        functional=True, torch_ns=False)
    _fn(f"adaptive_avg_pool{_n}d", _X, Arg("output_size", f"sizes?:{_n}"), functional=True)
    _fn(f"adaptive_max_pool{_n}d", _X, Arg("output_size", f"sizes?:{_n}"),
        Arg("return_indices", "false", False), functional=True,
        aliases=[f"torch.nn.functional._adaptive_max_pool{_n}d"])
_fn("local_response_norm", _X, Arg("size", "int"), Arg("alpha", "float", 1e-4),
    Arg("beta", "float", 0.75), Arg("k", "float", 1.0), functional=True, torch_ns=False)

POOL_FUNCTIONS = {
    **{f"max_pool{n}d": f"MaxPool{n}d" for n in (1, 2, 3)},
    **{f"avg_pool{n}d": f"AvgPool{n}d" for n in (1, 2, 3)},
    **{f"lp_pool{n}d": f"LPPool{n}d" for n in (1, 2, 3)},
    **{f"adaptive_avg_pool{n}d": f"AdaptiveAvgPool{n}d" for n in (1, 2, 3)},
    **{f"adaptive_max_pool{n}d": f"AdaptiveMaxPool{n}d" for n in (1, 2, 3)},
    "local_response_norm": "LocalResponseNorm",
}
"""Functions that apply a parameter-free layer's maths, with the layer's arguments: the
backends run them through the layer's implementation."""

_register_activation_layers()


def canonical_function(op: str, target: str) -> str | None:
    """Canonical function name for a ``call_function``/``call_method`` target, or None."""
    return _SPELLINGS.get((op, target))


def function_spec(op: str, target: str, *, file: object = None, entry: str = "") -> FunctionSpec:
    """The catalogue entry for a call target, or a :class:`NetworkError` with suggestions."""
    name = canonical_function(op, target) if isinstance(target, str) else None
    if name is None:
        known = sorted({s for (o, s) in _SPELLINGS if o == op})
        close = difflib.get_close_matches(str(target), known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        what = "method" if op == "call_method" else "function"
        raise NetworkError(
            f"unknown {what} {target!r}{hint} (supported: {', '.join(sorted(FUNCTIONS))})",
            file=file, entry=entry,
        )
    return FUNCTIONS[name]


def implicit_softmax_dim(ndim: int) -> int:
    """The dimension PyTorch's legacy ``softmax(dim=None)`` picks for an ``ndim`` input."""
    return 0 if ndim in (0, 1, 3) else 1


def parameter_count(shapes: Mapping[str, tuple[int, ...]]) -> int:
    """Number of scalars in a mapping of array shapes."""
    return sum(math.prod(s) for s in shapes.values())


# ------------------------------------------------------------------ smoothness
SMOOTH_LAYERS = frozenset({
    "Linear", "Bilinear", "Flatten", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
    "ConvTranspose2d", "ConvTranspose3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "BatchNorm1d",
    "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "LayerNorm", "LocalResponseNorm", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
    "AlphaDropout", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "LogSigmoid", "Softplus",
    "Tanhshrink", "Softmax", "LogSoftmax", "RNN", "GRU", "LSTM",
})
"""Layer types whose output is a smooth (at least twice continuously differentiable)
function of their inputs and arrays: no kinks for an ODE solver's step control to trip
on.  ``RNN`` only with ``nonlinearity="tanh"`` (:func:`layer_is_smooth`); dropout is
the identity when evaluated; ``Softplus`` switches to ``x`` above its threshold, a jump
below 1e-8 that PyTorch itself takes.  Everything else (ReLU and its relatives, ELU,
SELU and CELU (no continuous second derivative for every ``alpha``), hard activations,
max and Lp pooling, Softsign) counts as kinked, and so does any type added to the
catalogue until it is listed here."""

SMOOTH_FUNCTIONS = frozenset({
    "add", "sub", "mul", "div", "neg", "pow", "exp", "log", "sqrt", "sin", "cos", "erf",
    *TRIGONOMETRIC,
    "tanh", "sigmoid", "silu", "gelu", "mish", "logsigmoid", "softplus", "tanhshrink",
    "softmax", "log_softmax", "sum", "mean", "prod", "cumsum", "matmul", "cat", "stack",
    "chunk", "getitem", "reshape", "reshape_as", "flatten", "unflatten", "squeeze",
    "unsqueeze", "permute", "transpose", "contiguous", "flip", "pad", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "local_response_norm",
})
"""Forward-graph functions that are smooth where they are defined (``log``, ``sqrt`` and
``div`` away from their singularities), as :data:`SMOOTH_LAYERS`.  Not listed:
``abs``, ``clamp``, ``maximum``, ``minimum``, ``amax``, ``amin``, rounding,
``remainder``, ``sign``, comparisons, ``where``, the ReLU family, hard activations,
max and Lp pooling."""


def layer_is_smooth(layer_type: str, config: Mapping[str, Any]) -> bool:
    """Whether a layer of this type with these resolved arguments is smooth
    (:data:`SMOOTH_LAYERS`)."""
    if layer_type not in SMOOTH_LAYERS:
        return False
    return not (layer_type == "RNN" and config.get("nonlinearity", "tanh") != "tanh")


__all__ = [
    "Arg", "ArraySpec", "LayerSpec", "FunctionSpec", "LAYERS", "FUNCTIONS", "REQUIRED",
    "layer_spec", "function_spec", "canonical_function", "check_value", "as_tuple",
    "implicit_softmax_dim", "parameter_count", "kind_description", "SMOOTH_LAYERS",
    "SMOOTH_FUNCTIONS", "layer_is_smooth",
]

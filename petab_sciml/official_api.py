"""The names of the official ``petab_sciml`` package that libpetab-python imports.

The official PyPI distribution ``petab-sciml`` and this package share the import name
``petab_sciml``, so only one can be installed in an environment.  libpetab-python (>= 0.10)
imports a few names from ``petab_sciml`` for its SciML support; without them, in an
environment with this package, ``import petab.v2`` fails.  This module provides those
names, implemented on our readers, and ``petab_sciml.<name>`` finds them lazily:

* constants and the NN-model vocabulary of the specification (``ARRAY``,
  ``ALL_CONDITION_IDS``, ``NN_ENTITY_PATTERN``, ``NN_PARAMETER_PATTERN``, ``Layers``,
  ``ActivationFunctions``, ``TensorOps``, ``Op``): the layer and function lists of the
  specification's "Supported layers and activation functions" page;
* ``NNModel`` / ``NNModelStandard``: a network in the NN model YAML vocabulary
  (``nn_model_id``, ``inputs``, ``layers``, ``forward``), read with our YAML reader;
* ``ArrayData`` / ``ArrayDataStandard``: an array file's ``metadata``, ``inputs`` and
  ``parameters`` as nested dicts of numpy arrays, read with our array-file reader.

Only what libpetab uses is provided; it is not a copy of the official package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = [
    "ALL_CONDITION_IDS", "ARRAY", "NN_ENTITY_PATTERN", "NN_PARAMETER_PATTERN",
    "ActivationFunctions", "ArrayData", "ArrayDataStandard", "Input", "Layer", "Layers",
    "NNModel", "NNModelStandard", "Node", "Op", "TensorOps",
]

ARRAY = "array"
"""The reserved value that takes values from array files."""
ALL_CONDITION_IDS = "0"
"""The array-file input key that applies to every condition."""

NN_ENTITY_PATTERN = re.compile(
    r"^(?P<nn_id>[^.\[\]\s]+)\.(?P<entity_type>inputs|outputs|parameters)\b")
"""A mapping-table ``modelEntityId`` that refers to a network's inputs, outputs or
parameters (groups ``nn_id``, ``entity_type``)."""
NN_PARAMETER_PATTERN = re.compile(r"^(?P<nn_id>[^.\[\]\s]+)\.parameters(?:\[(?P<layer>[^\]]+)\])?")
"""A ``modelEntityId`` for network parameters, optionally of one layer (``nn_id``,
``layer``)."""

Layers = StrEnum("Layers", {name: name for name in (
    "Linear", "Bilinear", "Flatten", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
    "AlphaDropout", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d",
    "AvgPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d")})
"""Layer types of the specification's layer list (``torch.nn`` names)."""

ActivationFunctions = StrEnum("ActivationFunctions", {name: name for name in (
    "relu", "relu6", "hardtanh", "hardswish", "selu", "leaky_relu", "gelu", "tanhshrink",
    "softsign", "softplus", "tanh", "sigmoid", "hardsigmoid", "silu", "mish", "elu", "celu",
    "softmax", "log_softmax")})
"""Activation functions of the specification's list (``torch.nn.functional`` names)."""

TensorOps = StrEnum("TensorOps", {"flatten": "flatten", "cat": "cat"})
"""Tensor operations of the forward pass that live in ``torch`` itself."""


class Op(StrEnum):
    """``torch.fx`` opcodes of forward nodes."""

    PLACEHOLDER = "placeholder"
    CALL_FUNCTION = "call_function"
    CALL_METHOD = "call_method"
    CALL_MODULE = "call_module"
    OUTPUT = "output"


# ----------------------------------------------------------------------------- NN model
@dataclass
class Input:
    input_id: str


@dataclass
class Layer:
    layer_id: str
    layer_type: str
    args: dict[str, Any] | None = None


@dataclass
class Node:
    name: str
    op: str
    target: str
    args: list | None = None
    kwargs: dict | None = None


@dataclass
class NNModel:
    """A network in the NN model YAML vocabulary."""

    nn_model_id: str
    inputs: list[Input]
    layers: list[Layer]
    forward: list[Node]
    network: Any = field(default=None, repr=False, compare=False)
    """Our validated IR of the same network."""

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> NNModel:
        from petab_sciml.formats.yaml import network_from_dict

        return cls.from_network(network_from_dict(data))

    @classmethod
    def from_network(cls, network: Any, nn_model_id: str | None = None) -> NNModel:
        from petab_sciml.formats.yaml import network_to_dict

        data = network_to_dict(network)
        return cls(nn_model_id or network.id, [Input(**i) for i in data["inputs"]],
                   [Layer(**layer) for layer in data["layers"]],
                   [Node(**n) for n in data["forward"]], network)

    def model_dump(self) -> dict[str, Any]:
        from petab_sciml.formats.yaml import network_to_dict

        data = network_to_dict(self.network)
        data["nn_model_id"] = self.nn_model_id
        return data

    def to_pytorch_module(self) -> Any:
        """The network as a ``torch.fx.GraphModule`` (our torch backend; needs torch)."""
        from petab_sciml.backends.torch import build_module

        module = build_module(self.network)
        module._petab_sciml_nn_model = self
        return module

    @staticmethod
    def from_pytorch_module(module: Any, nn_model_id: str,
                            inputs: list[Input] | None = None) -> NNModel:
        """The network of a torch module (traced with ``torch.fx``)."""
        own = getattr(module, "_petab_sciml_nn_model", None)
        if own is not None and inputs is None:
            return NNModel(nn_model_id, list(own.inputs), list(own.layers),
                           list(own.forward), own.network)
        from petab_sciml.formats.torch_fx import network_from_module

        ids = [i.input_id for i in inputs] if inputs else None
        return NNModel.from_network(network_from_module(module, nn_model_id, input_ids=ids))


class _NNModelStandard:
    """``load_data(path)`` / ``save_data(model, path)`` of NN model YAML files."""

    model = NNModel

    @staticmethod
    def load_data(filename: str | Path, **overrides: Any) -> NNModel:
        from petab_sciml.formats.yaml import read

        return NNModel.from_network(read(filename), overrides.get("nn_model_id"))

    @staticmethod
    def save_data(data: NNModel, filename: str | Path) -> None:
        from petab_sciml.formats.yaml import network_from_dict, write

        write(network_from_dict(data.model_dump()), filename)


NNModelStandard = _NNModelStandard()


# ----------------------------------------------------------------------------- arrays
@dataclass
class Metadata:
    pytorch_format: bool


@dataclass
class ArrayData:
    """An array file's content as nested dicts of numpy arrays."""

    metadata: Metadata
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    parameters: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> ArrayData:
        meta = data.get("metadata", {})
        meta = meta if isinstance(meta, Metadata) else Metadata(bool(meta["pytorch_format"]))
        return cls(meta, dict(data.get("inputs", {})), dict(data.get("parameters", {})))


class _ArrayDataStandard:
    """``load_data(path)`` / ``save_data(data, path)`` of PEtab SciML array files."""

    model = ArrayData

    @staticmethod
    def load_data(filename: str | Path, **_: Any) -> ArrayData:
        from petab_sciml.arrays import read_array_file

        content = read_array_file(filename)
        return ArrayData(
            Metadata(content.pytorch_format),
            {i: {k: a.read() for k, a in keyed.items()} for i, keyed in content.inputs.items()},
            {n: {layer: {a: v.read() for a, v in arrays.items()}
                 for layer, arrays in layers.items()}
             for n, layers in content.parameters.items()},
        )

    @staticmethod
    def save_data(data: ArrayData, filename: str | Path) -> None:
        from petab_sciml.arrays import write_array_file

        write_array_file(filename, parameters=data.parameters, inputs=data.inputs)


ArrayDataStandard = _ArrayDataStandard()

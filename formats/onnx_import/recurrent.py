"""LSTM, GRU and RNN -> torch.nn.LSTM / GRU / RNN layers (one layer per ONNX node)."""

from __future__ import annotations

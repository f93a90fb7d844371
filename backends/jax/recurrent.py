"""Recurrent layers: ``torch.nn.RNN``, ``LSTM`` and ``GRU`` as a layer module."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from petab_sciml.catalogue import LAYERS

from . import ops
from .layer_base import Array, LayerModule, static_field


class Recurrent(LayerModule):
    """``torch.nn.RNN``, ``LSTM`` and ``GRU``: PyTorch's gate order and equations, arrays
    by PyTorch name (``weight_ih_l0``, ``bias_hh_l1_reverse``...), inputs ``(L, N, H_in)``
    (``(N, L, H_in)`` with ``batch_first``, ``(L, H_in)`` unbatched), optional initial
    state; returns ``(output, h_n)`` (LSTM: ``(output, (h_n, c_n))``).  Dropout between
    layers in training mode (fresh masks, as PyTorch draws them)."""

    params: dict[str, Array | None]
    mode: str = static_field()  # "RNN", "LSTM", "GRU"
    nonlinearity: str = static_field()
    hidden_size: int = static_field()
    proj_size: int = static_field()
    num_layers: int = static_field()
    bidirectional: bool = static_field()
    batch_first: bool = static_field()
    dropout: float = static_field()

    @property
    def stochastic(self) -> bool:  # type: ignore[override]
        return self.dropout > 0 and self.num_layers > 1

    def arrays(self) -> dict[str, Array]:
        return {n: a for n, a in self.params.items() if a is not None}

    def array(self, name: str) -> Array:
        return self.params[name]

    def with_arrays(self, arrays: Mapping[str, Array]) -> LayerModule:
        if not arrays:
            return self
        return dataclasses.replace(self, params={**self.params, **arrays})

    def _cell(self, k: int, sfx: str):
        p = self.params
        w_hh = p[f"weight_hh_l{k}{sfx}"]
        b_hh = p.get(f"bias_hh_l{k}{sfx}")
        w_hr = p.get(f"weight_hr_l{k}{sfx}")

        def hidden_part(h):
            g = h @ w_hh.T
            return g if b_hh is None else g + b_hh

        if self.mode == "LSTM":
            def step(carry, xw):
                h, c = carry
                i, f, g, o = jnp.split(xw + hidden_part(h), 4, axis=-1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                if w_hr is not None:
                    h = h @ w_hr.T
                return (h, c), h
        elif self.mode == "GRU":
            def step(h, xw):
                xr, xz, xn = jnp.split(xw, 3, axis=-1)
                hr, hz, hn = jnp.split(hidden_part(h), 3, axis=-1)
                r = jax.nn.sigmoid(xr + hr)
                z = jax.nn.sigmoid(xz + hz)
                n = jnp.tanh(xn + r * hn)
                h = (1 - z) * n + z * h
                return h, h
        else:
            act = jnp.tanh if self.nonlinearity == "tanh" else jax.nn.relu

            def step(h, xw):
                h = act(xw + hidden_part(h))
                return h, h
        return step

    def forward(self, x: Array, hx: Any = None, train: bool = False,
                key: Array | None = None):
        what = self.mode
        ops.check_rank(x, (2, 3), what)
        unbatched = x.ndim == 2
        if unbatched:
            x = x[:, None]
            if hx is not None:
                hx = tuple(h[:, None] for h in hx) if self.mode == "LSTM" else hx[:, None]
        elif self.batch_first:
            x = jnp.swapaxes(x, 0, 1)
        n_dir = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        batch = x.shape[1]
        if hx is None:
            h0 = jnp.zeros((self.num_layers * n_dir, batch, out_size), x.dtype)
            c0 = jnp.zeros((self.num_layers * n_dir, batch, self.hidden_size), x.dtype)
        elif self.mode == "LSTM":
            h0, c0 = hx
        else:
            h0, c0 = hx, None
        expected = (self.num_layers * n_dir, batch, out_size)
        if tuple(h0.shape) != expected:
            raise ValueError(f"{what}: expected hidden size {expected}, got {tuple(h0.shape)}")
        layer_input = x
        h_n, c_n = [], []
        for k in range(self.num_layers):
            outs = []
            for d in range(n_dir):
                sfx = "_reverse" if d else ""
                w_ih = self.params[f"weight_ih_l{k}{sfx}"]
                b_ih = self.params.get(f"bias_ih_l{k}{sfx}")
                seq = layer_input if d == 0 else jnp.flip(layer_input, 0)
                xw = seq @ w_ih.T
                if b_ih is not None:
                    xw = xw + b_ih
                index = k * n_dir + d
                init = (h0[index], c0[index]) if self.mode == "LSTM" else h0[index]
                carry, ys = jax.lax.scan(self._cell(k, sfx), init, xw)
                outs.append(ys if d == 0 else jnp.flip(ys, 0))
                if self.mode == "LSTM":
                    h_n.append(carry[0])
                    c_n.append(carry[1])
                else:
                    h_n.append(carry)
            layer_input = outs[0] if n_dir == 1 else jnp.concatenate(outs, axis=-1)
            if train and self.dropout > 0 and k < self.num_layers - 1:
                if key is None:
                    raise ValueError("dropout in training mode needs a PRNG key")
                keep = 1.0 - self.dropout
                mask = jax.random.bernoulli(jax.random.fold_in(key, k), keep,
                                            layer_input.shape).astype(x.dtype)
                layer_input = layer_input * mask / keep if keep > 0 else layer_input * 0
        output = layer_input
        hn = jnp.stack(h_n)
        cn = jnp.stack(c_n) if self.mode == "LSTM" else None
        if unbatched:
            output, hn = output[:, 0], hn[:, 0]
            cn = None if cn is None else cn[:, 0]
        elif self.batch_first:
            output = jnp.swapaxes(output, 0, 1)
        result = (output, (hn, cn)) if self.mode == "LSTM" else (output, hn)
        return result, {}


def make_recurrent(layer_type: str, family: str, cfg: Mapping[str, Any],
                   arrays: Mapping[str, Array]) -> LayerModule:
    """The recurrent module of catalogue type ``layer_type`` (``family``: ``RNN``,
    ``LSTM`` or ``GRU``) with resolved arguments ``cfg`` and ``arrays``."""
    names = [a.name for a in LAYERS[layer_type].array_specs(cfg) if a.present(cfg)]
    return Recurrent(params={n: arrays.get(n) for n in names}, mode=family,
                     nonlinearity=cfg.get("nonlinearity", "tanh"),
                     hidden_size=cfg["hidden_size"], proj_size=cfg.get("proj_size", 0),
                     num_layers=cfg["num_layers"], bidirectional=cfg["bidirectional"],
                     batch_first=cfg["batch_first"], dropout=float(cfg["dropout"]))

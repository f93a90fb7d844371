"""LinearAttention (opset 27): the recurrence unrolled over the static sequence length.

Per step ``t`` and KV head, with the state ``S`` of shape ``(d_k, d_v)``:

* ``gated``/``gated_delta``: ``S = exp(g_t) * S`` (``g_t`` per head or per key row);
* ``delta``/``gated_delta``: ``v_t = beta_t * (v_t - S^T k_t)``;
* ``S = S + k_t v_t^T``, and ``o_t = scale * q_t^T S`` for every query head sharing
  the KV head (``q_num_heads / kv_num_heads`` of them).

Query, key, value, decay and beta are ``(B, T, heads * D)``; the optional past state
and the present state ``(B, H_kv, d_k, d_v)``.  ``scale`` 0 (the default) means
``1 / sqrt(d_k)``; ``chunk_size`` is a tuning hint without effect on the result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C

_ALL = {"slice": [None, None, None]}


def _heads(im: _Importer, ref: str, shape: tuple[int, ...], heads: int) -> str:
    """``(B, T, H * D)`` -> ``(B, H, T, D)``."""
    b, t, hd = shape
    x = im.emit("reshape", [ref], {"shape": [b, t, heads, hd // heads]})
    return im.emit("permute", [x], {"dims": [0, 2, 1, 3]})


def _step(im: _Importer, x: str, t: int) -> str:
    return im.emit("getitem", [x], {"index": [_ALL, _ALL, t, _ALL]})


@handles("LinearAttention")
def _linear_attention(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    rule = at.get("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise im.error(node, f"update_rule={rule!r} is not one of linear, gated, delta, "
                       "gated_delta")
    q_heads, kv_heads = int(at.get("q_num_heads", 0)), int(at.get("kv_num_heads", 0))
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise im.error(node, f"q_num_heads ({q_heads}) must be a positive multiple of "
                       f"kv_num_heads ({kv_heads})")
    inputs = list(ins) + [None] * (6 - len(ins))
    query, key, value, past, decay, beta = inputs[:6]
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise im.error(node, f"update_rule={rule!r} needs "
                       f"{'a' if gating else 'no'} decay and {'a' if delta else 'no'} beta")
    shapes = {}
    for what, v in (("query", query), ("key", key), ("value", value), ("decay", decay),
                    ("beta", beta), ("past_state", past)):
        if v is None:
            continue
        s = im.static_shape(v)
        if s is None:
            raise im.error(node, f"LinearAttention needs the static shape of {what}")
        shapes[what] = s
    b, t, _ = shapes["query"]
    d_k, d_v = shapes["query"][2] // q_heads, shapes["value"][2] // kv_heads
    group = q_heads // kv_heads
    scale = float(at.get("scale", 0.0)) or 1.0 / math.sqrt(d_k)
    q = _heads(im, im.tensor(query, node), shapes["query"], q_heads)
    k = _heads(im, im.tensor(key, node), shapes["key"], kv_heads)
    v = _heads(im, im.tensor(value, node), shapes["value"], kv_heads)
    if gating:
        last = shapes["decay"][2]
        if last not in (kv_heads, kv_heads * d_k):
            raise im.error(node, f"decay's last size {last} must be kv_num_heads or "
                           "kv_num_heads * d_k")
        g = _heads(im, im.tensor(decay, node), shapes["decay"], kv_heads)
    if delta:
        last = shapes["beta"][2]
        if last not in (kv_heads, 1):
            raise im.error(node, f"beta's last size {last} must be kv_num_heads or 1")
        rate = _heads(im, im.tensor(beta, node), shapes["beta"], last)
    state = (im.tensor(past, node) if past is not None else
             im.tensor(_C(np.zeros((b, kv_heads, d_k, d_v)), "linear_attention_state"), node))
    outputs = []
    for i in range(t):
        k_t, v_t = _step(im, k, i), _step(im, v, i)
        if gating:
            factor = im.emit("exp", [_step(im, g, i)])          # (B, H_kv, 1 or d_k)
            state = im.emit("mul", [state, im.emit("unsqueeze", [factor], {"dim": -1})])
        if delta:
            retrieved = im.emit("sum", [im.emit("mul", [state, im.emit(
                "unsqueeze", [k_t], {"dim": -1})])], {"dim": [2]})
            v_t = im.emit("mul", [_step(im, rate, i), im.emit("sub", [v_t, retrieved])])
        outer = im.emit("mul", [im.emit("unsqueeze", [k_t], {"dim": -1}),
                                im.emit("unsqueeze", [v_t], {"dim": -2})])
        state = im.emit("add", [state, outer])
        read = state
        if group > 1:
            copies = im.emit("stack", [[state] * group], {"dim": 2})
            read = im.emit("reshape", [copies], {"shape": [b, q_heads, d_k, d_v]})
        o_t = im.emit("sum", [im.emit("mul", [im.emit("unsqueeze", [_step(im, q, i)],
                                                      {"dim": -1}), read])], {"dim": [2]})
        outputs.append(im.emit("mul", [o_t, scale]))
    stacked = im.emit("stack", [outputs], {"dim": 2})          # (B, Hq, T, Dv)
    out = im.emit("permute", [stacked], {"dims": [0, 2, 1, 3]})
    im.bind(node, 0, im.emit("reshape", [out], {"shape": [b, t, q_heads * d_v]},
                             name=im.out_name(node)), (b, t, q_heads * d_v))
    if im.used(node, 1):
        im.bind(node, 1, state, (b, kv_heads, d_k, d_v))

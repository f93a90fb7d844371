"""Gemm, MatMul (+ Add), Transpose and Einsum: Linear layers where the weight is a
parameter, matmul elsewhere.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .einsum import einsum as general_einsum
from .importer import _Importer
from .registry import handles
from .values import _C, _P, _T, _f32, _Lazy


# ---------------------------------------------------------------- linear algebra
def _as_weight(im: _Importer, v: Any) -> tuple[np.ndarray, _P, bool] | None:
    """(value as stored, parameter, transposed-already) if ``v`` is a 2-D parameter."""
    if isinstance(v, _P) and im.inits[v.init].ndim == 2:
        return im.inits[v.init], v, False
    if isinstance(v, _Lazy) and v.kind == "transpose" and tuple(v.args[1]) == (1, 0) \
            and im.inits[v.args[0].init].ndim == 2:
        return im.inits[v.args[0].init], v.args[0], True
    return None


def _weight_named(im: _Importer, p: _P) -> bool:
    """Whether an initializer is named like a module's weight (``fc.weight``)."""
    return any(n.endswith(".weight") for n in (p.alias, p.init, *im._folded_from(p.init)))


def _named_otherwise(im: _Importer, p: _P | None, array: str) -> bool:
    """Whether a parameter carries another module's array name (``rnn.weight_ih_l0`` in
    PyTorch's unrolled RNN): lifting it as a Linear's ``weight``/``bias`` would lose the
    name, so it stays a free parameter."""
    if p is None:
        return False
    names = [n for n in (p.alias, p.init, *im._folded_from(p.init)) if "." in n]
    return bool(names) and all(n.rsplit(".", 1)[1] != array for n in names)


def _bias_of(im: _Importer, node: Any, out_name: str, n_out: int, in_rank: int | None
             ) -> tuple[np.ndarray, _P, int, str] | None:
    """A following ``Add(out, b)`` whose b is a parameter of n_out values."""
    nxt = im.sole_consumer(out_name)
    if not nxt or nxt[1].op_type != "Add":
        return None
    i, add = nxt
    other = [n for n in add.input if n != out_name]
    if len(other) != 1 or len(add.input) != 2:
        return None
    b = im.env.get(other[0])
    if not isinstance(b, _P):
        return None
    value = im.inits[b.init]
    if value.shape == (n_out,) or (value.shape == (1, n_out) and (in_rank or 0) >= 2):
        return value.reshape(n_out), b, i, "" if value.ndim == 1 else "reshaped"
    return None


@handles("Transpose")
def _transpose(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    perm = im.attrs(node).get("perm")
    if perm is None:
        if rank is None:
            raise im.error(node, "Transpose without perm needs the input rank")
        perm = list(range(rank))[::-1]
    perm = [int(p) for p in perm]
    if isinstance(x, _P):
        im.env[node.output[0]] = _Lazy("transpose", (x, tuple(perm)), node)
        return
    im.bind(node, 0, im.emit("permute", [im.tensor(x, node)], {"dims": perm},
                             name=im.out_name(node)))


@handles("MatMul")
def _matmul(im: _Importer, node: Any, ins: list) -> None:
    a, b = ins
    w = _as_weight(im, b)
    if w is not None and isinstance(a, _T):
        stored, src, pre_t = w
        weight = stored if pre_t else stored.T
        n_out, n_in = weight.shape
        bias = _bias_of(im, node, node.output[0], n_out, im.rank(a))
        # x @ W.T, x @ W + b and x @ <module>.weight are linear layers; a bare x @ W with a
        # root-level parameter W stays a matmul with W under its own name.
        if (pre_t or bias is not None or _weight_named(im, src)) and not (
                _named_otherwise(im, src, "weight")
                or _named_otherwise(im, bias[1] if bias else None, "bias")):
            arrays = {"weight": (weight, src, "" if pre_t else "transposed")}
            out_node = node
            if bias is not None:
                value, bsrc, i_add, how = bias
                arrays["bias"] = (value, bsrc, how)
                im.done.add(i_add)
                out_node = im.graph.node[i_add]
            ref = im.add_layer(node, "Linear", {"in_features": int(n_in),
                                                "out_features": int(n_out),
                                                "bias": bias is not None}, arrays, [a.ref])
            im.env[out_node.output[0]] = _T(ref, im.shapes.get(out_node.output[0]))
            return
    im.bind(node, 0, im.emit("matmul", [im.tensor(a, node), im.tensor(b, node)],
                             name=im.out_name(node)))


@handles("Gemm")
def _gemm(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    trans_a, trans_b = int(at.get("transA", 0)), int(at.get("transB", 0))
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if c is not None and beta == 0.0:
        c = None
    if isinstance(c, _C) and not np.any(c.value):
        c = None
    x = im.tensor(a, node)
    if trans_a:
        x = im.emit("transpose", [x], {"dim0": 0, "dim1": 1})
    if isinstance(b, _P) and im.inits[b.init].ndim == 2 and not (
            _named_otherwise(im, b, "weight")
            or _named_otherwise(im, c if isinstance(c, _P) else None, "bias")):
        stored = im.inits[b.init]
        weight = stored if trans_b else stored.T
        notes = [] if trans_b else ["transposed"]
        if alpha != 1.0:
            weight = weight * np.asarray(alpha, dtype=weight.dtype)
            notes.append(f"scaled by alpha={_f32(alpha)}")
        n_out, n_in = weight.shape
        arrays = {"weight": (weight, b, ", ".join(notes))}
        extra = None
        if isinstance(c, _P) and im.inits[c.init].size == n_out \
                and im.inits[c.init].ndim <= 2 and im.inits[c.init].shape[-1:] == (n_out,):
            bias = im.inits[c.init].reshape(n_out)
            note = [] if im.inits[c.init].ndim == 1 else ["reshaped"]
            if beta != 1.0:
                bias = bias * np.asarray(beta, dtype=bias.dtype)
                note.append(f"scaled by beta={_f32(beta)}")
            arrays["bias"] = (bias, c, ", ".join(note))
        elif c is not None:
            extra = c
        ref = im.add_layer(node, "Linear", {"in_features": int(n_in), "out_features": int(n_out),
                                            "bias": "bias" in arrays}, arrays, [x])
        if extra is not None:
            cc = im.operand(extra, node, a)
            if beta != 1.0:
                cc = im.emit("mul", [cc, _f32(beta)]) if isinstance(cc, str) else cc * beta
            ref = im.emit("add", [ref, cc], name=im.out_name(node))
        im.bind(node, 0, ref)
        return
    y = im.tensor(b, node)
    if trans_b:
        y = im.emit("transpose", [y], {"dim0": 0, "dim1": 1})
    out = im.emit("matmul", [x, y])
    if alpha != 1.0:
        out = im.emit("mul", [out, _f32(alpha)])
    if c is not None:
        cc = im.operand(c, node, a)
        if beta != 1.0:
            cc = im.emit("mul", [cc, _f32(beta)]) if isinstance(cc, str) else cc * beta
        out = im.emit("add", [out, cc])
    im.bind(node, 0, out)


@handles("Einsum")
def _einsum(im: _Importer, node: Any, ins: list) -> None:
    """Bilinear as our exporter writes it, Einsum('...i,oij,...j->...o') (+ Add bias), as
    a layer; any other equation from products and sums (:mod:`.einsum`)."""
    eq = im.attrs(node).get("equation", "").replace(" ", "")
    m = re.fullmatch(r"\.\.\.(\w),(\w)(\w)(\w),\.\.\.(\w)->\.\.\.(\w)", eq)
    if m and len(ins) == 3 and isinstance(ins[1], _P):
        i1, o, i2, j2, j1, o2 = m.groups()
        if i1 == i2 and j1 == j2 and o == o2 and len({i1, j1, o}) == 3:
            weight = im.inits[ins[1].init]
            n_out, n1, n2 = weight.shape
            bias = _bias_of(im, node, node.output[0], n_out, None)
            arrays = {"weight": (weight, ins[1], "")}
            out_node = node
            if bias is not None:
                value, bsrc, i_add, how = bias
                arrays["bias"] = (value, bsrc, how)
                im.done.add(i_add)
                out_node = im.graph.node[i_add]
            ref = im.add_layer(node, "Bilinear", {
                "in1_features": int(n1), "in2_features": int(n2), "out_features": int(n_out),
                "bias": bias is not None}, arrays,
                [im.tensor(ins[0], node), im.tensor(ins[2], node)])
            im.env[out_node.output[0]] = _T(ref, im.shapes.get(out_node.output[0]))
            return
    general_einsum(im, node, eq, ins)

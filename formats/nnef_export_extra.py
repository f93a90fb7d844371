"""NNEF forms of the layers and functions NNEF has no operation for: recurrent layers
(unrolled over the static sequence length), LocalResponseNorm (shifted channel slices;
NNEF's own LRN centres even windows otherwise), cumsum (running sums of slices) and
PyTorch's rounding (trunc, floor_divide, remainder).  Used by
:mod:`petab_sciml.formats.nnef_export`; every form is made of operations its reader and
the nnef_tools interpreter know.
"""

from __future__ import annotations

from typing import Any

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def trunc(w: Any, base: str, x: Any) -> Any:
    """sign(x) * floor(|x|)."""
    floor = w.op(f"{base}_floor", "floor", w.op(f"{base}_abs", "abs", x))
    return w.op(base, "mul", w.op(f"{base}_sign", "sign", x), floor)


def lrn(w: Any, base: str, x: Any, shape: tuple[int, ...], cfg: Any) -> Any:
    """x / (k + alpha * mean of x**2 over [c - size//2, c + (size-1)//2]) ** beta."""
    size, channels = int(cfg["size"]), shape[1]
    rank = len(shape)
    padding = [(0, 0)] * rank
    padding[1] = (size // 2, (size - 1) // 2)
    sq = w.op(f"{base}_sq", "sqr", x)
    padded = w.op(f"{base}_padded", "pad", sq, padding=padding, border="constant")
    total = None
    for j in range(size):
        piece = w.op(f"{base}_w{j}", "slice", padded, axes=[1], begin=[j], end=[j + channels])
        total = piece if total is None else w.op(f"{base}_sum{j}", "add", total, piece)
    scaled = w.op(f"{base}_scaled", "add", w.op(f"{base}_avg", "mul", total,
                                                float(cfg["alpha"]) / size), float(cfg["k"]))
    return w.op(base, "div", x, w.op(f"{base}_den", "pow", scaled, float(cfg["beta"])))


def cumsum(w: Any, base: str, x: Any, shape: tuple[int, ...], dim: int) -> Any:
    """Running sums of the slices along ``dim``, concatenated."""
    axis = dim + len(shape) if dim < 0 else dim
    pieces, total = [], None
    for i in range(shape[axis]):
        piece = w.op(f"{base}_s{i}", "slice", x, axes=[axis], begin=[i], end=[i + 1])
        total = piece if total is None else w.op(f"{base}_c{i}", "add", total, piece)
        pieces.append(total)
    return pieces[0] if len(pieces) == 1 else w.op(base, "concat", pieces, axis=axis)


def recurrent(w: Any, layer: Any, base: str, x: Any, in_shape: tuple[int, ...],
              states: list[Any]) -> tuple[Any, ...]:
    """An RNN / LSTM / GRU step by step: per layer and direction, x_t @ W_ih^T + b_ih and
    h @ W_hh^T + b_hh with PyTorch's gate equations.  Returns the layer's tuple of NNEF
    tensors (``output, h_n`` or ``output, (h_n, c_n)``)."""
    op, cfg, lid = layer.type, layer.config, layer.id
    hidden = int(cfg["hidden_size"])
    proj = int(cfg.get("proj_size", 0))
    out_size = proj or hidden
    n_dir = 2 if cfg["bidirectional"] else 1
    unbatched = len(in_shape) == 2
    if unbatched:
        x = w.op(f"{base}_batched", "unsqueeze", x, axes=[1])
        states = [w.op(f"{base}_state{i}", "unsqueeze", s, axes=[1])
                  for i, s in enumerate(states)]
        steps, batch = in_shape[0], 1
    elif cfg["batch_first"]:
        x = w.op(f"{base}_time_first", "transpose", x, axes=[1, 0, 2])
        batch, steps = in_shape[0], in_shape[1]
    else:
        steps, batch = in_shape[0], in_shape[1]
    gates = _GATES[op] * hidden
    finals: list[list[Any]] = [[], []]

    def weight(name: str) -> Any:
        return w.array(lid, name)

    def bias(name: str) -> Any:
        return w.array(lid, name, (1, gates))

    def start(index: int, which: int, size: int) -> Any:
        if not states:
            return w.op(f"{base}_zero{which}", "constant<scalar>", shape=[batch, size],
                        value=[0.0])
        part = w.op(f"{base}_init{which}_{index}", "slice", states[which], axes=[0],
                    begin=[index], end=[index + 1])
        return w.op(f"{base}_h{which}_{index}", "squeeze", part, axes=[0])

    def matmul(tag: str, a: Any, b: Any) -> Any:
        return w.op(tag, "matmul", a, b, transposeA=False, transposeB=True)

    def gate(tag: str, value: Any, k: int) -> Any:
        return w.op(tag, "slice", value, axes=[1], begin=[k * hidden], end=[(k + 1) * hidden])

    layer_input = x
    for k in range(int(cfg["num_layers"])):
        outs = []
        for d in range(n_dir):
            sfx = "_reverse" if d else ""
            tag = f"{base}_l{k}{'r' if d else ''}"
            h = start(k * n_dir + d, 0, out_size)
            c = start(k * n_dir + d, 1, hidden) if op == "LSTM" else None
            hs: list[Any] = [None] * steps
            for t in (range(steps) if d == 0 else reversed(range(steps))):
                step = f"{tag}_t{t}"
                x_t = w.op(f"{step}_x", "squeeze", w.op(
                    f"{step}_xs", "slice", layer_input, axes=[0], begin=[t], end=[t + 1]),
                    axes=[0])
                xw = matmul(f"{step}_xw", x_t, weight(f"weight_ih_l{k}{sfx}"))
                hw = matmul(f"{step}_hw", h, weight(f"weight_hh_l{k}{sfx}"))
                if cfg["bias"]:
                    xw = w.op(f"{step}_xb", "add", xw, bias(f"bias_ih_l{k}{sfx}"))
                    hw = w.op(f"{step}_hb", "add", hw, bias(f"bias_hh_l{k}{sfx}"))
                if op == "RNN":
                    act = "relu" if cfg["nonlinearity"] == "relu" else "tanh"
                    h = w.op(f"{step}_h", act, w.op(f"{step}_pre", "add", xw, hw))
                elif op == "GRU":
                    r = w.op(f"{step}_r", "sigmoid", w.op(f"{step}_rp", "add", gate(
                        f"{step}_xr", xw, 0), gate(f"{step}_hr", hw, 0)))
                    z = w.op(f"{step}_z", "sigmoid", w.op(f"{step}_zp", "add", gate(
                        f"{step}_xz", xw, 1), gate(f"{step}_hz", hw, 1)))
                    n = w.op(f"{step}_n", "tanh", w.op(f"{step}_np", "add", gate(
                        f"{step}_xn", xw, 2), w.op(f"{step}_rn", "mul", r, gate(
                            f"{step}_hn", hw, 2))))
                    # h' = n + z * (h - n)  (= (1 - z) * n + z * h)
                    h = w.op(f"{step}_h", "add", n, w.op(f"{step}_zd", "mul", z, w.op(
                        f"{step}_d", "sub", h, n)))
                else:
                    pre = w.op(f"{step}_pre", "add", xw, hw)
                    i_g = w.op(f"{step}_i", "sigmoid", gate(f"{step}_ip", pre, 0))
                    f_g = w.op(f"{step}_f", "sigmoid", gate(f"{step}_fp", pre, 1))
                    g_g = w.op(f"{step}_g", "tanh", gate(f"{step}_gp", pre, 2))
                    o_g = w.op(f"{step}_o", "sigmoid", gate(f"{step}_op", pre, 3))
                    c = w.op(f"{step}_c", "add", w.op(f"{step}_fc", "mul", f_g, c),
                             w.op(f"{step}_ig", "mul", i_g, g_g))
                    h = w.op(f"{step}_hh", "mul", o_g, w.op(f"{step}_tc", "tanh", c))
                    if proj:
                        h = matmul(f"{step}_h", h, weight(f"weight_hr_l{k}{sfx}"))
                hs[t] = h
            outs.append(w.op(f"{tag}_out", "stack", hs, axis=0) if steps > 1
                        else w.op(f"{tag}_out", "unsqueeze", hs[0], axes=[0]))
            finals[0].append(h)
            if c is not None:
                finals[1].append(c)
        layer_input = outs[0] if n_dir == 1 else w.op(f"{base}_l{k}_out", "concat", outs,
                                                        axis=2)
    y = layer_input
    h_n = [w.op(f"{base}_{name}", "stack", f, axis=0) for name, f in zip(("hn", "cn"),
                                                                         finals) if f]
    if unbatched:
        y = w.op(f"{base}_y", "squeeze", y, axes=[1])
        h_n = [w.op(f"{base}_{name}u", "squeeze", s, axes=[1]) for name, s in zip(
            ("hn", "cn"), h_n)]
    elif cfg["batch_first"]:
        y = w.op(f"{base}_y", "transpose", y, axes=[1, 0, 2])
    return (y, (h_n[0], h_n[1])) if op == "LSTM" else (y, h_n[0])


__all__ = ["trunc", "lrn", "cumsum", "recurrent"]

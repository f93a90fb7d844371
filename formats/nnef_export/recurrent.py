"""LSTM, GRU and RNN layers unrolled over the static sequence length (NNEF has no
recurrent operation): per layer, direction and time step a ``slice`` of the input,
``matmul``s with the weights (``transposeB``) and PyTorch's gate equations, then the
outputs ``stack``ed / ``concat``enated."""

from __future__ import annotations

from typing import Any

from .registry import layer
from .writer import LayerCall, _Writer

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


@layer("LSTM", "GRU", "RNN")
def _recurrent(w: _Writer, call: LayerCall) -> tuple[Any, ...]:
    """The layer's tuple of NNEF tensors (``output, h_n`` or ``output, (h_n, c_n)``)."""
    inputs = call.inputs
    states = []
    if len(inputs) > 1:
        parts = inputs[1] if isinstance(inputs[1], tuple) else (inputs[1],)
        states = [w.value(r) for r in parts]
    return _Unrolled(w, call.layer, call.base, states).run(w.value(inputs[0]), call.in_shape)


class _Unrolled:
    """One recurrent layer step by step: per layer and direction, x_t @ W_ih^T + b_ih
    and h @ W_hh^T + b_hh with PyTorch's gate equations."""

    def __init__(self, w: _Writer, lay: Any, base: str, states: list[Any]):
        self.w, self.base, self.states = w, base, states
        self.cfg, self.lid, self.kind = lay.config, lay.id, lay.type
        self.hidden = int(self.cfg["hidden_size"])
        self.proj = int(self.cfg.get("proj_size", 0))
        self.n_dir = 2 if self.cfg["bidirectional"] else 1
        self.batch = 0

    def run(self, x: Any, in_shape: tuple[int, ...]) -> tuple[Any, ...]:
        w, base, cfg = self.w, self.base, self.cfg
        unbatched = len(in_shape) == 2
        if unbatched:
            x = w.op(f"{base}_batched", "unsqueeze", x, axes=[1])
            self.states = [w.op(f"{base}_state{i}", "unsqueeze", s, axes=[1])
                           for i, s in enumerate(self.states)]
            steps, self.batch = in_shape[0], 1
        elif cfg["batch_first"]:
            x = w.op(f"{base}_time_first", "transpose", x, axes=[1, 0, 2])
            self.batch, steps = in_shape[0], in_shape[1]
        else:
            steps, self.batch = in_shape[0], in_shape[1]
        finals: list[list[Any]] = [[], []]
        layer_input = x
        for k in range(int(cfg["num_layers"])):
            outs = []
            for d in range(self.n_dir):
                out, h, c = self.direction(k, d, layer_input, steps)
                outs.append(out)
                finals[0].append(h)
                if c is not None:
                    finals[1].append(c)
            layer_input = outs[0] if self.n_dir == 1 else w.op(
                f"{base}_l{k}_out", "concat", outs, axis=2)
        y = layer_input
        h_n = [w.op(f"{base}_{name}", "stack", f, axis=0)
               for name, f in zip(("hn", "cn"), finals) if f]
        if unbatched:
            y = w.op(f"{base}_y", "squeeze", y, axes=[1])
            h_n = [w.op(f"{base}_{name}u", "squeeze", s, axes=[1])
                   for name, s in zip(("hn", "cn"), h_n)]
        elif cfg["batch_first"]:
            y = w.op(f"{base}_y", "transpose", y, axes=[1, 0, 2])
        return (y, (h_n[0], h_n[1])) if self.kind == "LSTM" else (y, h_n[0])

    def direction(self, k: int, d: int, layer_input: Any, steps: int
                  ) -> tuple[Any, Any, Any]:
        """Layer ``k`` in direction ``d``: its outputs over time (time first), and the
        final hidden and cell states (None for the cell of a GRU or RNN)."""
        sfx = "_reverse" if d else ""
        tag = f"{self.base}_l{k}{'r' if d else ''}"
        index = k * self.n_dir + d
        h = self.start(index, 0, self.proj or self.hidden)
        c = self.start(index, 1, self.hidden) if self.kind == "LSTM" else None
        hs: list[Any] = [None] * steps
        for t in (range(steps) if d == 0 else reversed(range(steps))):
            h, c = self.step(f"{tag}_t{t}", k, sfx, layer_input, t, h, c)
            hs[t] = h
        out = (self.w.op(f"{tag}_out", "stack", hs, axis=0) if steps > 1
               else self.w.op(f"{tag}_out", "unsqueeze", hs[0], axes=[0]))
        return out, h, c

    def step(self, step: str, k: int, sfx: str, layer_input: Any, t: int, h: Any, c: Any
             ) -> tuple[Any, Any]:
        """One time step: the new hidden and cell states."""
        w, cfg = self.w, self.cfg
        x_t = w.op(f"{step}_x", "squeeze", w.op(
            f"{step}_xs", "slice", layer_input, axes=[0], begin=[t], end=[t + 1]), axes=[0])
        xw = self.matmul(f"{step}_xw", x_t, self.weight(f"weight_ih_l{k}{sfx}"))
        hw = self.matmul(f"{step}_hw", h, self.weight(f"weight_hh_l{k}{sfx}"))
        if cfg["bias"]:
            xw = w.op(f"{step}_xb", "add", xw, self.bias(f"bias_ih_l{k}{sfx}"))
            hw = w.op(f"{step}_hb", "add", hw, self.bias(f"bias_hh_l{k}{sfx}"))
        if self.kind == "RNN":
            act = "relu" if cfg["nonlinearity"] == "relu" else "tanh"
            return w.op(f"{step}_h", act, w.op(f"{step}_pre", "add", xw, hw)), c
        if self.kind == "GRU":
            return self.gru(step, xw, hw, h), c
        return self.lstm(step, xw, hw, c, f"weight_hr_l{k}{sfx}")

    def gru(self, step: str, xw: Any, hw: Any, h: Any) -> Any:
        w, gate = self.w, self.gate
        r = w.op(f"{step}_r", "sigmoid", w.op(f"{step}_rp", "add", gate(
            f"{step}_xr", xw, 0), gate(f"{step}_hr", hw, 0)))
        z = w.op(f"{step}_z", "sigmoid", w.op(f"{step}_zp", "add", gate(
            f"{step}_xz", xw, 1), gate(f"{step}_hz", hw, 1)))
        n = w.op(f"{step}_n", "tanh", w.op(f"{step}_np", "add", gate(
            f"{step}_xn", xw, 2), w.op(f"{step}_rn", "mul", r, gate(f"{step}_hn", hw, 2))))
        # h' = n + z * (h - n)  (= (1 - z) * n + z * h)
        return w.op(f"{step}_h", "add", n, w.op(f"{step}_zd", "mul", z, w.op(
            f"{step}_d", "sub", h, n)))

    def lstm(self, step: str, xw: Any, hw: Any, c: Any, projection: str
             ) -> tuple[Any, Any]:
        w, gate = self.w, self.gate
        pre = w.op(f"{step}_pre", "add", xw, hw)
        i_g = w.op(f"{step}_i", "sigmoid", gate(f"{step}_ip", pre, 0))
        f_g = w.op(f"{step}_f", "sigmoid", gate(f"{step}_fp", pre, 1))
        g_g = w.op(f"{step}_g", "tanh", gate(f"{step}_gp", pre, 2))
        o_g = w.op(f"{step}_o", "sigmoid", gate(f"{step}_op", pre, 3))
        c = w.op(f"{step}_c", "add", w.op(f"{step}_fc", "mul", f_g, c),
                 w.op(f"{step}_ig", "mul", i_g, g_g))
        h = w.op(f"{step}_hh", "mul", o_g, w.op(f"{step}_tc", "tanh", c))
        if self.proj:
            h = self.matmul(f"{step}_h", h, self.weight(projection))
        return h, c

    def weight(self, name: str) -> Any:
        return self.w.array(self.lid, name)

    def bias(self, name: str) -> Any:
        return self.w.array(self.lid, name, (1, _GATES[self.kind] * self.hidden))

    def start(self, index: int, which: int, size: int) -> Any:
        """Initial state ``which`` (0: h, 1: c) of layer-direction ``index``: zeros, or
        the slice of the given state."""
        w, base = self.w, self.base
        if not self.states:
            return w.op(f"{base}_zero{which}", "constant<scalar>", shape=[self.batch, size],
                        value=[0.0])
        part = w.op(f"{base}_init{which}_{index}", "slice", self.states[which], axes=[0],
                    begin=[index], end=[index + 1])
        return w.op(f"{base}_h{which}_{index}", "squeeze", part, axes=[0])

    def matmul(self, tag: str, a: Any, b: Any) -> Any:
        return self.w.op(tag, "matmul", a, b, transposeA=False, transposeB=True)

    def gate(self, tag: str, value: Any, k: int) -> Any:
        return self.w.op(tag, "slice", value, axes=[1], begin=[k * self.hidden],
                         end=[(k + 1) * self.hidden])

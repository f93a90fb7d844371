"""JAX backend: jitted IR-built forward vs hand-written JAX, compile time, torch vs JAX.

Prints, measured in one run (no assertions):
  * per-call time of the jitted IR-built forward (``make_forward`` + ``jax.jit``) over a
    hand-written equinox module (jitted over its partitioned arrays, and through
    ``eqx.filter_jit``) and over a hand-written jitted ``jnp`` function, for the 2-5-5-1
    tanh MLP at batch 1 and a small CNN at batch 256 (target <= 1.05x);
  * trace+lower and XLA compile time of the IR-built forward next to the hand-written one;
  * a torch-vs-JAX forward-time table for the same networks (plain hand-written torch
    modules, ``torch.no_grad``).
Every call includes dispatch and ``block_until_ready``.  Threads: one for XLA and torch
(``--threads N`` to change).

    python benchmarks/bench_jax.py [--threads 1] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=40)
    return p.parse_args()


ARGS = _parse()
if ARGS.threads == 1:  # must be set before jax is imported
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from petab_sciml.backends.jax import build_model, make_forward  # noqa: E402
from petab_sciml.network import Network  # noqa: E402

torch.set_num_threads(ARGS.threads)


# --------------------------------------------------------------------------- networks (IR)
def _node(name, op, target, *args):
    return {"name": name, "op": op, "target": target, "args": list(args)}


def mlp_network() -> Network:
    layers = [{"layer_id": f"layer{i}", "layer_type": "Linear",
               "args": {"in_features": a, "out_features": b}}
              for i, (a, b) in enumerate([(2, 5), (5, 5), (5, 1)], 1)]
    nodes = [_node("x", "placeholder", "x"),
             _node("h1", "call_module", "layer1", "x"), _node("t1", "call_method", "tanh", "h1"),
             _node("h2", "call_module", "layer2", "t1"), _node("t2", "call_method", "tanh", "h2"),
             _node("y", "call_module", "layer3", "t2"), _node("output", "output", "output", "y")]
    return Network.build("mlp", ["x"], layers, nodes)


def cnn_network() -> Network:
    layers = [
        {"layer_id": "conv1", "layer_type": "Conv2d",
         "args": {"in_channels": 1, "out_channels": 8, "kernel_size": 3}},
        {"layer_id": "pool", "layer_type": "MaxPool2d", "args": {"kernel_size": 2}},
        {"layer_id": "conv2", "layer_type": "Conv2d",
         "args": {"in_channels": 8, "out_channels": 16, "kernel_size": 3}},
        {"layer_id": "flatten", "layer_type": "Flatten", "args": {}},
        {"layer_id": "fc", "layer_type": "Linear",
         "args": {"in_features": 16 * 4 * 4, "out_features": 10}},
    ]
    nodes = [_node("x", "placeholder", "x"),
             _node("c1", "call_module", "conv1", "x"), _node("r1", "call_function", "relu", "c1"),
             _node("p", "call_module", "pool", "r1"),
             _node("c2", "call_module", "conv2", "p"), _node("r2", "call_function", "relu", "c2"),
             _node("f", "call_module", "flatten", "r2"), _node("y", "call_module", "fc", "f"),
             _node("output", "output", "output", "y")]
    return Network.build("cnn", ["x"], layers, nodes)


# --------------------------------------------------------------------------- hand-written JAX
def mlp_jnp(p, x):
    h = jnp.tanh(x @ p["layer1"]["weight"].T + p["layer1"]["bias"])
    h = jnp.tanh(h @ p["layer2"]["weight"].T + p["layer2"]["bias"])
    return h @ p["layer3"]["weight"].T + p["layer3"]["bias"]


def _conv(x, w, b):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + b[None, :, None, None]


def _maxpool2(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def cnn_jnp(p, x):
    h = _maxpool2(jax.nn.relu(_conv(x, p["conv1"]["weight"], p["conv1"]["bias"])))
    h = jax.nn.relu(_conv(h, p["conv2"]["weight"], p["conv2"]["bias"]))
    h = h.reshape(h.shape[0], -1)
    return h @ p["fc"]["weight"].T + p["fc"]["bias"]


class EqxMLP(eqx.Module):
    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array
    w3: jax.Array
    b3: jax.Array

    def __call__(self, x):
        h = jnp.tanh(x @ self.w1.T + self.b1)
        h = jnp.tanh(h @ self.w2.T + self.b2)
        return h @ self.w3.T + self.b3


class EqxCNN(eqx.Module):
    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array
    wf: jax.Array
    bf: jax.Array

    def __call__(self, x):
        h = _maxpool2(jax.nn.relu(_conv(x, self.w1, self.b1)))
        h = jax.nn.relu(_conv(h, self.w2, self.b2))
        return h.reshape(h.shape[0], -1) @ self.wf.T + self.bf


def eqx_module(kind: str, p):
    flat = [a for group in p.values() for a in group.values()]
    return (EqxMLP if kind == "mlp" else EqxCNN)(*flat)


# --------------------------------------------------------------------------- hand-written torch
class TorchMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer1 = torch.nn.Linear(2, 5)
        self.layer2 = torch.nn.Linear(5, 5)
        self.layer3 = torch.nn.Linear(5, 1)

    def forward(self, x):
        return self.layer3(torch.tanh(self.layer2(torch.tanh(self.layer1(x)))))


class TorchCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3)
        self.pool = torch.nn.MaxPool2d(2)
        self.conv2 = torch.nn.Conv2d(8, 16, 3)
        self.flatten = torch.nn.Flatten()
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        return self.fc(self.flatten(torch.relu(self.conv2(x))))


def torch_module(kind: str, p) -> torch.nn.Module:
    module = TorchMLP() if kind == "mlp" else TorchCNN()
    state = {f"{g}.{a}": torch.from_numpy(np.array(v)) for g, arrays in p.items()
             for a, v in arrays.items()}
    module.load_state_dict(state)
    return module.eval()


# --------------------------------------------------------------------------- timing
def interleaved(fns: dict, calls: int, rounds: int, *, blocks: bool = False
                ) -> dict[str, float]:
    """Per-call time of each function, interleaved call by call (A B C A B C ...) so that
    all see the same machine load, or with ``blocks`` round by round (A A A B B B ...; for
    torch against JAX: a call right after the other framework's pays for cold caches);
    the best round counts (the statistic least disturbed by other processes)."""
    names = list(fns)
    for _ in range(max(calls // 5, 2)):  # warm-up
        for fn in fns.values():
            fn()
    best = dict.fromkeys(names, float("inf"))
    clock = time.perf_counter
    for _ in range(rounds):
        total = dict.fromkeys(names, 0.0)
        if blocks:
            for name in names:
                fn = fns[name]
                t0 = clock()
                for _ in range(calls):
                    fn()
                total[name] = clock() - t0
        else:
            for _ in range(calls):
                for name in names:
                    t0 = clock()
                    fns[name]()
                    total[name] += clock() - t0
            names = names[1:] + names[:1]  # rotate: no function always follows the same one
        for name in names:
            best[name] = min(best[name], total[name] / calls)
    return best


def compile_times(fn, *args) -> tuple[float, float]:
    """(trace + lower, XLA compile) seconds of a fresh jax.jit of ``fn``."""
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    t1 = time.perf_counter()
    lowered.compile()
    return t1 - t0, time.perf_counter() - t1


def _hlo(jitted, *args) -> str:
    """The StableHLO body of a jitted function (module name and locations stripped)."""
    text = jitted.lower(*args).as_text()
    return text[text.index("func.func"):]


def run(kind: str, batch: int, calls: int, rounds: int) -> dict[str, float]:
    network = mlp_network() if kind == "mlp" else cnn_network()
    shape = (batch, 2) if kind == "mlp" else (batch, 1, 14, 14)
    x = jnp.asarray(np.random.default_rng(0).normal(size=shape), jnp.float32)
    model = build_model(network, seed=0)
    fn, params = make_forward(model)

    ir = jax.jit(lambda p, x: fn(p, x)[0])
    hand = jax.jit(mlp_jnp if kind == "mlp" else cnn_jnp)
    module = eqx_module(kind, params)
    arrays, static = eqx.partition(module, eqx.is_array)
    eqx_jit = jax.jit(lambda a, x: eqx.combine(a, static)(x))
    eqx_filter = eqx.filter_jit(lambda m, x: m(x))
    tmod = torch_module(kind, params)
    xt = torch.from_numpy(np.array(x))

    expected = np.asarray(hand(params, x))
    for got in (ir(params, x), eqx_jit(arrays, x), eqx_filter(module, x)):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(tmod(xt).numpy(), expected, rtol=1e-4, atol=1e-4)

    def torch_call():
        with torch.no_grad():
            tmod(xt)

    ir_call = lambda: jax.block_until_ready(ir(params, x))  # noqa: E731
    fns = {
        "ir": ir_call,
        "jnp": lambda: jax.block_until_ready(hand(params, x)),
        "eqx": lambda: jax.block_until_ready(eqx_jit(arrays, x)),
    }
    result = interleaved(fns, calls, rounds)
    # Python-heavy or other-framework calls disturb the next call: measured in blocks.
    slow = interleaved({"ir": ir_call, "torch": torch_call,
                        "eqx_filter_jit": lambda: jax.block_until_ready(eqx_filter(module, x))},
                       calls, rounds, blocks=True)
    result.update({f"{k}_blocks": v for k, v in slow.items()})
    # Fresh function objects: jax.jit would reuse the executables compiled above.
    hand_fn = mlp_jnp if kind == "mlp" else cnn_jnp
    result["same_hlo"] = _hlo(ir, params, x) == _hlo(hand, params, x)
    result["compile_ir"] = compile_times(lambda p, x: fn(p, x)[0], params, x)
    result["compile_jnp"] = compile_times(lambda p, x: hand_fn(p, x), params, x)
    t0 = time.perf_counter()
    build_model(network, seed=1)
    make_forward(model)
    result["build"] = time.perf_counter() - t0
    return result


def main() -> None:
    start = time.perf_counter()
    print(f"jax {jax.__version__} ({jax.default_backend()}), equinox {eqx.__version__}, "
          f"torch {torch.__version__}; threads={ARGS.threads}, rounds={ARGS.rounds}; "
          f"best round's time per call, incl. dispatch and block_until_ready\n")
    # (title, network, batch, calls per round, rounds): many short rounds for the
    # microsecond-scale MLP, so that the best round falls into a quiet moment.
    cases = [("MLP 2-5-5-1 tanh, batch 1", "mlp", 1, 100, 5 * ARGS.rounds),
             ("CNN, batch 256", "cnn", 256, 5, ARGS.rounds)]
    results = {title: run(kind, batch, calls, rounds)
               for title, kind, batch, calls, rounds in cases}

    print("IR-built jitted forward vs hand-written JAX (target <= 1.05x); 'same HLO': the "
          "IR-built program lowers to exactly the hand-written jnp function's StableHLO")
    header = (f"{'network':<28}{'IR-built':>11}{'jnp fn':>11}{'ratio':>8}{'eqx module':>12}"
              f"{'ratio':>8}{'eqx.filter_jit':>16}{'ratio':>8}{'same HLO':>10}")
    print(header)
    for title, r in results.items():
        print(f"{title:<28}{r['ir'] * 1e6:9.2f}us{r['jnp'] * 1e6:9.2f}us"
              f"{r['ir'] / r['jnp']:7.3f}x{r['eqx'] * 1e6:10.2f}us{r['ir'] / r['eqx']:7.3f}x"
              f"{r['eqx_filter_jit_blocks'] * 1e6:14.2f}us"
              f"{r['ir_blocks'] / r['eqx_filter_jit_blocks']:7.3f}x"
              f"{'yes' if r['same_hlo'] else 'no':>10}")

    print("\nCompile time (fresh jax.jit: trace+lower / XLA compile), build = build_model + "
          "make_forward")
    for title, r in results.items():
        (ti, ci), (tj, cj) = r["compile_ir"], r["compile_jnp"]
        print(f"{title:<28} IR-built {ti * 1e3:7.1f} / {ci * 1e3:7.1f} ms   "
              f"hand-written {tj * 1e3:7.1f} / {cj * 1e3:7.1f} ms   "
              f"build {r['build'] * 1e3:6.1f} ms")

    print("\nForward time: PyTorch (hand-written module, no_grad) vs JAX (IR-built, jitted)")
    print(f"{'network':<28}{'torch':>11}{'jax':>11}{'jax/torch':>11}")
    for title, r in results.items():
        print(f"{title:<28}{r['torch_blocks'] * 1e6:9.2f}us{r['ir_blocks'] * 1e6:9.2f}us"
              f"{r['ir_blocks'] / r['torch_blocks']:10.3f}x")
    print(f"\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    sys.exit(main())

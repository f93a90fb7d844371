"""PyTorch backend: IR-built module vs hand-written module, and large-model build time.

Prints, measured in one run:
  * forward time of the IR-built module over a hand-written equivalent for a 2-5-5-1 tanh
    MLP at batch 1 (target <= 1.10x) and a CNN at batch 256 (target <= 1.02x);
  * time and peak memory to build a 10M-parameter MLP from YAML + HDF5 (target < 2 s),
    next to a hand-written baseline (torch module + h5py read) measured in the same run.
Run: python benchmarks/bench_torch.py
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch

from petab_sciml.arrays import load_parameters, save_parameters
from petab_sciml.backends.torch import BACKEND
from petab_sciml.formats import yaml as yaml_format
from petab_sciml.formats.torch_fx import network_from_module, parameters_from_module

torch.set_num_threads(1)


class MLP(torch.nn.Module):
    def __init__(self, sizes: list[int]) -> None:
        super().__init__()
        self.layers = len(sizes) - 1
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            setattr(self, f"layer{i + 1}", torch.nn.Linear(a, b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(1, self.layers):
            x = torch.tanh(getattr(self, f"layer{i}")(x))
        return getattr(self, f"layer{self.layers}")(x)


class MLP3(torch.nn.Module):
    """The typical UDE network, written out by hand (no loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = torch.nn.Linear(2, 5)
        self.layer2 = torch.nn.Linear(5, 5)
        self.layer3 = torch.nn.Linear(5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer3(torch.tanh(self.layer2(torch.tanh(self.layer1(x)))))


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3)
        self.pool = torch.nn.MaxPool2d(2)
        self.conv2 = torch.nn.Conv2d(8, 16, 3)
        self.flatten = torch.nn.Flatten()
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.fc(self.flatten(x))


def ir_module(reference: torch.nn.Module) -> torch.nn.Module:
    network = network_from_module(reference, "net")
    model = BACKEND.build(network)
    BACKEND.set_parameters(model, parameters_from_module(reference, network))
    return model.eval()


def per_call(fn, x: torch.Tensor, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - start) / calls


def compare(name: str, reference: torch.nn.Module, x: torch.Tensor, calls: int,
            target: float) -> None:
    reference.eval()
    ours = ir_module(reference)
    with torch.no_grad():
        np.testing.assert_allclose(ours(x).numpy(), reference(x).numpy(), atol=1e-6)
        for _ in range(3):  # warm-up
            per_call(reference, x, calls // 10)
            per_call(ours, x, calls // 10)
        ref_times, our_times = [], []
        for _ in range(15):  # interleaved rounds: both see the same machine state
            ref_times.append(per_call(reference, x, calls))
            our_times.append(per_call(ours, x, calls))
    ref, our = statistics.median(ref_times), statistics.median(our_times)
    ratio = our / ref
    print(f"{name:<28} hand-written {ref * 1e6:9.2f} us   IR-built {our * 1e6:9.2f} us   "
          f"ratio {ratio:5.3f}x (target <= {target:.2f}x) "
          f"{'ok' if ratio <= target else 'ABOVE TARGET'}")


SIZES = [1000, 2000, 2000, 1500, 1000]  # 10.5M parameters


def _build_ours(folder: str) -> None:
    net = yaml_format.read(Path(folder) / "big.yaml")
    model = BACKEND.build(net)
    BACKEND.set_parameters(model, load_parameters(Path(folder) / "big.hdf5", net))


def _build_baseline(folder: str) -> None:
    model = MLP(SIZES)
    with h5py.File(Path(folder) / "big.hdf5") as f, torch.no_grad():
        for name, param in model.named_parameters():
            layer, _, array = name.partition(".")
            param.copy_(torch.from_numpy(f[f"parameters/big/{layer}/{array}"][()]))


def _child(which: str, folder: str, queue) -> None:
    """Runs in a fresh process so its peak RSS is the build's own."""
    torch.set_num_threads(1)
    fn = _build_ours if which == "ours" else _build_baseline
    start_rss = _reset_peak_rss_mb()
    t0 = time.perf_counter()
    fn(folder)
    elapsed = time.perf_counter() - t0
    queue.put((elapsed, _status_mb("VmHWM") - start_rss))


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak_rss_mb() -> float:
    """Reset the kernel's peak-RSS mark (Linux) so VmHWM measures from now; current RSS."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return _status_mb("VmRSS")


def _in_fresh_process(which: str, folder: str) -> tuple[float, float]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(which, folder, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def large_build(folder: Path) -> None:
    reference = MLP(SIZES)
    network = network_from_module(reference, "big")
    n = network.parameter_count()
    yaml_format.write(network, folder / "big.yaml")
    save_parameters(folder / "big.hdf5", network, parameters_from_module(reference, network))
    del reference
    gc.collect()
    runs = {"ours": [], "baseline": []}
    for _ in range(3):
        for which in runs:
            runs[which].append(_in_fresh_process(which, str(folder)))
    (t_ours, m_ours), (t_base, m_base) = min(runs["ours"]), min(runs["baseline"])
    print(f"{n / 1e6:.1f}M-parameter MLP from YAML + HDF5, fresh process: {t_ours:.3f} s "
          f"(target < 2 s: {'ok' if t_ours < 2 else 'ABOVE TARGET'}), peak memory "
          f"+{m_ours:.0f} MB; hand-written torch module + h5py: {t_base:.3f} s, "
          f"+{m_base:.0f} MB; ratio {t_ours / t_base:.2f}x time, "
          f"{m_ours / max(m_base, 1):.2f}x memory (parameters alone: {n * 4 / 2**20:.0f} MB)")


def main() -> None:
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, 1 thread")
    torch.manual_seed(0)
    compare("MLP 2-5-5-1 tanh, batch 1", MLP3(), torch.randn(1, 2), 2000, 1.10)
    compare("CNN, batch 256", CNN(), torch.randn(256, 1, 14, 14), 20, 1.02)
    with tempfile.TemporaryDirectory() as tmp:
        large_build(Path(tmp))


if __name__ == "__main__":
    main()

"""Batched experiments split over several JAX devices (``backends/jax/devices.py``).

JAX fixes its devices at its first computation, so the two-device checks run in a
child process that calls ``use_cpu_cores(2)`` first.  There every sensitivity mode is
compared with the same problem on one device (``JaxOptions(devices=1)``): the same
simulations (an experiment is solved with the same numbers whatever else is in its
batch, up to the last bits JAX 0.12 rounds differently per batch size), the same
objective and gradient up to the order of their sums over experiments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libsbml")
pytest.importorskip("jax")
pytest.importorskip("diffrax")

pytestmark = pytest.mark.usefixtures("restore_x64")

REPO = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from petab_sciml.backends.jax.devices import use_cpu_cores
    use_cpu_cores(2)
    import numpy as np
    from petab_sciml.problem import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv

    out = {{}}
    values = {{}}     # the two-device value of each mode (17 experiments)
    tmp = Path({tmp!r})
    for n, modes in ((10, ["forward"]), (17, ["forward", "reverse", "adjoint", "forward-ad"])):
        problem = load_problem(write_scaled_lv(tmp / f"lv{{n}}", n), backend="jax")
        for mode in modes:
            split = problem.simulator(cache=False, sensitivity=mode)
            one = problem.simulator(cache=False, sensitivity=mode, devices=1)
            a, b = split.evaluate(), one.evaluate()
            values[n, mode] = a.value
            scale = np.maximum(1.0, np.abs(b.grad_flat))
            out[f"{{n}} {{mode}}"] = {{
                "devices": len(split.executor.devices),
                "split": {{str(k): v for k, v in split.executor.split_batches.items()}},
                "one device split": len(one.executor.split_batches),
                "value": abs(a.value - b.value) / abs(b.value),
                "grad": float(np.max(np.abs(a.grad_flat - b.grad_flat) / scale)),
                "sims": float(np.max(np.abs(a.simulations - b.simulations)
                                     / np.maximum(1.0, np.abs(b.simulations)))),
            }}
    # the disk cache stores and reloads the two-device objective; the reference is the
    # same objective solved above (forward sensitivities: the cheapest compile)
    reference_value = values[17, "forward"]
    for i in range(2):
        problem = load_problem(tmp / "lv17" / "problem.yaml", backend="jax")
        sim = problem.simulator(cache_dir=tmp / "cache", sensitivity="forward")
        got = sim.evaluate()
        out[f"cache {{i}}"] = {{"events": list(sim.cache.events),
                              "value": abs(got.value - reference_value)}}
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("devices")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), tmp=str(tmp))],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["forward", "reverse", "adjoint", "forward-ad"])
@pytest.mark.slow
def test_split_batch_equals_one_device(two_devices, mode):
    got = two_devices[f"17 {mode}"]
    assert got["devices"] == 2
    assert got["split"] == {"0": 2}      # 17 experiments: two shares of 9 (one a copy)
    assert got["one device split"] == 0
    # the same numbers for every experiment: bit for bit with JAX 0.10; JAX 0.12 fuses
    # some multiply-adds differently per batch size (tests/backends/jax/test_batch_invariance.py):
    # 7e-15 there
    assert got["sims"] <= 1e-13
    assert got["value"] <= 1e-13
    assert got["grad"] <= 1e-10


@pytest.mark.slow
def test_small_batch_is_not_split(two_devices):
    # 10 experiments on two devices: fewer than MIN_EXPERIMENTS_PER_DEVICE each
    got = two_devices["10 forward"]
    assert got["devices"] == 2 and got["split"] == {}
    assert got["value"] == 0.0 and got["sims"] == 0.0 and got["grad"] == 0.0


@pytest.mark.slow
def test_disk_cache_keeps_the_two_device_objective(two_devices):
    assert two_devices["cache 0"]["events"] == ["exported"]
    assert two_devices["cache 1"]["events"] == ["loaded"]
    assert two_devices["cache 0"]["value"] <= 1e-13
    assert two_devices["cache 1"]["value"] <= 1e-13


def test_shares_rule():
    from petab_sciml.backends.jax.devices import MIN_EXPERIMENTS_PER_DEVICE, shares

    assert shares(1, 1000) == 1
    assert shares(2, 2 * MIN_EXPERIMENTS_PER_DEVICE - 1) == 1
    assert shares(2, 2 * MIN_EXPERIMENTS_PER_DEVICE) == 2
    assert shares(4, 1000) == 4


def test_use_cpu_cores_after_jax_started_names_the_fix():
    import jax
    import jax.numpy as jnp

    from petab_sciml.backends.jax.devices import use_cpu_cores

    jnp.zeros(1).block_until_ready()       # JAX has started in this process
    with pytest.raises(RuntimeError, match="before JAX's first computation"):
        use_cpu_cores(jax.local_device_count() + 1)


def test_more_devices_than_jax_has_is_an_error(tmp_path):
    import jax

    from petab_sciml.problem import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv

    problem = load_problem(write_scaled_lv(tmp_path, 2), backend="jax")
    with pytest.raises(ValueError, match=f"JAX has {jax.local_device_count()} local"):
        problem.simulator(cache=False, devices=jax.local_device_count() + 1)


DEFAULT_CHILD = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    before = sys.argv[1]
    if before == "computed":
        import jax.numpy as jnp
        jnp.zeros(1).block_until_ready()
    elif before == "use_cpu_cores(1)":
        from petab_sciml.backends.jax import use_cpu_cores
        use_cpu_cores(1)
    from petab_sciml.problem import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv
    evaluate = sys.argv[2] == "evaluate"
    problem = load_problem(write_scaled_lv(Path(tempfile.mkdtemp()) / "lv",
                                           20 if evaluate else 2), backend="jax")
    sim = problem.simulator(cache=False)
    if evaluate:
        sim.evaluate()
    import jax
    print(json.dumps({{"jax devices": jax.local_device_count(),
                      "executor devices": len(sim.executor.devices),
                      "split": {{str(k): v for k, v in sim.executor.split_batches.items()}}}}))
""")


def _default_child(before: str, evaluate: bool, **env_extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update(env_extra)
    done = subprocess.run([sys.executable, "-c", DEFAULT_CHILD.format(repo=str(REPO)), before,
                           "evaluate" if evaluate else "load"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_backend_gives_jax_one_cpu_device_per_core_by_default():
    from petab_sciml.backends.jax.devices import available_cores

    cores = available_cores()
    got = _default_child("nothing", evaluate=True)
    assert got["jax devices"] == cores
    assert got["executor devices"] == cores
    # 20 experiments: split when two devices get at least 8 each
    # (3 or more devices: fewer than 8 each, not split)
    assert got["split"] == ({"0": 2} if cores == 2 else {})


@pytest.mark.slow
@pytest.mark.parametrize("before, env", [
    ("nothing", {"JAX_NUM_CPU_DEVICES": "1"}),
    ("nothing", {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}),
    ("use_cpu_cores(1)", {}),
    ("computed", {}),      # JAX computed before the backend was used: its devices stay
])
def test_users_device_count_is_left_alone(before, env):
    # (a simulator of a 2-experiment problem, not evaluated: with one device nothing
    # can be split, and the devices are fixed once the problem is loaded)
    got = _default_child(before, evaluate=False, **env)
    assert got["jax devices"] == 1 and got["executor devices"] == 1

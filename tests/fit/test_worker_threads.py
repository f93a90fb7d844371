"""The embedded Dask cluster's workers run one thread each
(``petab_sciml.fit.engine.worker_thread_env``), keeping the user's XLA flags."""

from __future__ import annotations

import pytest

from petab_sciml.fit.engine import worker_thread_env


def test_one_thread_and_one_jax_device_per_worker(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = worker_thread_env()
    assert env["OMP_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"
    assert set(env["XLA_FLAGS"].split()) == {
        "--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1",
        "--xla_force_host_platform_device_count=1"}


def test_users_flags_and_device_count_are_kept(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3 --foo=1")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = worker_thread_env()
    flags = env["XLA_FLAGS"].split()
    assert flags[:2] == ["--xla_force_host_platform_device_count=3", "--foo=1"]
    assert "--xla_force_host_platform_device_count=1" not in flags
    assert env["OMP_NUM_THREADS"] == "2"


@pytest.mark.slow
def test_workers_get_the_environment():
    pytest.importorskip("distributed")
    from petab_sciml.fit.engine import connect

    client, cluster = connect(n_workers=1)
    try:
        got = client.run(lambda: __import__("os").environ.get("XLA_FLAGS", ""))
        assert all("intra_op_parallelism_threads=1" in v for v in got.values()), got
    finally:
        client.close()
        if cluster is not None:
            cluster.close()

"""Real DDP runs (2 gloo workers on 127.0.0.1) with injected, known delays: the profiler must
find each delay in the stall it belongs to, and the network stall must follow the link."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from unstall.net.link import Link
from unstall.profile import (
    ImageFileData,
    InjectedDelays,
    StallReport,
    SyntheticData,
    measure_stalls,
    read_dataset,
    write_image_dataset,
)
from unstall.workload import zoo

MS = 1e-3


def _profile(model: str, options: dict[str, Any], batch: int, **settings: Any) -> StallReport:
    """A zoo model on its synthetic batches, as the resolver builds them."""
    build = functools.partial(zoo.build, model, **options)
    data = SyntheticData(functools.partial(zoo.example_batch, model, **options), batch)
    return measure_stalls(build, data, name=model, model_options=options, **settings)


@pytest.mark.slow
def test_injected_data_delays_land_in_fetch_and_prep(tmp_path: Path) -> None:
    write_image_dataset(tmp_path, count=16, image_size=32, num_classes=10, seed=1)
    options: dict[str, Any] = {"width_mult": 0.5, "image_size": 32}
    memory = SyntheticData(functools.partial(zoo.example_batch, "mobilenet_v2", **options), 2)
    data = ImageFileData(read_dataset(tmp_path), 2, memory=memory, label=str(tmp_path))
    r = measure_stalls(
        functools.partial(zoo.build, "mobilenet_v2", **options),
        data,
        workers=1,
        iterations=2,
        warmup=1,
        repeats=5,
        delays=InjectedDelays(fetch_s=100 * MS, prep_s=80 * MS),
    )
    # Each stall holds its injected delay; the slack is real work (reading and decoding PNG
    # files). Differences of the runs' fastest repeats: on a shared machine other work only
    # ever adds time, and one disturbed repeat can move a median of three by more than the
    # injected delays themselves.
    fastest = {name: run.min_s for name, run in r.runs.items()}
    assert 75 * MS <= fastest["cold"] - fastest["warm"] <= 100 * MS + 60 * MS, r.runs
    assert 55 * MS <= fastest["warm"] - fastest["cached"] <= 80 * MS + 60 * MS, r.runs
    assert r.fetch_stall_s >= 0 and r.prep_stall_s >= 0
    assert r.job_profile.data_s == pytest.approx(r.fetch_stall_s + r.prep_stall_s)
    assert r.job_profile.measured.keys() == {"1"}


def test_injected_allreduce_and_link_delays_land_in_the_comm_stalls() -> None:
    r = _profile(
        "mlp",
        {"in_features": 32, "width": 32, "depth": 2},
        4,
        workers=2,
        iterations=4,
        warmup=1,
        repeats=3,
        network=Link(bandwidth_gbps=100.0, latency_us=60_000.0),
        delays=InjectedDelays(allreduce_s=40 * MS),
    )
    # One bucket per iteration: the injected 40 ms is interconnect, the link's 60 ms network.
    assert 30 * MS <= r.interconnect_stall_s <= 40 * MS + 40 * MS, r.runs
    assert r.emulated_delay_s == pytest.approx(60 * MS, rel=0.01)
    assert 45 * MS <= r.network_stall_s <= 60 * MS + 40 * MS, r.runs
    assert {e["ph"] for e in r.chrome_trace()["traceEvents"]} == {"M", "X"}
    assert any(s.name == "allreduce" and s.thread == 1 for s in r.trace)
    assert r.job_profile.measured.keys() == {"1", "2", "11"}


def _network_stall(gbps: float) -> tuple[float, float]:
    r = _profile(
        "mlp",
        {"in_features": 64, "width": 512, "depth": 4},
        4,
        workers=2,
        iterations=4,
        warmup=1,
        repeats=3,
        network=Link(bandwidth_gbps=gbps),
    )
    assert r.emulated_delay_s is not None
    return r.network_stall_s, r.emulated_delay_s


@pytest.mark.slow
def test_four_times_slower_link_gives_four_times_the_network_stall() -> None:
    fast, fast_delay = _network_stall(0.2)
    slow, slow_delay = _network_stall(0.05)
    assert slow_delay == pytest.approx(4 * fast_delay, rel=0.05)
    assert 3.0 <= slow / fast <= 5.0, (fast, slow)


def _listeners(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net shows them) listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
def test_the_spawned_workers_rendezvous_listens_on_loopback_only() -> None:
    from unstall.profile import ProfileConfig
    from unstall.profile.runner import _free_port, _loopback_store

    port = _free_port()
    # One worker: rank 0's store would otherwise wait, in this one process, for the others.
    store = _loopback_store(ProfileConfig(workers=1), 0, port)
    client = _loopback_store(ProfileConfig(workers=1), 1, port)
    client.set("k", "v")
    assert store.get("k") == b"v"
    # 127.0.0.1 as /proc/net/tcp writes it; never 00000000 (every interface).
    assert _listeners(port) == ["0100007F"]

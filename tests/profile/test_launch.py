"""Launch and device selection: torchrun's environment, gloo on CPU / NCCL on CUDA, and the
alternating order of the overhead runs (pure logic; no process group)."""

from __future__ import annotations

import pytest

from unstall.errors import ConfigError
from unstall.profile.config import BACKENDS, ProfileConfig, resolve_device, run_names
from unstall.profile.launch import TorchrunLaunch, torchrun_launch
from unstall.profile.runner import _paired_order

TORCHRUN_ENV = {
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


def test_torchrun_environment() -> None:
    launch = torchrun_launch(TORCHRUN_ENV)
    assert launch == TorchrunLaunch(
        rank=3, world_size=4, local_rank=1, local_world_size=2, master_addr="10.0.0.1"
    )
    assert launch.nodes == 2
    assert torchrun_launch({}) is None  # spawned by unstall itself
    assert torchrun_launch({k: v for k, v in TORCHRUN_ENV.items() if k != "RANK"}) is None
    for name, value in (("RANK", "4"), ("LOCAL_WORLD_SIZE", "3"), ("WORLD_SIZE", "x")):
        with pytest.raises(ConfigError, match=name):
            torchrun_launch({**TORCHRUN_ENV, name: value})


def test_backend_follows_the_device() -> None:
    assert BACKENDS == {"cpu": "gloo", "cuda": "nccl"}
    assert ProfileConfig(device="cpu").backend == "gloo"
    assert ProfileConfig(device="cuda").backend == "nccl"
    # auto: NCCL when every worker on the host has its own GPU, gloo on the CPU otherwise.
    assert resolve_device("auto", gpus=0, workers_per_node=2) == "cpu"
    assert resolve_device("auto", gpus=1, workers_per_node=2) == "cpu"
    assert resolve_device("auto", gpus=1, workers_per_node=1) == "cuda"
    assert resolve_device("auto", gpus=8, workers_per_node=4) == "cuda"
    assert resolve_device("cpu", gpus=8, workers_per_node=4) == "cpu"
    assert resolve_device("cuda", gpus=2, workers_per_node=2) == "cuda"
    with pytest.raises(ConfigError, match="GPU per worker"):
        resolve_device("cuda", gpus=1, workers_per_node=2)
    with pytest.raises(ConfigError, match="device"):
        resolve_device("tpu", gpus=0, workers_per_node=1)


def test_overhead_runs_alternate_with_their_timed_twins() -> None:
    names = run_names(ProfileConfig(measure_overhead=True))
    assert names == ["compute", "compute_untimed", "local", "local_untimed"]
    assert _paired_order(names, 0) == names
    assert _paired_order(names, 1) == ["compute_untimed", "compute", "local_untimed", "local"]
    plain = ["compute", "local", "network"]
    assert _paired_order(plain, 1) == plain


def test_the_data_runs_come_from_the_source_and_the_network_run_from_the_link() -> None:
    from unstall.net.link import Link

    config = ProfileConfig(network=Link(bandwidth_gbps=1.0))
    assert run_names(config, ("cached", "warm", "cold")) == [
        "compute",
        "cold",
        "warm",
        "cached",
        "local",
        "network",
    ]
    assert run_names(config, ("warm", "cached")) == [
        "compute",
        "warm",
        "cached",
        "local",
        "network",
    ]
    assert run_names(ProfileConfig(workers=4, nodes=2)) == ["compute", "local", "network"]


def test_one_worker_times_no_ddp_run_and_takes_no_emulated_link() -> None:
    # One worker has no peer on its host: a DDP run would put DDP's own work down as an
    # interconnect stall; and no link joins it to anything.
    from unstall.net.link import Link

    assert run_names(ProfileConfig(workers=1), ("warm", "cached")) == ["compute", "warm", "cached"]
    assert run_names(ProfileConfig(workers=1, measure_overhead=True)) == [
        "compute",
        "compute_untimed",
    ]
    with pytest.raises(ConfigError, match=r"ProfileConfig\.network: .*give workers >= 2"):
        ProfileConfig(workers=1, network=Link(bandwidth_gbps=1.0))

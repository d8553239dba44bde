"""Workers on GPUs (``device="cuda"``): the device's name checked, one GPU asked of Ray per
worker, a cluster without enough GPUs refused before any actor starts, the CPU unchanged; and,
where this machine has a GPU, a run on it that matches the reference within the GPU's bound."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest
import torch

from ps_helpers import TINY_MODEL, tiny_run, zoo_batches, zoo_model
from unstall import ps
from unstall.errors import ConfigError, UnstallError
from unstall.ps.device import (
    CUDA_REL_TOL,
    check_device,
    check_gpus,
    reference_device,
    rel_tol,
    worker_options,
)
from unstall.ps.replica import ModelReplica, TrainingJob
from unstall.workload.batches import to_device

NO_GPU = not torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
without_gpu = pytest.mark.skipif(not NO_GPU, reason="checks a machine without a GPU")


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


# --- the device's name and the config ----------------------------------------------------------


def test_cpu_and_cuda_are_the_devices() -> None:
    assert check_device("fit", "cpu") == "cpu"
    assert check_device("fit", "cuda") == "cuda"
    assert check_device("fit", torch.device("cuda")) == "cuda"
    with pytest.raises(ConfigError, match=r"fit\.device: must be 'cpu' or 'cuda', got 'gpu'"):
        check_device("fit", "gpu")
    with pytest.raises(ConfigError, match=r"fit\.device: must be 'cpu' or 'cuda', got int 1"):
        check_device("fit", 1)


def test_a_numbered_gpu_is_refused_with_the_hint_that_ray_assigns_it() -> None:
    with pytest.raises(ConfigError) as info:
        check_device("fit", "cuda:1")
    text = one_line(info.value)
    assert text.startswith("fit.device: 'cuda:1' names one GPU")
    assert "num_gpus=1" in text and "use device='cuda'" in text


def test_device_is_a_runtime_setting_and_a_keyword_of_fit() -> None:
    assert ps.FitConfig().runtime.device == "cpu"
    config = ps.FitConfig.of(device="cuda", workers=3)
    assert config.runtime.device == "cuda" and config.workers == 3
    with pytest.raises(ConfigError, match=r"^fit\.device: 'cuda:0' names one GPU"):
        ps.fit(zoo_model(**TINY_MODEL), zoo_batches(**TINY_MODEL), device="cuda:0")


def test_the_request_hands_its_device_to_the_run_and_the_grid() -> None:
    request = ps.PSRequest(model="mlp", device="cuda")
    assert ps.resolve_run(request).config.runtime.device == "cuda"
    assert ps.bench_config(request).runtime.device == "cuda"
    assert ps.resolve_run(ps.PSRequest(model="mlp")).config.runtime.device == "cpu"


# --- what is asked of Ray ----------------------------------------------------------------------


def test_a_cuda_worker_asks_ray_for_one_gpu() -> None:
    assert worker_options("cuda", 2, cluster_cpus=8.0) == {
        "num_cpus": 1.0,
        "num_gpus": 1,
        "scheduling_strategy": "SPREAD",
    }


def test_a_cpu_worker_asks_for_what_it_did_before() -> None:
    assert worker_options("cpu", 2, cluster_cpus=8.0) == {
        "num_cpus": 1.0,
        "scheduling_strategy": "SPREAD",
    }
    assert worker_options("cpu", 4, cluster_cpus=2.0)["num_cpus"] == 0.5
    assert worker_options("cpu", 4, cluster_cpus=2.0, worker_cpus=0.25)["num_cpus"] == 0.25


def test_too_few_gpus_are_refused_in_one_line_naming_the_device() -> None:
    check_gpus("fit", "cpu", 2, 0.0)
    check_gpus("fit", "cuda", 2, 2.0)
    with pytest.raises(ConfigError) as info:
        check_gpus("fit", "cuda", 2, 0.0)
    assert one_line(info.value) == (
        "fit.device: device='cuda' needs a GPU per worker (2 workers); this Ray cluster has 0 GPUs"
    )
    with pytest.raises(ConfigError, match=r"has 1 GPU$"):
        check_gpus("fit", "cuda", 3, 1.0)


def test_the_reference_bound_is_wider_on_a_gpu() -> None:
    assert rel_tol("cpu") == 1e-6 and rel_tol("cuda") == CUDA_REL_TOL == 1e-4
    assert reference_device("cpu") == "cpu"
    assert reference_device("cuda") == ("cpu" if NO_GPU else "cuda")


def test_batches_move_with_their_structure() -> None:
    Pair = collections.namedtuple("Pair", "a b")
    batch = {"x": [torch.ones(2), (torch.zeros(1), 3)], "p": Pair(torch.ones(1), "t")}
    moved = to_device(batch, torch.device("cpu"))
    assert isinstance(moved["x"], list) and isinstance(moved["x"][1], tuple)
    assert isinstance(moved["p"], Pair) and moved["p"].b == "t" and moved["x"][1][1] == 3
    assert torch.equal(moved["x"][0], torch.ones(2))


# --- without a GPU -----------------------------------------------------------------------------


@without_gpu
def test_fit_on_cuda_is_refused_on_a_ray_without_gpus(ps_pool: Any, fast_scenario: Any) -> None:
    before = len(ps_pool.gpu_workers)
    with pytest.raises(ConfigError) as info:
        tiny_run(fast_scenario, device="cuda", pool=ps_pool)
    assert one_line(info.value) == (
        "fit.device: device='cuda' needs a GPU per worker (2 workers); this Ray cluster has 0 GPUs"
    )
    assert len(ps_pool.gpu_workers) == before == 0  # no actor was started


@without_gpu
def test_a_grid_on_cuda_is_refused_on_a_ray_without_gpus(ps_pool: Any, fast_scenario: Any) -> None:
    case = ps.BenchCase(
        scenario=fast_scenario, model=zoo_model(**TINY_MODEL), data=zoo_batches(**TINY_MODEL)
    )
    with pytest.raises(ConfigError, match=r"^compare_strategies\.device: .* has 0 GPUs$"):
        ps.compare_strategies([case], ["tf-greedy"], device="cuda", pool=ps_pool)


@without_gpu
def test_a_replica_on_cuda_without_a_gpu_says_why() -> None:
    job = TrainingJob(
        model=zoo_model(**TINY_MODEL),
        data=zoo_batches(**TINY_MODEL),
        loss=torch.nn.functional.mse_loss,
        device="cuda",
    )
    with pytest.raises(UnstallError, match=r"^device='cuda': torch "):
        ModelReplica(job)


# --- the CPU unchanged -------------------------------------------------------------------------


def test_the_cpu_run_is_the_same_with_the_device_named(ps_pool: Any, fast_scenario: Any) -> None:
    plain = tiny_run(fast_scenario, check_reference=True, pool=ps_pool)
    named = tiny_run(fast_scenario, check_reference=True, pool=ps_pool, device="cpu")
    assert plain.device == named.device == "cpu"
    assert plain.params_match_reference is named.params_match_reference is True
    assert plain.reference_max_rel_err is not None and plain.reference_max_rel_err <= 1e-6
    for key, value in plain.state_dict.items():
        assert torch.equal(value, named.state_dict[key]), key  # bit for bit


# --- on a GPU ----------------------------------------------------------------------------------


@needs_gpu
def test_gpu_gradients_match_the_cpu_within_the_bound() -> None:
    model, data = zoo_model(**TINY_MODEL), zoo_batches(**TINY_MODEL)
    cpu = ModelReplica(TrainingJob(model=model, data=data, loss=torch.nn.functional.cross_entropy))
    gpu = ModelReplica(
        TrainingJob(model=model, data=data, loss=torch.nn.functional.cross_entropy, device="cuda")
    )
    batch = next(iter(data(0, 2)))
    loss_cpu, grads_cpu = cpu.gradients(batch, 0, 0)
    loss_gpu, grads_gpu = gpu.gradients(batch, 0, 0)
    assert abs(loss_cpu - loss_gpu) <= 1e-4 * abs(loss_cpu)
    for c, g in zip(grads_cpu, grads_gpu, strict=True):
        assert g.dtype == np.float32 and isinstance(g, np.ndarray)
        assert np.linalg.norm(c - g) <= CUDA_REL_TOL * max(float(np.linalg.norm(c)), 1e-12)
    assert all(b.device.type == "cpu" for b in gpu.buffers().values())


@needs_gpu
def test_five_iterations_on_cuda_match_the_reference(fast_scenario: Any, ray_session: Any) -> None:
    gpus = int(ray_session.cluster_resources().get("GPU", 0))
    workers = min(2, gpus)
    if workers < 1:
        pytest.skip("the Ray session sees no GPU")
    result = tiny_run(
        fast_scenario, device="cuda", workers=workers, iterations=5, check_reference=True
    )
    assert result.device == "cuda" and result.iterations == 5
    assert result.params_match_reference is True
    assert result.reference_max_rel_err is not None
    assert result.reference_max_rel_err <= CUDA_REL_TOL
    assert all(v.device.type == "cpu" for v in result.state_dict.values())

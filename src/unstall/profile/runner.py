"""The torch.distributed adapter: spawn the workers, time every run, return the raw timings.

One spawn serves all runs: rank 0 times the one-worker runs (compute, data) while the other
ranks wait at a barrier, then all ranks time the DDP runs (local, then over the emulated link;
the same DDP model, its hook state switched between them). gloo binds to 127.0.0.1 only.
Rank 0 writes the raw timings as JSON; :func:`run_workers` reads them back.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from unstall.errors import UnstallError
from unstall.profile import data as datafeed
from unstall.profile.config import ProfileConfig
from unstall.profile.link import HookState, timed_allreduce_hook
from unstall.workload import zoo

PHASES = ("data", "forward", "backward", "allreduce", "optimizer")


@dataclass(kw_only=True)
class RawTimings:
    """Per run: seconds per iteration of each round, and each phase's mean per round."""

    runs: dict[str, list[float]] = field(default_factory=dict)
    phases: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)
    emulated_delay_s: list[float] = field(default_factory=list)
    device_name: str = "cpu"


@dataclass
class _Loop:
    """What one timed run steps: a model, its optimizer, a batch feed, the hook state."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    feed: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    hook: HookState | None
    device: torch.device


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(
    loop: _Loop, index: int, loss_fn: nn.Module, compute_delay_s: float
) -> list[tuple[str, float, float]]:
    """One timed iteration; returns (phase, start, end) spans, the buckets' spans included."""
    marks = [time.perf_counter()]
    inputs, targets = loop.feed(index)
    inputs, targets = inputs.to(loop.device), targets.to(loop.device)
    _sync(loop.device)
    marks.append(time.perf_counter())
    if compute_delay_s > 0:
        time.sleep(compute_delay_s)
    loss = loss_fn(loop.model(inputs), targets)
    _sync(loop.device)
    marks.append(time.perf_counter())
    if loop.hook is not None:
        loop.hook.spans.clear()
    loss.backward()
    _sync(loop.device)
    marks.append(time.perf_counter())
    loop.optimizer.step()
    loop.optimizer.zero_grad(set_to_none=True)
    _sync(loop.device)
    marks.append(time.perf_counter())
    spans = [(p, marks[i], marks[i + 1]) for i, p in enumerate(("data", "forward", "backward"))]
    spans.append(("optimizer", marks[3], marks[4]))
    for start, end in loop.hook.spans if loop.hook is not None else []:
        spans.append(("allreduce", start, end))
    return spans


def _untimed_step(loop: _Loop, index: int, loss_fn: nn.Module, compute_delay_s: float) -> None:
    """The same iteration without the phase timers, for measuring the timers' overhead."""
    inputs, targets = loop.feed(index)
    if compute_delay_s > 0:
        time.sleep(compute_delay_s)
    loss_fn(loop.model(inputs.to(loop.device)), targets.to(loop.device)).backward()
    loop.optimizer.step()
    loop.optimizer.zero_grad(set_to_none=True)
    _sync(loop.device)


def phase_totals(spans: list[tuple[str, float, float]]) -> dict[str, float]:
    totals = dict.fromkeys(PHASES, 0.0)
    comm = [(s, e) for p, s, e in spans if p == "allreduce"]
    for phase, start, end in spans:
        if phase != "allreduce":
            totals[phase] += end - start
    if comm:  # buckets overlap backward: report the span from the first start to the last end
        totals["allreduce"] = max(e for _, e in comm) - min(s for s, _ in comm)
    return totals


def _time_run(
    loop: _Loop, config: ProfileConfig, timed: bool = True
) -> tuple[float, dict[str, float], list[tuple[str, float, float]]]:
    """Warm-up, then ``iterations`` timed iterations: seconds per iteration, phase means, and
    the last iteration's spans."""
    loss_fn = zoo.loss_fn(config.model)
    delay = config.delays.compute_s
    for index in range(config.warmup):
        _untimed_step(loop, index, loss_fn, delay)
    if loop.hook is not None:
        loop.hook.delay_total_s = 0.0  # the emulated link's delay of the timed iterations only
    totals = dict.fromkeys(PHASES, 0.0)
    spans: list[tuple[str, float, float]] = []
    started = time.perf_counter()
    for index in range(config.warmup, config.warmup + config.iterations):
        if timed:
            spans = _step(loop, index, loss_fn, delay)
            for phase, seconds in phase_totals(spans).items():
                totals[phase] += seconds
        else:
            _untimed_step(loop, index, loss_fn, delay)
    per_iteration = (time.perf_counter() - started) / config.iterations
    return per_iteration, {p: t / config.iterations for p, t in totals.items()}, spans


def _synthetic_feed(
    config: ProfileConfig, rank: int
) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """A fixed pool of synthetic batches in memory (no input pipeline at all)."""
    generator = torch.Generator().manual_seed(config.seed * 1000 + rank)
    pool = [
        zoo.example_batch(config.model, config.batch, generator=generator, **config.zoo_options())
        for _ in range(4)
    ]
    return lambda index: pool[index % len(pool)]


def _solo_feeds(
    config: ProfileConfig,
) -> dict[str, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    """The one-worker runs' batch feeds: synthetic, and the data runs when a dataset is given."""
    synthetic = _synthetic_feed(config, 0)
    feeds = {"compute": synthetic, "compute_untimed": synthetic}
    if config.data_dir is not None:
        paths = datafeed.list_dataset(config.data_dir)
        rng = np.random.default_rng(config.seed)
        delays = config.delays
        feeds["cold"] = datafeed.file_feed(
            paths, config.batch, rng, fetch_delay_s=delays.fetch_s, prep_delay_s=delays.prep_s
        )
        feeds["warm"] = datafeed.file_feed(paths, config.batch, rng, prep_delay_s=delays.prep_s)
        feeds["cached"] = datafeed.cached_feed(paths, config.batch)
    return feeds


def _record(raw: RawTimings, name: str, seconds: float, phases: dict[str, float]) -> None:
    raw.runs.setdefault(name, []).append(seconds)
    for phase, value in phases.items():
        raw.phases.setdefault(name, {}).setdefault(phase, []).append(value)


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _solo_round(config: ProfileConfig, raw: RawTimings, solo: _Loop, feeds: dict[str, Any]) -> None:
    """Rank 0 alone: compute (and its untimed twin), then cold, warm and cached data."""
    for name in config.run_names():
        if name in ("local", "network"):
            continue
        if name == "cold":
            datafeed.drop_page_cache(datafeed.list_dataset(config.data_dir))  # type: ignore[arg-type]
        solo.feed = feeds[name]
        seconds, phases, _ = _time_run(solo, config, timed=name != "compute_untimed")
        _record(raw, name, seconds, phases)


def _ddp_round(config: ProfileConfig, raw: RawTimings | None, ddp: _Loop, last: bool) -> None:
    """All ranks: the local run, then the run over the emulated link."""
    assert ddp.hook is not None
    for name in ("local", "network"):
        if name not in config.run_names():
            continue
        ddp.hook.link = config.network if name == "network" else None
        seconds, phases, spans = _time_run(ddp, config)
        if raw is not None:
            _record(raw, name, seconds, phases)
            if name == "network":
                raw.emulated_delay_s.append(ddp.hook.delay_total_s / config.iterations)
            if last:
                raw.trace = [{"name": p, "start_s": s, "end_s": e} for p, s, e in spans]


def _worker(rank: int, config: ProfileConfig, port: int, out_path: str) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    threads = config.threads or max(1, (os.cpu_count() or 1) // config.workers)
    torch.set_num_threads(threads)
    device = torch.device("cuda", rank) if config.device == "cuda" else torch.device("cpu")
    dist.init_process_group(
        config.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=config.workers
    )
    try:
        _worker_rounds(rank, config, device, out_path)
    finally:
        dist.destroy_process_group()


def _worker_rounds(rank: int, config: ProfileConfig, device: torch.device, out_path: str) -> None:
    from torch.nn.parallel import DistributedDataParallel

    options = config.zoo_options()
    solo_model = zoo.build(config.model, **options).to(device)
    solo = _Loop(solo_model, _optimizer(solo_model), _synthetic_feed(config, 0), None, device)
    ddp_model = DistributedDataParallel(
        zoo.build(config.model, **options).to(device),
        device_ids=[rank] if device.type == "cuda" else None,
        bucket_cap_mb=config.bucket_mb,
    )
    hook = HookState(workers=config.workers, extra_delay_s=config.delays.allreduce_s)
    ddp_model.register_comm_hook(hook, timed_allreduce_hook)
    ddp = _Loop(ddp_model, _optimizer(ddp_model), _synthetic_feed(config, rank), hook, device)
    raw = RawTimings(
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    )
    feeds = _solo_feeds(config) if rank == 0 else {}
    for round_index in range(config.repeats):
        if rank == 0:
            _solo_round(config, raw, solo, feeds)
        dist.barrier()
        _ddp_round(config, raw if rank == 0 else None, ddp, round_index == config.repeats - 1)
        dist.barrier()
    if rank == 0:
        Path(out_path).write_text(json.dumps(raw.__dict__), encoding="utf-8")


def run_workers(config: ProfileConfig) -> RawTimings:
    """Spawn ``config.workers`` processes, run every round, return rank 0's raw timings."""
    import torch.multiprocessing as mp

    if config.device == "cuda" and torch.cuda.device_count() < config.workers:
        raise UnstallError(
            f"--workers {config.workers} needs as many GPUs; found {torch.cuda.device_count()}"
        )
    if config.data_dir is not None:
        datafeed.list_dataset(config.data_dir)  # a missing dataset fails here, not in a worker
    with tempfile.TemporaryDirectory(prefix="unstall-profile-") as tmp:
        out_path = str(Path(tmp) / "raw.json")
        try:
            mp.spawn(
                _worker, args=(config, _free_port(), out_path), nprocs=config.workers, join=True
            )
        except Exception as exc:  # a worker's failure arrives as ProcessRaisedException
            raise UnstallError(
                f"profiling workers failed: {str(exc).strip().splitlines()[-1]}"
            ) from exc
        return RawTimings(**json.loads(Path(out_path).read_text(encoding="utf-8")))

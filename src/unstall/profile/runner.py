"""The torch.distributed adapter: spawn the workers, time every run, return the raw timings.

One spawn serves all runs: rank 0 times the one-worker runs (compute, data) while the other
ranks wait at a barrier, then all ranks time the DDP runs (local, then over the emulated link;
the same DDP model, its hook state switched between them). gloo binds to 127.0.0.1 only.
Rank 0 writes the raw timings as JSON; :func:`run_workers` reads them back.

Under torchrun (see :mod:`unstall.profile.launch`) this process is one of the workers: it joins
the launched group (``env://``) instead of spawning, and rank 0's timings are broadcast to every
rank. On several hosts the local run is DDP within each host and the network run DDP across
all hosts, over the real network.

The overhead runs (``compute_untimed``, ``local_untimed``: the same loops without the phase
timers) are timed beside their timed twins in every round, in alternating order (timed first in
even rounds, untimed first in odd ones), so that drift on a shared machine cancels in the pairs.
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
from unstall.profile.launch import TorchrunLaunch, torchrun_launch
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


def _paired_order(names: list[str], round_index: int) -> list[str]:
    """``names`` with each timed run and its untimed twin swapped in odd rounds (ABBA)."""
    order = list(names)
    if round_index % 2 == 1:
        for timed in [n for n in order if f"{n}_untimed" in order]:
            i, j = order.index(timed), order.index(f"{timed}_untimed")
            order[i], order[j] = order[j], order[i]
    return order


def _solo_round(
    config: ProfileConfig, raw: RawTimings, solo: _Loop, feeds: dict[str, Any], round_index: int
) -> None:
    """Rank 0 alone: compute (and its untimed twin), then cold, warm and cached data."""
    for name in _paired_order(config.run_names(), round_index):
        if name in DDP_RUNS:
            continue
        if name == "cold":
            datafeed.drop_page_cache(datafeed.list_dataset(config.data_dir))  # type: ignore[arg-type]
        solo.feed = feeds[name]
        seconds, phases, _ = _time_run(solo, config, timed=not name.endswith("_untimed"))
        _record(raw, name, seconds, phases)


DDP_RUNS = ("local", "local_untimed", "network")


def _ddp_round(
    config: ProfileConfig,
    raw: RawTimings | None,
    loops: dict[str, _Loop],
    round_index: int,
) -> None:
    """All ranks: the local run (and its untimed twin), then the run over the network (the
    emulated link on one host; the real network across hosts)."""
    last = round_index == config.repeats - 1
    for name in _paired_order([n for n in config.run_names() if n in DDP_RUNS], round_index):
        ddp = loops[name]
        assert ddp.hook is not None
        ddp.hook.link = config.network if name == "network" else None
        ddp.hook.record_spans = not name.endswith("_untimed")
        seconds, phases, spans = _time_run(ddp, config, timed=ddp.hook.record_spans)
        if raw is not None:
            _record(raw, name, seconds, phases)
            if name == "network" and config.network is not None:
                raw.emulated_delay_s.append(ddp.hook.delay_total_s / config.iterations)
            if last and not name.endswith("_untimed"):  # the network run comes last
                raw.trace = [{"name": p, "start_s": s, "end_s": e} for p, s, e in spans]


def _join(config: ProfileConfig, rank: int, init_method: str) -> torch.device:
    threads = config.threads or max(1, (os.cpu_count() or 1) // config.workers_per_node)
    torch.set_num_threads(threads)
    local_rank = rank % config.workers_per_node
    device = torch.device("cpu")
    if config.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group(
        config.backend, init_method=init_method, rank=rank, world_size=config.workers
    )
    return device


def _worker(rank: int, config: ProfileConfig, port: int, out_path: str) -> None:
    """A spawned worker on this host; rank 0 writes the raw timings to ``out_path``."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    device = _join(config, rank, f"tcp://127.0.0.1:{port}")
    try:
        raw = _worker_rounds(rank, config, device)
        if rank == 0:
            Path(out_path).write_text(json.dumps(raw.__dict__), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def _ddp_loop(
    config: ProfileConfig, rank: int, device: torch.device, group: Any, workers: int
) -> _Loop:
    """A DDP copy of the model on ``group`` (``None``: all workers), its comm hook attached."""
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(
        zoo.build(config.model, **config.zoo_options()).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=config.bucket_mb,
        process_group=group,
    )
    hook = HookState(workers=workers, extra_delay_s=config.delays.allreduce_s)
    model.register_comm_hook(hook, timed_allreduce_hook)
    return _Loop(model, _optimizer(model), _synthetic_feed(config, rank), hook, device)


def _ddp_loops(config: ProfileConfig, rank: int, device: torch.device) -> dict[str, _Loop]:
    """The loop of each DDP run: one model on one host (the hook switches the link on and
    off); on several hosts one model per host for the local runs and one across all."""
    if config.nodes == 1:
        shared = _ddp_loop(config, rank, device, None, config.workers)
        return dict.fromkeys(DDP_RUNS, shared)
    host_group, _ = dist.new_subgroups(group_size=config.workers_per_node)
    local = _ddp_loop(config, rank, device, host_group, config.workers_per_node)
    return {
        "local": local,
        "local_untimed": local,
        "network": _ddp_loop(config, rank, device, None, config.workers),
    }


def _worker_rounds(rank: int, config: ProfileConfig, device: torch.device) -> RawTimings:
    """Every round of every run; rank 0's timings (the other ranks' are empty)."""
    solo_model = zoo.build(config.model, **config.zoo_options()).to(device)
    solo = _Loop(solo_model, _optimizer(solo_model), _synthetic_feed(config, 0), None, device)
    loops = _ddp_loops(config, rank, device)
    raw = RawTimings(
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    )
    feeds = _solo_feeds(config) if rank == 0 else {}
    for round_index in range(config.repeats):
        if rank == 0:
            _solo_round(config, raw, solo, feeds, round_index)
        dist.barrier()
        _ddp_round(config, raw if rank == 0 else None, loops, round_index)
        dist.barrier()
    return raw


def _run_under_torchrun(config: ProfileConfig, launch: TorchrunLaunch) -> RawTimings:
    """This process is worker ``launch.rank``: join the group, run, share rank 0's timings."""
    device = _join(config, launch.rank, "env://")
    try:
        raw = _worker_rounds(launch.rank, config, device)
        shared: list[Any] = [raw.__dict__ if launch.rank == 0 else None]
        dist.broadcast_object_list(shared, src=0, device=device)
        return RawTimings(**shared[0])
    finally:
        dist.destroy_process_group()


def run_workers(config: ProfileConfig) -> RawTimings:
    """Spawn ``config.workers`` processes, run every round, return rank 0's raw timings.

    Under torchrun the launched processes are the workers: each runs its part and returns rank
    0's timings (``config.workers`` must then be torchrun's world size)."""
    import torch.multiprocessing as mp

    if config.data_dir is not None:
        datafeed.list_dataset(config.data_dir)  # a missing dataset fails here, not in a worker
    launch = torchrun_launch(os.environ)
    if launch is not None:
        if (launch.world_size, launch.nodes) != (config.workers, config.nodes):
            raise UnstallError(
                f"torchrun started {launch.world_size} workers on {launch.nodes} hosts; the"
                f" config wants {config.workers} on {config.nodes}"
            )
        return _run_under_torchrun(config, launch)
    if config.nodes > 1:
        raise UnstallError("workers on several hosts need torchrun (see unstall profile run)")
    if config.device == "cuda" and torch.cuda.device_count() < config.workers:
        raise UnstallError(
            f"--workers {config.workers} needs as many GPUs; found {torch.cuda.device_count()}"
        )
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

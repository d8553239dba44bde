"""The torch.distributed adapter: spawn the workers, time every run, return the raw timings.

The workers train a :class:`~unstall.profile.job.ProfiledJob` (spawned workers get it as a
cloudpickle blob). One spawn serves all runs: rank 0 times the one-worker runs (compute, data)
while the other ranks wait at a barrier, then all ranks time the DDP runs (local, then over the
emulated link; the same DDP model, its hook state switched between them). gloo and the
rendezvous store bind to 127.0.0.1 only.
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

import gc
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from unstall.errors import ConfigError, UnstallError
from unstall.profile.comm_hook import HookState, timed_allreduce_hook
from unstall.profile.config import ProfileConfig, run_names
from unstall.profile.failures import (
    any_started,
    check_script_runs_again,
    error_path,
    mark_started,
    rerun_script,
    spawn_guard_error,
    worker_error,
    write_error,
)
from unstall.profile.images import BatchFeed
from unstall.profile.job import (
    ProfiledJob,
    build_model,
    pack,
    unpack,
)
from unstall.profile.launch import TorchrunLaunch, torchrun_launch
from unstall.profile.spawning import spawn_workers
from unstall.profile.steps import Loop, Spans, check_step, time_run
from unstall.usercode import where_defined


@dataclass(kw_only=True)
class RawTimings:
    """Per run: seconds per iteration of each round, and each phase's mean per round; the
    local batch (samples per worker) of the in-memory batches; the device's name (the CPU's
    model, or CUDA's name of the GPU) and, on a CPU, its dense fp32 matmul rate."""

    runs: dict[str, list[float]] = field(default_factory=dict)
    phases: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # Every rank's timed iterations: rank, run, round, iteration, phase name, start and end
    # (perf_counter seconds: one clock for all ranks of a host).
    trace: list[dict[str, Any]] = field(default_factory=list)
    emulated_delay_s: list[float] = field(default_factory=list)
    device_name: str = "cpu"
    device_tflops: float | None = None
    batch: int = 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Log:
    """What one rank keeps of its runs besides the timings: every timed iteration's spans (for
    the trace), and a call after each run (the progress bar's; rank 0 only)."""

    rank: int
    spans: list[dict[str, Any]] = field(default_factory=list)
    on_run: Callable[[str], None] | None = None

    def ran(self, run: str, round_index: int, iterations: list[Spans]) -> None:
        for iteration, spans in enumerate(iterations):
            self.spans += [
                {"rank": self.rank, "run": run, "round": round_index, "iteration": iteration}
                | {"name": phase, "start_s": start, "end_s": end}
                for phase, start, end in spans
            ]
        if self.on_run is not None:
            self.on_run(run)


def _solo_feeds(config: ProfileConfig, job: ProfiledJob) -> dict[str, BatchFeed]:
    """The one-worker runs' batch feeds: in memory for compute, and the source's data runs."""
    memory = job.data.memory_feed(0, 1, config.seed)
    feeds = {"compute": memory, "compute_untimed": memory}
    feeds |= job.data.data_feeds(seed=config.seed, delays=config.delays)
    return feeds


def cpu_name() -> str:
    """This machine's CPU model as the kernel names it (``/proc/cpuinfo``), else the platform's."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


# A square fp32 matmul large enough to reach the CPU's dense rate, small enough to take well
# under a second on a few cores; the fastest of a few repeats is the rate.
MATMUL_SIZE = 1024
MATMUL_REPEATS = 3


def matmul_tflops(size: int = MATMUL_SIZE, repeats: int = MATMUL_REPEATS) -> float:
    """The dense fp32 matmul rate of this CPU, in TFLOP/s, with this process's torch threads:
    the rate a CPU profile is converted to a GPU with (``unstall.net.cpu_to_gpu_factor``)."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    torch.mm(a, b)  # warm-up: thread pool and caches
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2.0 * size**3 / best / 1e12


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
    config: ProfileConfig,
    raw: RawTimings,
    solo: Loop,
    job: ProfiledJob,
    feeds: dict[str, BatchFeed],
    round_index: int,
    log: _Log,
) -> None:
    """Rank 0 alone: compute (and its untimed twin), then the data runs (cold, warm, cached)."""
    for name in _paired_order(run_names(config, job.data.data_runs), round_index):
        if name in DDP_RUNS:
            continue
        job.data.before_run(name)
        solo.feed = feeds[name]
        seconds, phases, spans = time_run(solo, config, timed=not name.endswith("_untimed"))
        close = getattr(feeds[name], "close", None)
        if close is not None:  # a DataLoader's workers: stopped while other runs are timed
            close()
        _record(raw, name, seconds, phases)
        log.ran(name, round_index, spans)


DDP_RUNS = ("local", "local_untimed", "network")


def _ddp_round(
    config: ProfileConfig,
    raw: RawTimings | None,
    loops: dict[str, Loop],
    round_index: int,
    log: _Log,
) -> None:
    """All ranks: the local run (and its untimed twin), then the run over the network (the
    emulated link on one host; the real network across hosts)."""
    for name in _paired_order([n for n in run_names(config) if n in DDP_RUNS], round_index):
        ddp = loops[name]
        assert ddp.hook is not None
        ddp.hook.link = config.network if name == "network" else None
        ddp.hook.record_spans = not name.endswith("_untimed")
        seconds, phases, spans = time_run(ddp, config, timed=ddp.hook.record_spans)
        if raw is not None:
            _record(raw, name, seconds, phases)
            if name == "network" and config.network is not None:
                raw.emulated_delay_s.append(ddp.hook.delay_total_s / config.iterations)
        log.ran(name, round_index, spans)


def _loopback_store(config: ProfileConfig, rank: int, port: int) -> dist.TCPStore:
    """The rendezvous of workers spawned on this host, listening on 127.0.0.1 only.

    Given ``tcp://127.0.0.1:PORT``, torch's store still listens on every interface (``*:PORT``),
    open to the whole network for the length of the run; rank 0 therefore binds the socket to
    loopback itself and hands it to the store.
    """
    timeout = timedelta(seconds=config.timeout_s)
    if rank != 0:
        return dist.TCPStore("127.0.0.1", port, config.workers, False, timeout)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    store = dist.TCPStore(
        "127.0.0.1", port, config.workers, True, timeout, master_listen_fd=listener.fileno()
    )
    # The store owns the listening socket from here on; this object must not close it.
    listener.detach()
    return store


def _join(
    config: ProfileConfig,
    rank: int,
    *,
    init_method: str = "env://",
    store: dist.Store | None = None,
) -> torch.device:
    threads = config.threads or max(1, (os.cpu_count() or 1) // config.workers_per_node)
    torch.set_num_threads(threads)
    local_rank = rank % config.workers_per_node
    device = torch.device("cpu")
    if config.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group(
        config.backend,
        init_method=None if store is not None else init_method,
        store=store,
        rank=rank,
        world_size=config.workers,
        timeout=timedelta(seconds=config.timeout_s),
    )
    return device


def _worker(rank: int, config: ProfileConfig, blob: bytes, port: int, out_path: str) -> None:
    """A spawned worker on this host; rank 0 writes the raw timings to ``out_path``. A worker
    that fails writes its error to ``out_path.error.RANK`` for the parent to report
    (:mod:`unstall.profile.failures`)."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    # spawn leaves "spawn" the default start method here. A DataLoader with workers (the user's
    # data function's, an image folder's) starts them as in the user's own training, with the
    # platform's default (fork on Linux): spawn would pickle a Dataset class from the user's
    # file, which no new process can import ("Can't pickle <class 'unstall_user_...'>").
    multiprocessing.set_start_method(None, force=True)
    try:
        mark_started(out_path, rank)
        job = unpack(blob)
        device = _join(config, rank, store=_loopback_store(config, rank, port))
        try:
            raw = _worker_rounds(rank, config, job, device, on_run=_progress_file(out_path))
            if rank == 0:
                Path(out_path).write_text(json.dumps(raw.__dict__), encoding="utf-8")
        except Exception as exc:
            # Written before the group goes down: the peers fail next ("Connection closed by
            # peer"), and the parent terminates this worker as soon as one of them has exited.
            write_error(out_path, rank, exc)
            raise
        finally:
            # DDP models sit in reference cycles (their hooks): freed by the cycle collector,
            # maybe only at exit, after the group is gone, where their reducer's threads end
            # in "terminate called without an active exception" (SIGABRT). Free them first.
            gc.collect()
            dist.destroy_process_group()
    except Exception as exc:
        if not error_path(out_path, rank).exists():  # failed outside the group's runs
            write_error(out_path, rank, exc)
        raise
    # Done, and rank 0's timings are on disk: leave without the interpreter's teardown. Under
    # load a worker still died with SIGABRT at exit now and then after the collection above
    # (seen twice since, in full test runs), from native threads of torch.distributed or gloo
    # that outlive the objects they serve when modules are torn down; nothing is left to run
    # or write at that point.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _with_origins(message: str, job: ProfiledJob) -> str:
    """``message`` from a worker with each user function's file put back: code sent by value
    reaches a worker without its file name (cloudpickle writes ``<dynamic-code>``)."""
    functions = [job.model, job.loss, getattr(job.data, "fn", None)]
    functions.append(getattr(job.data, "make_batch", None))
    for fn in functions:
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is None:
            continue
        name = getattr(fn, "__qualname__", "")
        remote = f"{name} (<dynamic-code>:{code.co_firstlineno})"
        message = message.replace(remote, where_defined(fn))
    return message


def _ddp_loop(
    config: ProfileConfig,
    job: ProfiledJob,
    rank: int,
    device: torch.device,
    group: Any,
    workers: int,
) -> Loop:
    """A DDP copy of the model on ``group`` (``None``: all workers), its comm hook attached."""
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(
        build_model(job.model).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=config.bucket_mb,
        process_group=group,
    )
    hook = HookState(workers=workers, extra_delay_s=config.delays.allreduce_s)
    model.register_comm_hook(hook, timed_allreduce_hook)
    feed = job.data.memory_feed(rank, config.workers, config.seed)
    return Loop(model, _optimizer(model), feed, job.loss, hook, device, job.model)


def _ddp_loops(
    config: ProfileConfig, job: ProfiledJob, rank: int, device: torch.device
) -> dict[str, Loop]:
    """The loop of each DDP run: one model on one host (the hook switches the link on and
    off); on several hosts one model per host for the local runs and one across all."""
    if config.nodes == 1:
        shared = _ddp_loop(config, job, rank, device, None, config.workers)
        return dict.fromkeys(DDP_RUNS, shared)
    host_group, _ = dist.new_subgroups(group_size=config.workers_per_node)
    local = _ddp_loop(config, job, rank, device, host_group, config.workers_per_node)
    return {
        "local": local,
        "local_untimed": local,
        "network": _ddp_loop(config, job, rank, device, None, config.workers),
    }


def _progress_file(out_path: str) -> Callable[[str], None]:
    """The progress call of a spawned rank 0: a line per run appended to ``out_path.progress``,
    which the parent counts (:func:`~unstall.profile.spawning.spawn_workers`)."""

    def append(run: str) -> None:
        with open(f"{out_path}.progress", "a", encoding="utf-8") as handle:
            handle.write(run + "\n")

    return append


def _gather_spans(log: _Log) -> list[dict[str, Any]]:
    """Every rank's spans, on every rank (rank 0 keeps them in its timings)."""
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, log.spans)
    return [span for spans in everyone for span in spans]


def _worker_rounds(
    rank: int,
    config: ProfileConfig,
    job: ProfiledJob,
    device: torch.device,
    on_run: Callable[[str], None] | None = None,
) -> RawTimings:
    """Every round of every run; rank 0's timings (the other ranks' are empty) with every rank's
    spans. Rank 0 also steps the one-worker runs, on a model of its own, and calls ``on_run``
    after each run."""
    on_gpu = device.type == "cuda"
    raw = RawTimings(device_name=torch.cuda.get_device_name(device) if on_gpu else cpu_name())
    feeds: dict[str, BatchFeed] = {}
    solo: Loop | None = None
    if rank == 0:
        solo_model = build_model(job.model).to(device)
        feeds = _solo_feeds(config, job)
        optimizer = _optimizer(solo_model)
        solo = Loop(solo_model, optimizer, feeds["compute"], job.loss, None, device, job.model)
        raw.batch = check_step(solo)
        raw.device_tflops = None if on_gpu else matmul_tflops()
    ddp = any(name in DDP_RUNS for name in run_names(config))
    loops = _ddp_loops(config, job, rank, device) if ddp else {}
    log = _Log(rank=rank, on_run=on_run if rank == 0 else None)
    for round_index in range(config.repeats):
        if solo is not None:
            _solo_round(config, raw, solo, job, feeds, round_index, log)
        dist.barrier()
        _ddp_round(config, raw if rank == 0 else None, loops, round_index, log)
        dist.barrier()
    raw.trace = _gather_spans(log)
    return raw


def _run_under_torchrun(
    config: ProfileConfig,
    job: ProfiledJob,
    launch: TorchrunLaunch,
    on_run: Callable[[str], None] | None,
) -> RawTimings:
    """This process is worker ``launch.rank``: join the group, run, share rank 0's timings."""
    device = _join(config, launch.rank)  # torchrun's address (MASTER_ADDR): several hosts
    try:
        raw = _worker_rounds(launch.rank, config, job, device, on_run=on_run)
        shared: list[Any] = [raw.__dict__ if launch.rank == 0 else None]
        dist.broadcast_object_list(shared, src=0, device=device)
        return RawTimings(**shared[0])
    finally:
        dist.destroy_process_group()


def run_workers(
    config: ProfileConfig, job: ProfiledJob, on_run: Callable[[str], None] | None = None
) -> RawTimings:
    """Spawn ``config.workers`` processes training ``job``, run every round, return rank 0's
    raw timings; ``on_run(name)`` follows each run rank 0 finishes (a progress bar).

    Under torchrun the launched processes are the workers: each runs its part and returns rank
    0's timings (``config.workers`` must then be torchrun's world size)."""
    launch = torchrun_launch(os.environ)
    if launch is not None:
        if (launch.world_size, launch.nodes) != (config.workers, config.nodes):
            raise UnstallError(
                f"torchrun started {launch.world_size} workers on {launch.nodes} hosts; the"
                f" config wants {config.workers} on {config.nodes}"
            )
        return _run_under_torchrun(config, job, launch, on_run)
    if config.nodes > 1:
        raise UnstallError("workers on several hosts need torchrun (see unstall profile run)")
    if config.device == "cuda" and torch.cuda.device_count() < config.workers:
        raise ConfigError(
            "ProfileConfig",
            "workers",
            f"{config.workers} workers on cuda need a GPU each; found {torch.cuda.device_count()}",
        )
    check_script_runs_again()  # (a worker still starting was refused by measure_stalls)
    blob = pack(job)
    with tempfile.TemporaryDirectory(prefix="unstall-profile-") as tmp:
        out_path = str(Path(tmp) / "raw.json")
        try:
            args = (config, blob, _free_port(), out_path)
            spawn_workers(_worker, args, config.workers, Path(f"{out_path}.progress"), on_run)
        except Exception as exc:  # a worker's failure arrives as ProcessRaisedException
            why = worker_error(out_path)
            if why is None and _died_starting(exc, out_path):
                raise spawn_guard_error(rerun_script()) from exc
            why = why or str(exc).strip().splitlines()[-1]
            raise UnstallError(f"profiling workers failed: {_with_origins(why, job)}") from exc
        return RawTimings(**json.loads(Path(out_path).read_text(encoding="utf-8")))


def _died_starting(exc: BaseException, out_path: str) -> bool:
    """Whether the workers exited while spawn was starting them, before any ran unstall's code:
    spawn ran the calling script again in each (see :mod:`unstall.profile.failures`)."""
    from torch.multiprocessing.spawn import ProcessExitedException

    return (
        isinstance(exc, ProcessExitedException)
        and rerun_script() is not None
        and not any_started(out_path)
    )

"""Parameter-server overhead: push/pull throughput with no emulated limit, against a raw Ray
actor round trip of the same bytes on the same machine (the engine's own limit).

PS side: ``unstall.ps`` trains an MLP of about ``--mb`` MB of float32 parameters (two square
layers, batch of 1 so that compute is small) with one worker and S servers whose links and
compute are unlimited (10^15 bytes/s, no latency), split evenly by ``oracle``. Per iteration the
worker pushes every gradient and gets every new parameter back: one push-pull call per server,
or, for a server owning more than PIECE_MB, one per piece, pipelined (each piece stepped as soon
as it is in and sent back while the next travel); a piece above the model's size gives the
unpipelined exchange. A server steps a segment of >= 1 M elements with STEP_THREADS threads,
each on a part (``--variants PIECE_MB:STEP_THREADS``). "PS" is ``(pushed + pulled bytes) /
push-pull seconds`` as the worker measures them, which includes the servers' SGD step (summing,
momentum, update: one pass of torch's fused kernel) and loading the parameters into the
model. "transport" leaves out the step (the push-pull less the longest wait of a piece for its
pushes and step, as the server reports it; with pieces the other pieces' steps overlap the
transfers and stay in): the PS's own push and pull machinery. "iteration" is the same bytes
over the whole iteration less the worker's compute: the coordinator's barrier and bookkeeping
on top.

Raw side: an actor sends one array of the same bytes to each of S actors and gets one back from
each, one call per callee (``ray.get`` of S calls in flight together), from inside an actor as
the PS worker is, with actors kept across rounds as the PS's are. "raw parts": the same with the
bytes cut both ways as the PS cuts its pushes (``wire_parts``: buffers of at most 1 MiB, which
Ray copies without starting copy threads), the engine's limit for that wire format. Medians over
``--iterations`` (after warm-up), the best of ``--rounds`` alternated rounds.

``--step-only`` times a server's step alone (torch's fused kernel, and numpy's four ufuncs it
replaced) against a ``memcpy`` of the same bytes, without Ray, and the step while another thread
copies as many bytes (how much of the copy hides behind the step: what pipelining can win).
``--faults`` counts the page faults of an object-store put and of each side's actors per iteration:
a process writing or reading an object in pages it has not mapped yet pays one fault per 4 KiB page
written (or per 64 KiB read), which on this virtual machine costs as much as the copy itself and
comes and goes with the object store's allocation history (the main noise between rounds).

    .venv/bin/python benchmarks/ps_overhead.py [--mb 4 16 64] [--servers 1 4] [--rounds 5]
        [--variants 256:1 256:2 8:1] [--json OUT]
    .venv/bin/python benchmarks/ps_overhead.py --step-only --mb 4 16 64
    .venv/bin/python benchmarks/ps_overhead.py --faults --mb 4 16 32 64
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from unstall import ps
from unstall.net.link import Link

# private on purpose: this benchmark times the server's own machinery (its wire format, its
# step, its reply timing) against raw Ray, piece by piece
from unstall.ps.chunks import wire_parts
from unstall.ps.optim import sgd_momentum_step
from unstall.ps.server import PushPullTiming, step_pool


def unlimited(servers: int) -> ps.Scenario:
    """``servers`` servers at 10^15 bytes/s (16 MB in 16 ns), i.e. no limit, but equal finite
    speeds for the oracle."""
    base = ps.ServerSpec(link=Link.from_mb_s(1e9, latency_ms=0.0), apply_mb_s=1e9)
    return ps.Scenario(name="unlimited", servers=servers, base=base)


@ray.remote(num_cpus=0)
class Callee:
    def __init__(self, nbytes: int) -> None:
        self.reply = np.ones(nbytes // 4, np.float32)

    def roundtrip(self, data: np.ndarray) -> np.ndarray:
        return self.reply

    def roundtrip_parts(self, data: list[np.ndarray]) -> list[np.ndarray]:
        return wire_parts([self.reply])


@ray.remote(num_cpus=0)
class Caller:
    def run(self, callees: list[Any], nbytes: int, iterations: int, parts: bool) -> list[float]:
        """Round trips of one array per callee, or (``parts``) of the same bytes cut as the
        PS cuts its pushes (:func:`~unstall.ps.chunks.wire_parts`), both ways."""
        data = [np.ones(nbytes // 4 // len(callees), np.float32) for _ in callees]
        times = []
        for _ in range(iterations):
            start = time.perf_counter()
            calls = [
                c.roundtrip_parts.remote(wire_parts([d])) if parts else c.roundtrip.remote(d)
                for c, d in zip(callees, data, strict=True)
            ]
            ray.get(calls)
            times.append(time.perf_counter() - start)
        return times


# The PS server's machinery that ``--call-shapes`` switches on one piece at a time (the names
# are the features a shaped call takes): a task per call (as ``PSServer._tracked`` makes), the
# two waits on the emulated links (zero-length here, as with unlimited links), the condition
# variable a push-pull waits on for the step, the timing record in the reply.
CALL_FEATURES = ("task", "link", "condition", "timing")


@ray.remote(num_cpus=0)
class ShapedCallee:
    """Answers a call shaped like a push-pull (gradient parts in, the parameters back as one
    array), with any of :data:`CALL_FEATURES` of the PS server's machinery, and no step."""

    def __init__(self, nbytes: int) -> None:
        self.reply = np.ones(nbytes // 4, np.float32)
        self.changed = asyncio.Condition()
        self.done: set[int] = set()

    async def call(self, iteration: int, features: tuple[str, ...], parts: list[np.ndarray]) -> Any:
        if "task" in features:
            return await asyncio.ensure_future(self._serve(iteration, features))
        return await self._serve(iteration, features)

    async def _serve(self, iteration: int, features: tuple[str, ...]) -> Any:
        if "link" in features:
            await asyncio.sleep(1e-9)
        if "condition" in features:
            async with self.changed:
                self.done.add(iteration)
                self.changed.notify_all()
            async with self.changed:
                await self.changed.wait_for(lambda: iteration in self.done)
        if "link" in features:
            await asyncio.sleep(1e-9)
        if "timing" in features:
            return self.reply, PushPullTiming(ingress_s=0.0, wait_s=0.0, egress_s=0.0)
        return self.reply


@ray.remote(num_cpus=0)
class SyncShapedCallee:
    """The same call answered by a plain (synchronous) actor: what raw Ray costs for it."""

    def __init__(self, nbytes: int) -> None:
        self.reply = np.ones(nbytes // 4, np.float32)

    def call(self, iteration: int, features: tuple[str, ...], parts: list[np.ndarray]) -> Any:
        return self.reply


@ray.remote(num_cpus=0, max_concurrency=2)  # type: ignore[call-overload]  # as PSWorker
class ShapedCaller:
    def run(
        self, callee: Any, nbytes: int, iterations: int, features: tuple[str, ...], as_worker: bool
    ) -> list[float]:
        """Round trips of ``nbytes`` each way, cut as the PS cuts its pushes; ``as_worker``:
        a freshly written gradient buffer each time (backward allocates its gradients anew)
        and the reply kept until the next one (the model aliases its parameters), waited for
        with ``ray.wait`` then fetched, as the PS worker does."""
        data = np.ones(nbytes // 4, np.float32)
        held, times = None, []
        for i in range(iterations):
            if as_worker:
                data = np.empty(nbytes // 4, np.float32)
                data.fill(1.0)
            start = time.perf_counter()
            ref = callee.call.remote(i, features, wire_parts([data]))
            if as_worker:
                ray.wait([ref], num_returns=1)
            reply = ray.get(ref)
            times.append(time.perf_counter() - start)
            held = reply if as_worker else None
        del held
        return times


def call_shapes(mb: float, iterations: int, rounds: int) -> list[dict[str, Any]]:
    """Milliseconds of a push-pull-shaped call of ``mb`` MB each way, with the PS server's
    machinery added piece by piece (no step, no model): medians of ``iterations`` after five
    warm-ups, per round; the variants alternated round by round."""
    nbytes = int(mb * 1e6)
    sync, shaped = SyncShapedCallee.remote(nbytes), ShapedCallee.remote(nbytes)  # type: ignore[attr-defined]
    caller = ShapedCaller.remote()  # type: ignore[attr-defined]
    variants: list[tuple[str, Any, tuple[str, ...], bool]] = [
        ("plain actor", sync, (), False),
        ("async actor", shaped, (), False),
        *((f"async + {f}", shaped, (f,), False) for f in CALL_FEATURES),
        ("async + all", shaped, CALL_FEATURES, False),
        ("async + all, as the worker", shaped, CALL_FEATURES, True),
    ]
    round_ms: list[list[float]] = [[] for _ in variants]
    try:
        for _ in range(rounds):
            for times, (_, callee, features, as_worker) in zip(round_ms, variants, strict=True):
                run = caller.run.remote(callee, nbytes, iterations + 5, features, as_worker)
                times.append(statistics.median(ray.get(run)[5:]) * 1e3)
    finally:
        for actor in (sync, shaped, caller):
            ray.kill(actor)
    return [
        {"variant": name, "mb": mb, "round_ms": times}
        for (name, *_), times in zip(variants, round_ms, strict=True)
    ]


class RawRoundTrip:
    """A caller actor and S callee actors, kept for every round of one configuration (as the
    PS's actors are kept in its pool), each callee holding ``nbytes / S`` to send back."""

    def __init__(self, nbytes: int, servers: int) -> None:
        self.nbytes = nbytes
        self.callees = [Callee.remote(nbytes // servers) for _ in range(servers)]  # type: ignore[attr-defined]
        self.caller = Caller.remote()  # type: ignore[attr-defined]

    def bytes_s(self, iterations: int, parts: bool = False) -> float:
        """``2 * nbytes`` (there and back) over the median round trip, after two warm-ups."""
        run = self.caller.run.remote(self.callees, self.nbytes, iterations + 2, parts)
        return 2 * self.nbytes / statistics.median(ray.get(run)[2:])

    def close(self) -> None:
        for actor in [*self.callees, self.caller]:
            ray.kill(actor)


def ps_push_pull(
    mb: float, workers: int, servers: int, iterations: int, piece_mb: float, step_threads: int
) -> dict[str, float]:
    width = int(math.sqrt(mb * 1e6 / 4 / 2))  # two width x width layers
    options = {"in_features": width, "width": width, "depth": 3, "num_classes": 2}
    request = ps.PSRequest(model="mlp", model_options={k: str(v) for k, v in options.items()})
    scenario = unlimited(servers)
    case = ps.resolve_case(dataclasses.replace(request, batch_size=1), scenario)
    result = ps.fit(
        case.model,
        case.data,
        loss=case.loss,
        workers=workers,
        scenario=scenario,
        strategy="oracle",  # equal servers: an even split
        iterations=iterations + 1,
        piece_mb=piece_mb,
        step_threads=step_threads,
    )
    steps = result.telemetry[1:]  # iteration 0 also has the run's first pull
    moved, exchange_s, transport_s, iteration_s = [], [], [], []
    for step in steps:
        for w in step.workers:
            moved.append(sum(t.pull_bytes + t.push_bytes for t in w.transfers))
            exchange_s.append(w.push_pull_s)
            # less the time the server spent on the step (the slowest server's, as they overlap)
            transport_s.append(w.push_pull_s - max(t.wait_s for t in w.transfers))
        iteration_s.append(step.iter_s - max(w.compute_s for w in step.workers))
    nbytes = statistics.median(moved)
    return {
        "param_mb": sum(result.server_bytes.values()) / 1e6,
        "ps_push_pull_bytes_s": nbytes / statistics.median(exchange_s),
        "ps_transport_bytes_s": nbytes / statistics.median(transport_s),
        "ps_iteration_bytes_s": nbytes * workers / statistics.median(iteration_s),
    }


def best_of_rounds(
    mb: float, servers: int, iterations: int, rounds: int, variants: list[tuple[float, int]]
) -> list[dict[str, float]]:
    """PS (once per variant: piece size, step threads) and raw, alternated ``rounds`` times so
    that all see the same load on a shared machine; for each figure the best round (the least
    disturbed), as the medians inside a round already smooth single hiccups. One row a variant."""
    best: list[dict[str, float]] = [{"piece_mb": p, "step_threads": t} for p, t in variants]
    raw: RawRoundTrip | None = None
    try:
        for _ in range(rounds):
            for row, (piece_mb, threads) in zip(best, variants, strict=True):
                ps = ps_push_pull(mb, 1, servers, iterations, piece_mb, threads)
                row.update({k: max(v, row.get(k, 0.0)) for k, v in ps.items()})
            if raw is None:
                raw = RawRoundTrip(int(best[0]["param_mb"] * 1e6), servers)
            rate, parted = raw.bytes_s(iterations), raw.bytes_s(iterations, parts=True)
            for row in best:
                row["raw_bytes_s"] = max(rate, row.get("raw_bytes_s", 0.0))
                row["raw_parts_bytes_s"] = max(parted, row.get("raw_parts_bytes_s", 0.0))
    finally:
        if raw is not None:
            raw.close()
    return best


def numpy_blocked_step(param: np.ndarray, buf: np.ndarray, grad: np.ndarray) -> None:
    """The servers' step before the fused kernel, for comparison: numpy's four ufuncs
    (``buf *= m; buf += g; s = buf * lr; param -= s``) block by block (64 Ki elements)."""
    scratch = np.empty(65_536, np.float32)
    momentum, lr = np.float32(0.9), np.float32(0.05)
    for lo in range(0, param.size, 65_536):
        m = buf[lo : lo + 65_536]
        m *= momentum
        m += grad[lo : lo + 65_536]
        s = np.multiply(m, lr, out=scratch[: m.size])
        param[lo : lo + 65_536] -= s


def step_against_memcpy(mb: float, repeats: int) -> dict[str, float]:
    """Seconds (median of ``repeats``) of one server's step on ``mb`` MB of parameters with one
    worker's gradient (reading gradient, momentum and parameters, writing the last two: 20
    bytes of memory traffic per parameter) and of one ``memcpy`` of the same bytes (8 bytes per
    parameter: what each of raw Ray's two copies costs), on this thread."""
    n = int(mb * 1e6 / 4)
    rng = np.random.default_rng(0)
    param, grad = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    buf, dst = np.zeros(n, np.float32), np.empty(n, np.float32)
    sgd = ps.SGDConfig()

    def median_s(work: Any) -> float:
        times = []
        for _ in range(repeats + 1):  # the first one warms up
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:])

    def two_threads() -> None:  # as a server with step_threads=2 steps a large segment
        half = n // 2
        halves = [slice(0, half), slice(half, n)]
        list(
            step_pool(2).map(lambda s: sgd_momentum_step(param[s], buf[s], [grad[s]], sgd), halves)
        )

    # The step on this thread while another thread copies other arrays of the same size (as a
    # pipelined server steps one piece while the next travels): if the two overlapped, the pair
    # would take the longer one's time; on a saturated memory bus it takes their sum.
    src2, dst2 = np.ones(n, np.float32), np.empty(n, np.float32)

    def step_beside_memcpy() -> None:
        copy = step_pool(1).submit(np.copyto, dst2, src2)
        sgd_momentum_step(param, buf, [grad], sgd)
        copy.result()

    return {
        "param_mb": n * 4 / 1e6,
        "memcpy_s": median_s(lambda: np.copyto(dst, param)),
        "step_beside_memcpy_s": median_s(step_beside_memcpy),
        "numpy_step_s": median_s(lambda: numpy_blocked_step(param, buf, grad)),
        "fused_step_s": median_s(lambda: sgd_momentum_step(param, buf, [grad], sgd)),
        "fused_step_2_threads_s": median_s(two_threads),
    }


def print_step_table(rows: list[dict[str, float]]) -> None:
    """Milliseconds, and each step's time over the memcpy's; "beside copy": the fused step while
    another thread copies as much ("overlap": how much of the shorter one's time it hides)."""
    head = ("MB", "memcpy ms", "numpy step", "/memcpy", "fused step", "/memcpy", "2 threads",
            "/memcpy", "beside copy", "overlap")  # fmt: skip
    print("{:>6} {:>10} {:>11} {:>8} {:>11} {:>8} {:>10} {:>8} {:>12} {:>8}".format(*head))
    for r in rows:
        copy_s = r["memcpy_s"]
        line = f"{r['param_mb']:6.1f} {copy_s * 1e3:10.2f}"
        for key, width in (
            ("numpy_step_s", 11),
            ("fused_step_s", 11),
            ("fused_step_2_threads_s", 10),
        ):
            line += f" {r[key] * 1e3:{width}.2f} {r[key] / copy_s:8.2f}"
        both, step = r["step_beside_memcpy_s"], r["fused_step_s"]
        hidden = (step + copy_s - both) / min(step, copy_s)  # 1: fully overlapped, 0: serial
        print(f"{line} {both * 1e3:12.2f} {hidden:8.0%}")


def object_store_faults(mb: float, puts: int) -> dict[str, float]:
    """One ``ray.put`` of ``mb`` MB, ``puts`` times (the reference dropped each time, as a
    finished push-pull drops its objects): minor page faults this process takes per put (each
    4 KiB page of a fresh allocation that this process has not mapped costs one) and the put's
    milliseconds, medians after two warm-ups."""
    array = np.ones(int(mb * 1e6 / 4), np.float32)
    faults, times = [], []
    for _ in range(puts + 2):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        ref = ray.put(array)
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del ref
    return {
        "mb": array.nbytes / 1e6,
        "pages": array.nbytes / 4096,
        "faults_per_put": statistics.median(faults[2:]),
        "put_ms": statistics.median(times[2:]) * 1e3,
    }


def actor_faults() -> dict[str, int]:
    """Minor page faults so far of this machine's Ray actor processes, by process title summed
    (``ray::PSWorker``, ``ray::PSServer``, ``ray::Caller``, ``ray::Callee``; local Ray only)."""
    out: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, UnicodeDecodeError, IndexError):
            continue  # not a process, or one that ended meanwhile
        if title.startswith("ray::"):
            name = title.split()[0].split(".")[0]
            out[name] = out.get(name, 0) + int(fields[7])  # minflt
    return out


def transfer_faults(mb: float, iterations: int) -> dict[str, float]:
    """Page faults per iteration of the PS's actors (one worker, one server) and of raw's
    (caller, callee) moving the same bytes, each after warming up."""
    ps_push_pull(mb, 1, 1, 2, 256.0, 1)  # starts the pool's actors
    before = actor_faults()
    ps_push_pull(mb, 1, 1, iterations, 256.0, 1)
    after = actor_faults()
    raw = RawRoundTrip(int(mb * 1e6), 1)
    try:
        raw.bytes_s(2)
        middle = actor_faults()
        raw.bytes_s(iterations)
        end = actor_faults()
    finally:
        raw.close()
    runs = iterations + 1  # ps_push_pull runs one more (its first has the run's pull)

    def per_iteration(name: str, since: dict[str, int], until: dict[str, int], n: int) -> float:
        return (until.get(name, 0) - since.get(name, 0)) / n

    return {
        "mb": mb,
        "pages": mb * 1e6 / 4096,
        "ps_worker": per_iteration("ray::PSWorker", before, after, runs),
        "ps_server": per_iteration("ray::PSServer", before, after, runs),
        "raw_caller": per_iteration("ray::Caller", middle, end, iterations + 2),
        "raw_callee": per_iteration("ray::Callee", middle, end, iterations + 2),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line a row, MB/s; adds the ratios to the rows. "raw parts": raw Ray with the
    bytes cut both ways as the PS cuts its pushes (1 MiB parts), the engine's limit for that."""
    head: tuple[str, ...] = ("MB", "S", "piece:thr", "raw", "raw parts", "PS", "PS/raw", "PS/parts")
    head += ("transport", "tr./raw", "iteration")
    print("{:>6} {:>2} {:>9} {:>7} {:>9} {:>7} {:>7} {:>8} {:>10} {:>8} {:>10}".format(*head))
    for r in rows:
        raw, parted = r["raw_bytes_s"], r["raw_parts_bytes_s"]
        r["ratio"] = r["ps_push_pull_bytes_s"] / raw
        r["ratio_parts"] = r["ps_push_pull_bytes_s"] / parted
        r["transport_ratio"] = r["ps_transport_bytes_s"] / raw
        print(
            f"{r['param_mb']:6.1f} {r['servers']:2d} "
            f"{r['piece_mb']:>6g}:{r['step_threads']:<2g} {raw / 1e6:7.0f} {parted / 1e6:9.0f} "
            f"{r['ps_push_pull_bytes_s'] / 1e6:7.0f} {r['ratio']:7.0%} {r['ratio_parts']:8.0%} "
            f"{r['ps_transport_bytes_s'] / 1e6:10.0f} {r['transport_ratio']:8.0%} "
            f"{r['ps_iteration_bytes_s'] / 1e6:10.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[4.0, 16.0, 64.0])
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--iterations", type=int, default=10, help="per round")
    parser.add_argument("--rounds", type=int, default=5)
    default = ps.PSRequest()
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[f"{default.piece_mb:g}:{default.step_threads}"],
        help="PIECE_MB:STEP_THREADS, one row each (a piece above the model: no pipelining)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--step-only",
        action="store_true",
        help="time one server's step against a memcpy of the same bytes (no Ray)",
    )
    parser.add_argument(
        "--faults",
        action="store_true",
        help="page faults and time of one object-store put per size (no PS)",
    )
    parser.add_argument(
        "--call-shapes",
        action="store_true",
        help="a push-pull-shaped call with the PS server's machinery added piece by piece",
    )
    parser.add_argument(
        "--object-store-gb",
        type=float,
        default=None,
        help="start local Ray with an object store of this size (default: Ray's, 30%% of RAM)",
    )
    args = parser.parse_args()
    # Ray starts its worker processes at nice 15: a timing run's actors run at normal priority
    # (a shared machine's niced jobs would otherwise take the CPU from them).
    os.environ.setdefault("RAY_worker_niceness", "0")
    store = None if args.object_store_gb is None else int(args.object_store_gb * 1e9)

    def start_ray() -> None:
        ps.ensure_ray(num_cpus=os.cpu_count() or 2, object_store_bytes=store)

    if args.faults:
        start_ray()
        for row in (object_store_faults(mb, puts=10) for mb in args.mb):
            print(
                "{mb:6.1f} MB: {faults_per_put:7.0f} faults a put ({pages:.0f} pages), "
                "{put_ms:6.2f} ms".format(**row)
            )
        for mb in args.mb:
            row = transfer_faults(mb, args.iterations)
            print(
                "{mb:6.1f} MB ({pages:.0f} pages), faults an iteration: PS worker "
                "{ps_worker:.0f}, server {ps_server:.0f}; raw caller {raw_caller:.0f}, "
                "callee {raw_callee:.0f}".format(**row)
            )
        return
    if args.call_shapes:
        start_ray()
        shape_rows = [r for mb in args.mb for r in call_shapes(mb, args.iterations, args.rounds)]
        for r in shape_rows:
            rounds = " ".join(f"{ms:6.2f}" for ms in r["round_ms"])
            print(
                f"{r['mb']:6.1f} MB {r['variant']:<28} best {min(r['round_ms']):6.2f} ms, median"
                f" {statistics.median(r['round_ms']):6.2f} ms; rounds: {rounds}"
            )
        if args.json:
            args.json.write_text(json.dumps({"call_shapes": shape_rows}, indent=2))
        return
    if args.step_only:
        torch.set_num_threads(1)  # as a server steps
        step_rows = [step_against_memcpy(mb, repeats=9) for mb in args.mb]
        print_step_table(step_rows)
        if args.json:
            args.json.write_text(json.dumps({"step_rows": step_rows}, indent=2))
        return
    start_ray()
    variants = [(float(v.split(":")[0]), int(v.split(":")[1])) for v in args.variants]
    rows = []
    for mb in args.mb:
        for servers in args.servers:
            runs = best_of_rounds(mb, servers, args.iterations, args.rounds, variants)
            for row in runs:
                rows.append({"servers": servers, **row})
    print_table(rows)
    if args.json:
        machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

"""The scheduler service under load, on loopback: submissions per second and their latency, the
cost of a scheduling round over a queue of 10,000 jobs, and a restart with them in the store.

A local Ray cluster (the ``tiny`` preset's 4 nodes x 4 emulated GPUs) is started first, as a
platform's Ray cluster would be running; ``unstall serve --address`` joins it in a process of its
own. Then:

1. ``--jobs`` submissions (1-GPU jobs of 100 hours, so that they queue) are sent open-loop at
   ``--rate`` per second from ``--threads`` keep-alive clients; the achieved rate and the p50/p99
   latency of ``POST /api/jobs`` are measured. They start as soon as the service answers, while
   its executors still come up (``--after-ready``: once they are up).
2. With that queue waiting, ``--probes`` more submissions come one at a time; each calls for a
   round over the whole queue. ``GET /api/stats`` gives what those rounds cost (the round, its
   events written to the store, the API's snapshot; ms).
3. The service is killed (``kill -9``) and started again on the same store: the seconds from the
   new process's start until ``GET /api/jobs`` answers with every job.

The load generator shares the machine with the service; on a machine shared with other work
too, rates and latencies follow that work's load. What the submissions cost in CPU (the
service's and the clients' milliseconds per submission, from /proc) does not, and is reported
with the load average before and after them.

Traffic goes to 127.0.0.1 only and stops by itself. Prints a table and writes ``--json``.

    python benchmarks/service_load.py --policy fifo --json out/service_load_fifo.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

SPEC = {"gpus": 1, "model": "resnet18", "duration_s": 360000.0, "name": "load"}


def start_service(
    address: str, store: Path, policy: str, extra: list[str]
) -> tuple[subprocess.Popen[str], str, float]:
    """``unstall serve`` joining ``address``: the process, its URL, seconds until it answered."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "unstall",
            "serve",
            "--address",
            address,
            "--cluster",
            "tiny",
            "--store",
            str(store),
            "--port",
            "0",
            "--policy",
            policy,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if found:
            threading.Thread(target=_drain, args=(process,), daemon=True).start()
            return process, found.group(1), time.perf_counter() - began
    raise SystemExit(f"the service did not start (exit {process.wait()})")


def _drain(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for _line in process.stdout:
        pass


def submit_load(url: str, jobs: int, rate: float, threads: int) -> dict[str, float]:
    """Open-loop submissions at ``rate``/s; latency of each, from its scheduled send time."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    began = time.perf_counter()
    counter = iter(range(jobs))

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=30.0, headers={"X-Unstall-User": "load"}) as http:
            for i in counter:
                due = began + i / rate
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                answer = http.post("/api/jobs", json=SPEC)
                took = time.perf_counter() - max(due, began)
                with lock:
                    latencies.append(took)
                    if answer.status_code != 201:
                        errors[0] += 1

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "submitted": len(latencies),
        "errors": errors[0],
        "rate_per_s": len(latencies) / elapsed,
        "latency_ms_p50": 1000 * statistics.median(latencies),
        "latency_ms_p99": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user and system) process ``pid`` has used: Linux's /proc; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_load(url: str, pid: int, jobs: int, rate: float, threads: int) -> dict[str, float | None]:
    """:func:`submit_load`, with what the submissions cost in CPU: the service's and this
    process's (the clients') milliseconds per submission, which other work on a shared machine
    does not change as it changes rates and latencies, and the load average around them."""
    server_before = cpu_seconds(pid)
    client_before = os.times()
    load_before = os.getloadavg()[0]
    found: dict[str, float | None] = dict(submit_load(url, jobs, rate, threads))
    server_after = cpu_seconds(pid)
    client_after = os.times()
    found["server_cpu_ms_per_submission"] = (
        1000 * (server_after - server_before) / jobs
        if server_after is not None and server_before is not None
        else None
    )
    client_s = (client_after.user + client_after.system) - (
        client_before.user + client_before.system
    )
    found["client_cpu_ms_per_submission"] = 1000 * client_s / jobs
    found["load_avg_1m_before"] = load_before
    found["load_avg_1m_after"] = os.getloadavg()[0]
    return found


def probe_rounds(url: str, probes: int) -> dict[str, object]:
    """Submissions one at a time over the waiting queue; the rounds' costs the service saw."""
    with httpx.Client(base_url=url, timeout=60.0, headers={"X-Unstall-User": "probe"}) as http:
        _wait_ready(http)
        for _ in range(probes):
            http.post("/api/jobs", json=SPEC)
            time.sleep(0.3)
        time.sleep(1.0)
        return dict(http.get("/api/stats").json())


def _wait_ready(http: httpx.Client, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not http.get("/api/stats").json()["ready"]:
        if time.monotonic() > deadline:
            raise SystemExit("the scheduler did not come up")
        time.sleep(0.5)


def restart(address: str, store: Path, policy: str, jobs: int) -> dict[str, float]:
    """Seconds from a new service's start until it answers with all ``jobs``."""
    began = time.perf_counter()
    process, url, answered = start_service(address, store, policy, [])
    try:
        with httpx.Client(base_url=url, timeout=60.0) as http:
            listed = http.get("/api/jobs").json()
        found = time.perf_counter() - began
        if len(listed) < jobs:
            raise SystemExit(f"the restarted service lists {len(listed)} of {jobs} jobs")
        return {"restart_answer_s": answered, "restart_all_jobs_s": found, "jobs": len(listed)}
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:  # a stop before its executors are up waits for them
            process.kill()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument(
        "--after-ready",
        action="store_true",
        help="send the submissions once the executors are up (default: at once, as they start)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from unstall.live.cluster import LocalRayCluster
    from unstall.net import topology_preset

    local = LocalRayCluster(topology_preset("tiny"), "unstall_gpu")
    store = Path(tempfile.mkdtemp(prefix="service-load-"))
    try:
        process, url, started_s = start_service(local.address, store, args.policy, [])
        try:
            if args.after_ready:
                with httpx.Client(base_url=url, timeout=60.0) as http:
                    _wait_ready(http)
            load = timed_load(url, process.pid, args.jobs, args.rate, args.threads)
            rounds = probe_rounds(url, args.probes)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        again = restart(local.address, store, args.policy, args.jobs)
    finally:
        local.shutdown()
    result = {
        "policy": args.policy,
        "machine": f"{os.cpu_count()}-core CPU VM",
        "first_start_answer_s": started_s,
        **load,
        **{f"round_{k}": v for k, v in rounds.items() if k.startswith(("round_ms", "queued"))},
        "rounds": rounds.get("rounds"),
        **again,
    }
    width = max(len(k) for k in result)
    for key, value in result.items():
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

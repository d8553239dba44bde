"""Perf-model speed: calls per second of the iteration-time model and of the sharing step.

The cluster simulator calls the perf model for every job whose rate changes, millions of times in
a long trace, so it must stay cheap pure-Python arithmetic. Timed here, each the best of
``--repeats`` rounds of ``--calls`` calls (best, not mean: the machine is shared):

- ``plan_time``: the hot path, on a precomputed plan, with and without a sharing result;
- ``iteration_time``: the convenience call (plan looked up in an LRU cache by value);
- ``comm_plan``: building a plan (once per job and placement);
- ``max_min_fair``: one sharing step of 200 jobs of 2-8 nodes spread over the ``philly`` topology.

    .venv/bin/python benchmarks/perf_model_speed.py [--calls 200000] [--repeats 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path

from unstall.net import max_min_fair, medium, philly
from unstall.workload import JobPerfSpec, Placement, comm_plan, iteration_time, plan_time


def calls_per_second(fn: Callable[[], object], calls: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - start)
    return calls / best


def sharing_case(n_jobs: int, seed: int) -> tuple[dict, dict, dict]:  # type: ignore[type-arg]
    """``n_jobs`` random 2-8-node jobs on ``philly``: capacities, flows and caps."""
    topo = philly()
    rng = random.Random(seed)
    spec = JobPerfSpec(compute_s=0.1, gradient_bytes=100e6, gradient_tensors=160)
    flows, caps = {}, {}
    for job in range(n_jobs):
        nodes = tuple(rng.sample(range(topo.n_nodes), rng.randint(2, 8)))
        plan = comm_plan(spec, Placement((2,) * len(nodes), nodes=nodes), topo)
        flows[job], caps[job] = plan.sharing_weights(), plan.max_rate
    return topo.capacities(), flows, caps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    topo = medium()
    spec = JobPerfSpec(compute_s=0.1, gradient_bytes=100e6, gradient_tensors=160)
    spread = Placement((4, 4, 4, 4), nodes=(0, 9, 17, 30))  # 4 nodes over 4 racks
    plan = comm_plan(spec, spread, topo)
    shared = plan.bandwidth_at_rate(plan.max_rate / 3)
    capacities, flows, caps = sharing_case(200, seed=0)
    n, r = args.calls, args.repeats
    rows = [
        ("plan_time", calls_per_second(lambda: plan_time(plan), n, r)),
        ("plan_time + shares", calls_per_second(lambda: plan_time(plan, shared, 0.2), n, r)),
        ("iteration_time", calls_per_second(lambda: iteration_time(spec, spread, topo), n, r)),
        ("comm_plan", calls_per_second(lambda: comm_plan(spec, spread, topo), n // 10, r)),
        (
            "max_min_fair 200 jobs",
            calls_per_second(lambda: max_min_fair(capacities, flows, caps=caps), 20, r),
        ),
    ]
    print(f"{'call':<24}{'calls/s':>14}{'us/call':>11}")
    for name, rate in rows:
        print(f"{name:<24}{rate:>14,.0f}{1e6 / rate:>11.2f}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "calls_per_s": {name: rate for name, rate in rows},
        }
        args.json.write_text(json.dumps(body, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

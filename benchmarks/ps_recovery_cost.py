"""What recovery costs a parameter-server run while nothing fails: seconds per iteration of
`unstall ps train` as it runs by default, without recovery and with ``--max-recoveries 1``
(which snapshots the servers' whole state to the driver every ``--snapshot-every`` iterations),
side by side.

The runs are those of ``unstall ps train`` with its defaults (the ``none`` scenario's MLP,
784-512x4-10, about 4.8 MB of float32 parameters; 2 workers, 4 servers, tf-greedy, SGD with
momentum, so a snapshot carries the parameters and the momentum) and ``--model-option`` to
make the model wider. Each configuration runs ``--iterations`` iterations on the same actors (a
shared ``ActorPool``: actor start-up is not timed); an iteration's seconds are the time between
two ``progress`` calls, which the run makes after the iteration and its snapshot, so the
snapshot is in. Iteration 0 (set-up) and the ``--warmup`` after it are left out; the
configurations alternate within each of ``--rounds`` rounds and the table gives the median over
all measured iterations and the overhead of each against no recovery.

    .venv/bin/python benchmarks/ps_recovery_cost.py [--rounds 5] [--iterations 30]
        [--snapshot-every 1 5] [--width 512 2048] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import ray

from unstall import ps


def iteration_seconds(
    width: int, recoveries: int, snapshot_every: int, iterations: int, pool: ps.ActorPool
) -> list[float]:
    """Seconds of each iteration (snapshot included) of one run of `ps train`'s default job."""
    request = ps.PSRequest(
        model_options={"width": str(width)},
        iterations=iterations,
        max_recoveries=recoveries,
        snapshot_every=snapshot_every,
    )
    run = ps.resolve_run(request)
    stamps = [time.perf_counter()]
    ps.fit(
        run.model,
        run.data,
        run.config,
        loss=run.loss,
        resume=run.resume,
        pool=pool,
        progress=lambda n: stamps.append(time.perf_counter()),
    )
    return [b - a for a, b in itertools.pairwise(stamps[1:])]  # from iteration 1 on


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--snapshot-every", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--width", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--json", type=Path)
    a = parser.parse_args()
    configs = [("no recovery", 0, 1)] + [
        (f"--max-recoveries 1 --snapshot-every {k}", 1, k) for k in a.snapshot_every
    ]
    # Ray's workers at the driver's priority (Ray's default is nice 15): a run started at a
    # raised priority gives it to the whole run, not only to the driver.
    os.environ.setdefault("RAY_worker_niceness", "0")
    started = ps.ensure_ray(None, num_cpus=3)  # once: the pool's actors live across the runs
    pool = ps.ActorPool()
    rows: list[dict[str, Any]] = []
    try:
        for width in a.width:
            samples: dict[str, list[float]] = {name: [] for name, _, _ in configs}
            for _ in range(a.rounds):
                for name, recoveries, every in configs:
                    seconds = iteration_seconds(width, recoveries, every, a.iterations, pool)
                    samples[name] += seconds[a.warmup :]
            base = statistics.median(samples["no recovery"])
            for name, _, _ in configs:
                median = statistics.median(samples[name])
                rows.append(
                    {
                        "width": width,
                        "params_mb": round(_params_mb(width), 1),
                        "config": name,
                        "median_iter_ms": round(median * 1e3, 2),
                        "overhead": round(median / base - 1, 3),
                        "iterations_measured": len(samples[name]),
                    }
                )
    finally:
        pool.close()
        if started:
            ray.shutdown()
    print(f"{'width':>6} {'MB':>6}  {'configuration':<40} {'ms/iter':>8} {'overhead':>9}")
    for r in rows:
        print(
            f"{r['width']:>6} {r['params_mb']:>6}  {r['config']:<40} {r['median_iter_ms']:>8}"
            f" {r['overhead']:>+9.1%}"
        )
    if a.json is not None:
        a.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def _params_mb(width: int, depth: int = 4, inputs: int = 784, classes: int = 10) -> float:
    """float32 parameters of the scenario's MLP at ``width``: weights and biases."""
    count = inputs * width + width + (depth - 1) * (width * width + width) + width * classes
    return 4 * (count + classes) / 1e6


if __name__ == "__main__":
    main()

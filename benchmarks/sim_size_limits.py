"""How large a cluster the simulator handles: time and peak memory of one `sim run` of a short
trace on growing clusters, the measurement the cluster-size limits of ``unstall.net.topology``
(``MAX_NODES``, ``MAX_GPUS``) are set from.

Each cluster is racks of 32 nodes of 8 V100s (100 Gbps NICs, uplinks 2:1), from ``--nodes``
nodes up; the trace is the first ``--jobs`` jobs of the embedded one (a short trace: the size of
the cluster, not of the trace, is what is measured). Each run happens in its own process, so
its peak memory (max RSS, the interpreter and the imports included) is its own; ``total s`` is
building the cluster, the perf model and the jobs plus the simulation, the imports excluded.
Sizes above the limits in force are measured too: the child lifts the limits for its own run
(they are what is being measured). A run that outlasts ``--timeout`` seconds is stopped and
shown as such.

    .venv/bin/python benchmarks/sim_size_limits.py [--nodes 1000 10000 100000 1000000]
        [--policies fifo,dally-fixed] [--jobs 400] [--timeout 600] [--json OUT]

``dally-fixed`` is Dally with fixed settings, the Dally of the published figures (``dally`` adds
the look-ahead tuner).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

NODES_PER_RACK = 32
GPUS_PER_NODE = 8


def one_run(policy: str, nodes: int, jobs: int) -> dict[str, object]:
    """Runs in a child process: one simulation on a cluster of ``nodes`` nodes."""
    import unstall.net.topology as topology
    from unstall.net import TopologyConfig
    from unstall.sched import make_policy
    from unstall.sim import simulate
    from unstall.traces import default_trace

    topology.MAX_NODES = topology.MAX_GPUS = sys.maxsize  # measure beyond the limits, too
    trace = default_trace()
    started = time.perf_counter()
    cluster = TopologyConfig(
        name=f"{nodes}-nodes",
        racks=-(-nodes // NODES_PER_RACK),
        nodes_per_rack=NODES_PER_RACK,
        gpus_per_node=GPUS_PER_NODE,
        device="v100",
        oversubscription=2.0,
    )
    run = simulate(trace, cluster, make_policy(policy), max_jobs=jobs)
    total = time.perf_counter() - started
    return {
        "policy": policy,
        "nodes": cluster.n_nodes,
        "gpus": cluster.n_gpus,
        "jobs": run.result.jobs,
        "jobs_finished": run.result.jobs_finished,
        "total_s": round(total, 2),
        "sim_wall_s": round(run.result.sim_wall_s, 2),
        "rounds": run.result.rounds,
        "ms_per_round": round(1e3 * run.result.sim_wall_s / max(run.result.rounds, 1), 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def spawn(policy: str, nodes: int, jobs: int, timeout_s: float) -> dict[str, object]:
    args = [sys.executable, __file__, "--child", policy, str(nodes), str(jobs)]
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"policy": policy, "nodes": nodes, "gpus": nodes * GPUS_PER_NODE, "timeout": True}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        policy, nodes, jobs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(one_run(policy, nodes, jobs)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--policies", default="fifo,dally-fixed")
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", type=Path)
    a = parser.parse_args()
    print(
        f"{'policy':11} {'nodes':>9} {'GPUs':>10} {'done':>5} {'rounds':>6} {'ms/round':>9}"
        f" {'total s':>8} {'peak MB':>8}"
    )
    rows = []
    for policy in a.policies.split(","):
        for nodes in a.nodes:
            row = spawn(policy, nodes, a.jobs, a.timeout)
            rows.append(row)
            if row.get("timeout"):
                print(f"{policy:11} {nodes:>9,} {row['gpus']:>10,}  stopped after {a.timeout:g} s")
                continue
            print(
                f"{policy:11} {row['nodes']:>9,} {row['gpus']:>10,} {row['jobs_finished']:>5} "
                f"{row['rounds']:>6,} {row['ms_per_round']:>9.3f} {row['total_s']:>8.1f} "
                f"{row['peak_rss_mb']:>8,}",
                flush=True,
            )
    if a.json is not None:
        machine = {"platform": platform.platform(), "python": platform.python_version()}
        a.json.write_text(json.dumps({"machine": machine, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

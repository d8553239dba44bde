"""Every policy's decisions, fingerprinted: a change that moves any job of any policy fails here.

The scheduling core is shared by the simulator, the live backend and the service; a refactor of
it (or of a policy) must leave every decision as it was. Each case simulates a trace under one
policy and hashes, per job, its first start, finish, queueing, communication overhead,
preemptions and migrations (to the microsecond); the hash and a few summary figures are kept in
``fingerprints.json`` beside this file.

A change that moves results on purpose (a policy's new behaviour) records them again with
``UNSTALL_RECORD_FINGERPRINTS=1 pytest tests/sim/test_fingerprints.py -n 0`` and says why in its
commit. The cases: the embedded trace on ``small`` (congestion medium), and a long, heavy
Gavel-like trace (half the jobs multi-GPU, up to 16 GPUs, load 2.5 on ``medium``, congestion high)
where queues hold hundreds of jobs, preemption and migration happen and Dally's look-ahead tunes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from unstall.net import topology_preset
from unstall.sched import POLICIES, make_policy
from unstall.sim import congestion_level, simulate
from unstall.traces import Trace, default_trace
from unstall.traces.synthetic import SyntheticTraceConfig, generate

RECORD = os.environ.get("UNSTALL_RECORD_FINGERPRINTS") == "1"
STORE = Path(__file__).with_name("fingerprints.json")


@cache
def _trace(name: str) -> Trace:
    if name == "embedded":
        return default_trace()
    cluster = topology_preset("medium")
    return generate(
        SyntheticTraceConfig(
            jobs=800,
            seed=7,
            load=2.5,
            cluster_gpus=cluster.n_gpus,
            multi_gpu_share=0.5,
            max_gpus=16,
            duration_scale=0.25,
        )
    )


CASES = {
    "embedded": dict(cluster="small", congestion="medium"),
    "gavel-like": dict(cluster="medium", congestion="high"),
}


def _number(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.6f}"


def fingerprint(case: str, policy: str) -> dict[str, object]:
    settings = CASES[case]
    run = simulate(
        _trace(case),
        topology_preset(str(settings["cluster"])),
        make_policy(policy),
        congestion=congestion_level(str(settings["congestion"])),
        seed=3,
    )
    jobs: pd.DataFrame = run.jobs
    lines = [
        ",".join(
            (
                str(row.job_id),
                _number(row.first_start_s),
                _number(row.finish_s),
                _number(row.queue_s),
                _number(row.comm_overhead_s),
                str(row.preemptions),
                str(row.migrations),
                str(row.gpu_type),
            )
        )
        for row in jobs.itertuples(index=False)
    ]
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    result = run.result
    return {
        "jobs_sha256": digest,
        "jobs_finished": int(result.jobs_finished),
        "avg_jct_s": round(float(result.avg_jct_s), 3),
        "makespan_s": round(float(result.makespan_s), 3),
        "preemptions": int(jobs["preemptions"].sum()),
        "migrations": int(jobs["migrations"].sum()),
    }


def _stored() -> dict[str, dict[str, object]]:
    return json.loads(STORE.read_text()) if STORE.exists() else {}


def _record(key: str, value: dict[str, object]) -> None:
    # Cases run one at a time under -n 0 when recording; read-modify-write keeps the others.
    data = _stored()
    data[key] = value
    STORE.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_decisions_are_unchanged(case: str, policy: str) -> None:
    key = f"{case}/{policy}"
    got = fingerprint(case, policy)
    if RECORD:
        _record(key, got)
        return
    stored = _stored()
    assert key in stored, f"no fingerprint for {key}: record it (see the module docstring)"
    assert got == stored[key], f"{key}: the decisions moved"


def test_every_policy_has_a_fingerprint() -> None:
    """A policy added to the registry is fingerprinted too (recording adds it)."""
    stored = _stored()
    missing = [f"{c}/{p}" for c in CASES for p in POLICIES if f"{c}/{p}" not in stored]
    assert not missing or RECORD, f"record fingerprints for {missing}"

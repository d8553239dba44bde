"""The demo says where dally stands on its trace against the best other policy, per metric."""

from __future__ import annotations

from types import SimpleNamespace

from unstall.cli.common import console
from unstall.cli.demo import _dally_in_context
from unstall.traces import default_trace


def result(policy: str, jct: float, makespan: float, comm: float) -> SimpleNamespace:
    return SimpleNamespace(
        policy=policy, avg_jct_s=jct, makespan_s=makespan, comm_overhead_frac=comm, total_gpus=32
    )


def test_the_demo_names_the_best_other_policy_and_dallys_change_per_metric() -> None:
    results = [
        result("consolidate", 100.0, 1000.0, 0.30),
        result("tiresias", 120.0, 900.0, 0.20),
        result("dally", 90.0, 990.0, 0.25),
    ]
    with console.capture() as captured:
        _dally_in_context(results, default_trace())
    text = " ".join(captured.get().split())
    assert "average JCT -10.0% vs consolidate" in text
    assert "makespan +10.0% vs tiresias" in text
    assert "comm overhead +25.0% vs tiresias" in text
    assert "400 jobs" in text and "multi-GPU jobs on 32 GPUs" in text


def test_nothing_is_said_without_dally() -> None:
    with console.capture() as captured:
        _dally_in_context([result("fifo", 1.0, 1.0, 0.1)], default_trace())
    assert captured.get() == ""

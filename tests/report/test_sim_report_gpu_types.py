"""The comparison report shows the time each policy's jobs held each GPU type (issue #38
item 5): from the runs' ``gpu_s_by_type``, a table on the page and a plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from unstall.net import load_topology
from unstall.report.sim_report import write_html, write_plots
from unstall.sim import simulate
from unstall.traces import default_trace


def test_the_report_shows_gpu_time_by_type_per_policy(tmp_path: Path) -> None:
    path = tmp_path / "mixed.toml"
    path.write_text(
        '[[nodes]]\ncount = 2\ngpus_per_node = 8\ndevice = "v100"\n'
        '[[nodes]]\ncount = 2\ngpus_per_node = 4\ndevice = "k80"\n'
    )
    cluster = load_topology(path)
    runs = {p: simulate(default_trace(), cluster, p, max_jobs=60) for p in ("fifo", "gavel")}
    results = [run.result for run in runs.values()]
    for run in runs.values():
        held = run.result.gpu_s_by_type
        assert set(held) == {"v100", "k80"}
        # Every GPU-second a job held is on some type: the total is the jobs' own.
        finished = run.jobs[run.jobs["finished"]]
        gpu_s = ((finished["jct_s"] - finished["queue_s"]) * finished["num_gpus"]).sum()
        assert sum(held.values()) == pytest.approx(gpu_s, rel=1e-9)
    plots = write_plots(
        results,
        {p: r.jobs for p, r in runs.items()},
        {p: r.timeline for p, r in runs.items()},
        tmp_path,
    )
    assert tmp_path / "gpu_time_by_type.png" in plots
    page = write_html(results, plots, tmp_path, "mixed").read_text()
    assert "GPU time by GPU type" in page and "v100 GPU-hours" in page and "k80 share" in page
    # On a cluster of one type there is nothing to split.
    one = simulate(default_trace(), "small", "fifo", max_jobs=20).result
    assert list(one.gpu_s_by_type) == ["v100"]
    assert "GPU time by GPU type" not in write_html([one], [], tmp_path, "small").read_text()

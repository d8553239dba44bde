"""Plots and the HTML page of `unstall sim compare`: one file per figure, one page showing all."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from unstall.report.plotting import new_figure, save
from unstall.results import write_text_atomically
from unstall.sim.metrics import SimResult

HOUR = 3600.0


def plot_jct_cdf(jobs_by_policy: Mapping[str, pd.DataFrame], path: Path) -> Path:
    fig, ax = new_figure()
    for policy, jobs in jobs_by_policy.items():
        jct = np.sort(jobs.loc[jobs["finished"], "jct_s"].to_numpy()) / HOUR
        if len(jct):
            ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    if ax.get_legend_handles_labels()[0]:  # no line when no job finished (an empty trace)
        ax.legend()
    return save(fig, path)


def plot_over_time(
    timelines: Mapping[str, pd.DataFrame], column: str, ylabel: str, path: Path, total: float = 1.0
) -> Path:
    fig, ax = new_figure()
    for policy, tl in timelines.items():
        if len(tl):
            ax.step(tl["time_s"] / HOUR, tl[column] / total, where="post", label=policy, lw=0.8)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:  # no line when no job finished (an empty trace)
        ax.legend()
    return save(fig, path)


def plot_bars(results: Sequence[SimResult], field: str, ylabel: str, path: Path) -> Path:
    fig, ax = new_figure()
    names = [r.policy for r in results]
    values = [float(getattr(r, field)) for r in results]
    bars = ax.bar(names, values, color="tab:blue")
    ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.set_ylabel(ylabel)
    return save(fig, path)


def plot_gpu_time_by_type(results: Sequence[SimResult], path: Path) -> Path:
    """GPU-hours each policy's jobs held on each GPU type: a group of bars per policy."""
    fig, ax = new_figure()
    types = gpu_types_of(results)
    width = 0.8 / max(1, len(types))
    x = np.arange(len(results))
    for k, kind in enumerate(types):
        hours = [r.gpu_s_by_type.get(kind, 0.0) / HOUR for r in results]
        bars = ax.bar(x + (k - (len(types) - 1) / 2) * width, hours, width, label=kind)
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
    ax.set_xticks(x, [r.policy for r in results])
    ax.set_ylabel("GPU-hours held by jobs")
    ax.set_title("GPU time by GPU type")
    if types:
        ax.legend()
    return save(fig, path)


def plot_tuner_course(telemetry: Mapping[str, pd.DataFrame], path: Path) -> Path | None:
    """The look-ahead tuner's course (``dally``'s): the candidate each run chose over time (a
    step per choice, labelled by the run) and the gain its look-ahead predicted for each switch
    (dots, right axis). None when no run reported ``tuner.choice``."""
    courses = {
        policy: frame
        for policy, frame in telemetry.items()
        if len(frame) and (frame["name"] == "tuner.choice").any()
    }
    if not courses:
        return None
    fig, ax = new_figure()
    gain_ax = ax.twinx()
    # The candidates' names, in their order: the tuner reports a score for each (in order).
    names: list[str] = []
    for frame in courses.values():
        scored = frame.loc[frame["name"].str.startswith("tuner.score."), "name"]
        names = names or list(dict.fromkeys(n.removeprefix("tuner.score.") for n in scored))
    for policy, frame in courses.items():
        choice = frame[frame["name"] == "tuner.choice"]
        ax.step(choice["time_s"] / HOUR, choice["value"], where="post", label=policy, lw=0.8)
        gain = frame[(frame["name"] == "tuner.predicted_gain") & (frame["value"] > 0)]
        gain_ax.plot(gain["time_s"] / HOUR, gain["value"], ".", ms=4, alpha=0.6)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("candidate chosen")
    if names:
        ax.set_yticks(range(len(names)), names)
    gain_ax.set_ylabel("predicted gain of a switch (share)")
    ax.set_title("look-ahead tuner: setting chosen over time")
    ax.legend()
    return save(fig, path)


def gpu_types_of(results: Sequence[SimResult]) -> list[str]:
    """The GPU types the results hold time for, in the order first met."""
    return list(dict.fromkeys(kind for r in results for kind in r.gpu_s_by_type))


def write_plots(
    results: Sequence[SimResult],
    jobs_by_policy: Mapping[str, pd.DataFrame],
    timelines: Mapping[str, pd.DataFrame],
    out: Path,
    telemetry: Mapping[str, pd.DataFrame] | None = None,
) -> list[Path]:
    """Every figure of a comparison; ``telemetry`` (what each policy reported over time, by
    policy) adds the look-ahead tuner's course when a run has one."""
    total = float(results[0].total_gpus) if results else 1.0
    tuner = plot_tuner_course(telemetry or {}, out / "tuner_course.png")
    return [
        plot_jct_cdf(jobs_by_policy, out / "jct_cdf.png"),
        plot_over_time(timelines, "queued", "jobs waiting", out / "queue_over_time.png"),
        plot_over_time(
            timelines, "busy_gpus", "GPU utilisation", out / "gpu_util_over_time.png", total
        ),
        plot_bars(
            results,
            "comm_overhead_frac",
            "communication overhead (share of run time)",
            out / "comm_overhead.png",
        ),
        plot_bars(results, "avg_jct_s", "average JCT (s)", out / "avg_jct.png"),
        *(
            [plot_gpu_time_by_type(results, out / "gpu_time_by_type.png")]
            if len(gpu_types_of(results)) > 1
            else []
        ),
        *([tuner] if tuner is not None else []),
    ]


_COLUMNS = (
    ("policy", "policy"),
    ("jobs_finished", "finished"),
    ("makespan_s", "makespan (h)"),
    ("avg_jct_s", "avg JCT (h)"),
    ("p99_jct_s", "p99 JCT (h)"),
    ("avg_queue_s", "avg queue (h)"),
    ("comm_overhead_frac", "comm overhead"),
    ("gpu_util", "GPU util"),
    ("preemptions", "preemptions"),
    ("migrations", "migrations"),
    ("jobs_moved", "jobs moved"),
    ("max_moves_per_job", "most moves of a job"),
)


def _cell(field: str, value: object) -> str:
    if field.endswith("_s") and isinstance(value, int | float):
        return f"{value / HOUR:.3f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return html.escape(str(value))


def gpu_type_table(results: Sequence[SimResult]) -> str:
    """An HTML table of the time each policy's jobs held GPUs of each type: GPU-hours, and
    their share of all the GPU-hours the policy used; "" on a cluster of one type."""
    types = gpu_types_of(results)
    if len(types) < 2:
        return ""
    head = "<th>policy</th>" + "".join(
        f"<th>{html.escape(t)} GPU-hours</th><th>{html.escape(t)} share</th>" for t in types
    )
    rows = []
    for r in results:
        total = sum(r.gpu_s_by_type.values())
        cells = "".join(
            f"<td>{r.gpu_s_by_type.get(t, 0.0) / HOUR:.1f}</td>"
            f"<td>{(r.gpu_s_by_type.get(t, 0.0) / total if total else 0.0):.3f}</td>"
            for t in types
        )
        rows.append(f"<tr><td>{html.escape(r.policy)}</td>{cells}</tr>")
    return (
        "<h2>GPU time by GPU type</h2><p>GPU-hours the jobs held on each type (restores "
        f"included).</p><table><tr>{head}</tr>{''.join(rows)}</table>"
    )


def write_html(results: Sequence[SimResult], plots: Sequence[Path], out: Path, title: str) -> Path:
    """A self-contained page (plots referenced by relative path) summarising the comparison."""
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in _COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_cell(f, getattr(r, f))}</td>" for f, _ in _COLUMNS) + "</tr>"
        for r in results
    )
    figures = "".join(
        f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}">'
        f"<figcaption>{html.escape(p.stem.replace('_', ' '))}</figcaption></figure>"
        for p in plots
    )
    first = results[0] if results else None
    meta = (
        f"trace {html.escape(first.trace)}, cluster {html.escape(first.cluster)} "
        f"({first.total_gpus} GPUs), congestion {html.escape(first.congestion)}, seed {first.seed}"
        if first
        else ""
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
figure {{ display: inline-block; margin: 1em; }}
img {{ max-width: 640px; }}
</style></head>
<body><h1>{html.escape(title)}</h1><p>{meta}</p>
<table><tr>{head}</tr>{rows}</table>
{gpu_type_table(results)}
{figures}
</body></html>
"""
    return write_text_atomically(out / "report.html", page)

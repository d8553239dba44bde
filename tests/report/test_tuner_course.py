"""The comparison report plots the look-ahead tuner's course (issue #39 item 5): the setting
``dally`` chose over time, from the run's telemetry; no such plot for runs without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from unstall.report import sim_report
from unstall.report.sim_report import write_html, write_plots
from unstall.sched.dally.lookahead_config import LookaheadConfig
from unstall.sim import simulate
from unstall.sim.lookahead import LookaheadDally
from unstall.traces import default_trace


def test_the_report_plots_the_tuners_choices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Figure] = []
    saving = sim_report.save

    def keep(fig: Figure, path: Path) -> Path:
        if path.name == "tuner_course.png":
            drawn.append(fig)
        return saving(fig, path)

    monkeypatch.setattr(sim_report, "save", keep)
    tuned = LookaheadDally(LookaheadConfig(period_s=600.0, horizon_s=1800.0))
    runs = {
        "dally": simulate(default_trace(), "small", tuned, max_jobs=60),
        "fifo": simulate(default_trace(), "small", "fifo", max_jobs=60),
    }
    assert tuned.history
    assert (runs["dally"].telemetry["name"] == "tuner.choice").any()
    results = [r.result for r in runs.values()]
    plots = write_plots(
        results,
        {p: r.jobs for p, r in runs.items()},
        {p: r.timeline for p, r in runs.items()},
        tmp_path,
        {p: r.telemetry for p, r in runs.items()},
    )
    assert tmp_path / "tuner_course.png" in plots
    png = (tmp_path / "tuner_course.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    # The figure holds the run's choices as its step line, and the candidates as its labels.
    (course, *_), labels = drawn[0].axes[0].lines, drawn[0].axes[0].get_yticklabels()
    frame = runs["dally"].telemetry
    choices = frame[frame["name"] == "tuner.choice"]
    assert list(course.get_xdata()) == list(choices["time_s"] / 3600.0)
    assert list(course.get_ydata()) == list(choices["value"])
    scored = frame.loc[frame["name"].str.startswith("tuner.score."), "name"]
    names = list(dict.fromkeys(n.removeprefix("tuner.score.") for n in scored))
    assert [t.get_text() for t in labels] == names and len(names) > 1
    assert "tuner_course.png" in write_html(results, plots, tmp_path, "tuned").read_text()
    without = write_plots(
        results[1:], {"fifo": runs["fifo"].jobs}, {"fifo": runs["fifo"].timeline}, tmp_path
    )
    assert not any(p.name == "tuner_course.png" for p in without)

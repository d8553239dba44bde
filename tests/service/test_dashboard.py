"""The dashboard's pages and /metrics without a browser: what the fragments hold (escaped), the
reports read from a job's log, the plots' geometry, the history's bounds, and the metrics'
values against the service's state."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service_helpers import unstarted_service
from unstall.loop.events import RoundRecord
from unstall.service import charts
from unstall.service.api import create_app
from unstall.service.history import History, Sample
from unstall.service.joblog import ReportReader, parse_report, tail
from unstall.service.service import read_tokens

EVIL = "<script>alert(1)</script>"
ALICE = "alice-token-0123456789"


@pytest.fixture
def api(tmp_path: Path) -> TestClient:
    return TestClient(
        create_app(unstarted_service(tmp_path / "store")), headers={"X-Unstall-User": "alice"}
    )


def _submit(api: TestClient, **spec: object) -> dict[str, object]:
    body = {"gpus": 2, "model": "resnet50", "duration_s": 60.0, **spec}
    answer = api.post("/api/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_the_pages_hold_no_data_and_the_fragments_list_the_jobs(api: TestClient) -> None:
    job = _submit(api, name="r50")
    shell = api.get("/")
    assert shell.status_code == 200 and 'data-fragment="/ui/overview"' in shell.text
    assert "r50" not in shell.text  # the data comes with the fragment, behind the token
    # Scripts from the page's own origin only: no inline script runs, whatever a name holds.
    assert shell.headers["content-security-policy"].startswith("default-src 'self';")
    assert "script-src" not in shell.headers["content-security-policy"]
    overview = api.get("/ui/overview").text
    assert f'data-job="{job["id"]}"' in overview and "r50" in overview
    assert "executors are coming up" in overview  # no scheduler started here
    assert api.get("/static/dashboard.js").status_code == 200


def test_whatever_a_user_sent_is_shown_as_text(api: TestClient, tmp_path: Path) -> None:
    job = _submit(api, name=EVIL, files={"a.py": EVIL})
    log = tmp_path / "store" / "logs" / f"{job['id']}.log"
    log.write_text(f"[rank 0] {EVIL}\n")
    for url in ("/ui/overview", f"/ui/jobs/{job['id']}"):
        html = api.get(url).text
        assert EVIL not in html, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, url
    assert EVIL not in api.get(f"/jobs/{EVIL}").text  # a job id in the path, too


def test_the_fragments_need_the_token_where_the_service_has_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE} alice\n")
    api = TestClient(create_app(unstarted_service(tmp_path / "store", read_tokens(tokens))))
    assert api.get("/").status_code == 200  # the page, which asks for the token
    assert 'data-tokens="1"' in api.get("/").text
    for url in ("/ui/overview", "/ui/jobs/job-1", "/metrics"):
        assert api.get(url).status_code == 401, url
    signed = {"Authorization": f"Bearer {ALICE}"}
    assert api.get("/ui/overview", headers=signed).status_code == 200
    assert api.get("/ui/jobs/job-1", headers=signed).status_code == 404


def test_a_job_page_plots_the_reports_in_its_log(api: TestClient, tmp_path: Path) -> None:
    job = _submit(api)
    lines = [f'[rank 0] report {{"step": {s}, "loss": {1.0 / s}}}' for s in range(10, 60, 10)]
    lines.insert(2, '[rank 1] report {"step": 20, "loss": 99.0}')  # another rank's: not plotted
    (tmp_path / "store" / "logs" / f"{job['id']}.log").write_text("\n".join(lines) + "\n")
    html = api.get(f"/ui/jobs/{job['id']}").text
    assert "loss per step" in html and 'data-points="5"' in html
    assert html.count('<circle class="point"') == 5
    assert "loss: 0.02 at step 50" in html  # a point's tooltip


def test_reports_are_read_as_the_log_grows(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    reader = ReportReader()
    assert reader.metrics(log) == {}
    log.write_text('[rank 0] report {"step": 1, "loss": 2.0, "acc": 0.5}\n[rank 0] rep')
    assert reader.metrics(log) == {"loss": [(1.0, 2.0)], "acc": [(1.0, 0.5)]}
    with open(log, "a") as more:  # the half-written line completes; a resumed job repeats step 1
        more.write('ort {"step": 2, "loss": 1.5}\n[rank 0] report {"step": 1, "loss": 1.9}\n')
    assert reader.metrics(log)["loss"] == [(1.0, 1.9), (2.0, 1.5)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('[rank 0] report {"step": 3, "loss": 0.5}', {"step": 3.0, "loss": 0.5}),
        ('report {"step": 3, "loss": 0.5}', {"step": 3.0, "loss": 0.5}),
        ('[rank 2] report {"step": 3, "loss": 0.5}', None),
        ('[rank 0] report {"loss": 0.5}', None),
        ("[rank 0] report {not json}", None),
        ('[rank 0] report {"step": 3, "loss": NaN, "tag": "x"}', {"step": 3.0}),
        ("[rank 0] checkpoint at step 3", None),
    ],
)
def test_a_report_line(line: str, expected: dict[str, float] | None) -> None:
    assert parse_report(line) == expected


def test_the_tail_starts_at_a_whole_line(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    end = tail(log, size=100)
    assert end.startswith("line ") and end.endswith("line 999\n") and len(end) <= 100
    assert tail(tmp_path / "none.log") == ""


def test_a_plot_fits_its_points_inside_its_axes() -> None:
    chart = charts.plot("p", {"a": [(0.0, 1.0), (10.0, 3.0)], "b": [(5.0, -1.0)]})
    assert chart.points == 3 and not chart.empty
    for series in chart.series:
        for x, y, _ in series.dots:
            assert chart.left <= x <= chart.right and chart.top <= y <= chart.bottom
    labels = [float(label) for _, label in chart.y_ticks]
    assert labels[0] <= -1.0 and labels[-1] >= 3.0
    assert charts.plot("p", {"a": []}, empty="none yet").empty == "none yet"
    assert charts.plot("p", {"a": [(0.0, 1.0), (1.0, 2.0)]}, dots_only=True).series[0].line == ""
    many = charts.plot("p", {"a": [(float(i), float(i)) for i in range(5000)]})
    assert many.points == charts.MAX_POINTS and many.series[0].dots[-1][0] == chart.right


def test_ticks_are_round_and_cover_the_range() -> None:
    assert charts.nice_ticks(0.0, 1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert charts.nice_ticks(3.0, 97.0) == [0.0, 25.0, 50.0, 75.0, 100.0]
    ticks = charts.time_ticks(1000.0, 1000.0 + 3600)
    assert ticks == [1800, 2700, 3600, 4500]  # every 15 minutes
    assert charts.job_colour("job-3") == charts.job_colour("job-3") != charts.job_colour("job-4")


def test_the_history_keeps_a_sample_every_few_seconds_for_its_hours() -> None:
    history = History(every_s=5.0, hours=1.0)
    kept = [
        history.observe(Sample(at=t, busy=1, free=3, lost=0, queued=0, running=1))
        for t in (0, 1, 5, 9, 10)
    ]
    assert kept == [True, False, True, False, True]
    for t in range(15, 5 * 3000, 5):
        history.observe(Sample(at=float(t), busy=2, free=0, lost=2, queued=1, running=1))
    samples = history.samples()
    assert len(samples) == 720  # an hour of samples 5 s apart, no more
    assert samples[-1].utilisation == 1.0 and history.samples(since=samples[-1].at) == samples[-1:]


def _metrics(api: TestClient) -> dict[str, float]:
    answer = api.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def test_metrics_say_what_the_service_holds(api: TestClient) -> None:
    _submit(api)
    _submit(api, gpus=1)
    service = api.app.state.service  # type: ignore[attr-defined]
    core = service.scheduler.core
    core.round_records.extend(
        RoundRecord(
            time_s=0, decide_wall_s=s, apply_wall_s=0.0001, starts=0, preemptions=0, migrations=0
        )
        for s in (0.0002, 0.003, 0.3)
    )
    core.rounds, core.preemptions, core.migrations = 3, 2, 1
    values = _metrics(api)
    assert values["unstall_jobs{state=pending}"] == 2 and values["unstall_jobs{state=running}"] == 0
    assert values["unstall_queue_length{}"] == 2
    assert values["unstall_gpus{state=free}"] == 4 and values["unstall_gpus{state=busy}"] == 0
    assert values["unstall_scheduler_rounds_total{}"] == 3
    assert values["unstall_preemptions_total{}"] == 2 and values["unstall_migrations_total{}"] == 1
    assert values["unstall_decision_seconds_count{}"] == 3
    assert values["unstall_decision_seconds_bucket{le=0.0005}"] == 1
    assert values["unstall_decision_seconds_bucket{le=0.005}"] == 2
    assert math.isclose(values["unstall_decision_seconds_sum{}"], 0.3032)
    # Scraped again: the rounds are not counted twice; new ones are added.
    core.round_records.append(
        RoundRecord(
            time_s=1, decide_wall_s=0.001, apply_wall_s=0, starts=1, preemptions=0, migrations=0
        )
    )
    assert _metrics(api)["unstall_decision_seconds_count{}"] == 4
    # No estimates yet: the estimates' error has no observation.
    assert values["unstall_estimate_start_error_seconds_count{}"] == 0
    # A job that started 30 s after its start estimated at submit: one observation of 30 s.
    from unstall.service.scheduler import JobStatus, Snapshot

    first = next(iter(service.stored))
    started = JobStatus(
        state="running",
        placement="0:1",
        done_iters=0.0,
        total_iters=1.0,
        restarts=0,
        started_at=2000.0,
        ended_at=None,
        error="",
    )
    service.scheduler.snapshot = Snapshot(at=2000.0, jobs={first: started})
    service.scheduler.estimator.first_starts[first] = 1970.0
    values = _metrics(api)
    assert values["unstall_estimate_start_error_seconds_count{}"] == 1
    assert values["unstall_estimate_start_error_seconds_sum{}"] == 30.0


def test_start_up_and_restore_times_are_wall_seconds(api: TestClient) -> None:
    from unstall.live.segments import JobRecord as LiveRecord

    service = api.app.state.service  # type: ignore[attr-defined]
    service.scheduler.records["job-1"] = LiveRecord(startup_s=3.0, restore_s=[1.0, 2.0])
    values = _metrics(api)
    assert values["unstall_job_startup_seconds_count{}"] == 1
    assert values["unstall_job_startup_seconds_sum{}"] == 3.0  # speedup 1: trace = wall seconds
    assert values["unstall_job_restore_seconds_count{}"] == 2
    assert values["unstall_job_restore_seconds_bucket{le=1.0}"] == 1


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    first = TestClient(
        create_app(unstarted_service(tmp_path / "a")), headers={"X-Unstall-User": "a"}
    )
    second = TestClient(
        create_app(unstarted_service(tmp_path / "b")), headers={"X-Unstall-User": "b"}
    )
    _submit(first)
    assert _metrics(first)["unstall_jobs{state=pending}"] == 1
    assert _metrics(second)["unstall_jobs{state=pending}"] == 0

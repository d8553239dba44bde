"""The service's dashboard: web pages served by the API's own app, with no build step.

| path | what |
|---|---|
| ``/`` | the cluster (each GPU with its job), the queue, running and ended jobs, history, submit |
| ``/jobs/{id}`` | one job: record and spec, events as a timeline, reported metrics, its log's end |
| ``/ui/overview``, ``/ui/jobs/{id}`` | the same pages' data, as HTML fragments the pages poll |
| ``/static/...`` | the pages' script and style (in the package) |

The pages themselves hold no data: their script fetches the fragments (every
:data:`POLL_MS` ms, so the pages update without a reload) with the token the page asked for and
keeps in the browser, sent as ``Authorization: Bearer`` like every API call (or, where the
service has no tokens, the user name the page asks for, as ``X-Unstall-User``). The fragments
are Jinja2 templates with autoescaping: whatever a user sent (a job's name, spec, log) is
shown as text, never as markup. Plots are SVG drawn on the server (:mod:`.charts`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from unstall.sched.reasons import duration_words
from unstall.service import charts
from unstall.service.auth import Who
from unstall.service.history import Sample
from unstall.service.joblog import ReportReader, tail
from unstall.service.models import ClusterRecord, JobDetail, JobRecord
from unstall.service.service import Service

HERE = Path(__file__).parent
# How often the pages fetch their data again (milliseconds).
POLL_MS = 2000
# Ended jobs the overview lists (the latest).
ENDED_SHOWN = 25
# Event kinds and their colours on a job's timeline.
EVENT_COLOURS = {
    "submitted": "#718096",
    "started": "#2f855a",
    "migrated": "#2b6cb0",
    "preempted": "#dd6b20",
    "failed": "#c53030",
    "requeued": "#805ad5",
    "cancel_requested": "#4a5568",
    "cancelled": "#4a5568",
    "succeeded": "#22543d",
    "gave_up": "#9b2c2c",
}
_RUNNING_FROM = ("started", "migrated")
_RUNNING_UNTIL = ("preempted", "failed", "requeued", "succeeded", "cancelled", "gave_up")


def when(at: float | None) -> str:
    """A wall time as the pages show it (UTC), blank where there is none."""
    return "" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def duration(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3.5 h``: a duration in its own unit, blank where none."""
    return "" if seconds is None else duration_words(seconds)


def environment() -> jinja2.Environment:
    """The templates, every value escaped unless a template says otherwise (none does)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(colour=charts.job_colour, when=when, duration=duration)
    env.globals.update(event_colours=EVENT_COLOURS, poll_ms=POLL_MS)
    return env


@dataclass(frozen=True)
class GpuView:
    job: str  # "" where free
    title: str


@dataclass(frozen=True)
class NodeView:
    index: int
    gpu_type: str
    lost: bool
    gpus: tuple[GpuView, ...]


def racks(cluster: ClusterRecord, by_id: dict[str, JobRecord]) -> list[tuple[int, list[NodeView]]]:
    """The cluster's nodes by rack, each GPU with the job on it and a tooltip."""
    grouped: dict[int, list[NodeView]] = {}
    for node in cluster.nodes:
        gpus = []
        for slot, job in enumerate(node.jobs):
            record = by_id.get(job)
            if node.lost:
                title = f"node {node.index} GPU {slot}: lost"
            elif not job:
                title = f"node {node.index} GPU {slot}: free"
            else:
                who = f" {record.name} ({record.user})" if record is not None else ""
                title = f"node {node.index} GPU {slot}: {job}{who}"
            gpus.append(GpuView(job=job, title=title))
        grouped.setdefault(node.rack, []).append(
            NodeView(node.index, node.gpu_type, node.lost, tuple(gpus))
        )
    return sorted(grouped.items())


def history_charts(
    service: Service, records: list[JobRecord], cluster: ClusterRecord, now: float
) -> list[charts.Chart]:
    """Utilisation, the queue and JCTs over the history's hours (the present as the last point)."""
    history = service.scheduler.history
    since = now - history.hours * 3600
    samples = history.samples(since)
    samples.append(
        Sample(
            at=now,
            busy=cluster.busy_gpus,
            free=cluster.free_gpus,
            lost=cluster.lost_gpus,
            queued=cluster.pending,
            running=cluster.running,
        )
    )
    jcts = sorted(
        (r.ended_at, r.ended_at - r.submitted_at)
        for r in records
        if r.state == "succeeded" and r.ended_at is not None and r.ended_at >= since
    )
    return [
        charts.plot(
            "GPU utilisation (% of the GPUs up)",
            {"busy": [(s.at, 100 * s.utilisation) for s in samples]},
            x_format=charts.clock,
            x_time=True,
            y_floor=0,
            y_ceiling=100,
        ),
        charts.plot(
            "jobs queued and running",
            {
                "queued": [(s.at, float(s.queued)) for s in samples],
                "running": [(s.at, float(s.running)) for s in samples],
            },
            x_format=charts.clock,
            x_time=True,
            y_floor=0,
        ),
        charts.plot(
            "job completion times (by when they ended)",
            {"JCT": jcts},
            x_format=charts.clock,
            x_time=True,
            y_format=lambda s: duration(s) or "0 s",
            y_floor=0,
            dots_only=True,
            empty=f"no job has finished in the last {history.hours:g} hours",
        ),
    ]


def overview(service: Service) -> dict[str, Any]:
    """What the overview fragment shows."""
    now = time.time()
    cluster = service.cluster()
    records = service.jobs()
    by_id = {r.id: r for r in records}
    ended = [r for r in records if r.state in ("succeeded", "failed", "cancelled")]
    ended.sort(key=lambda r: r.ended_at or r.submitted_at, reverse=True)
    return {
        "cluster": cluster,
        "racks": racks(cluster, by_id),
        "queue": sorted(
            (r for r in records if r.state == "pending"), key=lambda r: r.position or 0
        ),
        "running": sorted(
            (r for r in records if r.state == "running"), key=lambda r: r.started_at or 0
        ),
        "ended": ended[:ENDED_SHOWN],
        "ended_total": len(ended),
        "charts": history_charts(service, records, cluster, now),
        "ready": service.scheduler.ready.is_set(),
        "now": now,
    }


@dataclass(frozen=True)
class Timeline:
    """A job's life on a time axis: its running spans and its events (x in pixels)."""

    spans: tuple[tuple[float, float, str], ...]
    marks: tuple[tuple[float, str, str], ...]  # x, kind, tooltip
    ticks: tuple[tuple[float, str], ...]
    width: int = charts.WIDTH * 2
    left: int = 10
    right: int = charts.WIDTH * 2 - 10


def timeline(detail: JobDetail, now: float) -> Timeline:
    """Spans from each start (or migration) to what stopped it; a mark per event."""
    start = detail.submitted_at
    end = detail.ended_at or max([now, *(e.at for e in detail.events)])
    span = max(end - start, 1e-6)
    base = Timeline(spans=(), marks=(), ticks=())

    def px(at: float) -> float:
        return round(base.left + (at - start) / span * (base.right - base.left), 1)

    spans, marks, began = [], [], None
    for event in detail.events:
        if event.kind in _RUNNING_FROM:
            if began is not None:
                spans.append((px(began[0]), px(event.at), began[1]))
            began = (event.at, event.detail)
        elif event.kind in _RUNNING_UNTIL and began is not None:
            spans.append((px(began[0]), px(event.at), began[1]))
            began = None
        tip = f"{when(event.at)} {event.kind}" + (f": {event.detail}" if event.detail else "")
        marks.append((px(event.at), event.kind, tip))
    if began is not None:
        spans.append((px(began[0]), px(end), began[1]))
    ticks = tuple(
        (px(t), charts.clock(t)) for t in charts.time_ticks(start, end, 8) if start <= t <= end
    )
    return Timeline(
        spans=tuple((a, max(b, a + 2), f"on {p}") for a, b, p in spans),
        marks=tuple(marks),
        ticks=ticks,
    )


def job_page(service: Service, reader: ReportReader, job_id: str) -> dict[str, Any]:
    """What a job's fragment shows."""
    detail = service.job(job_id)
    spec = detail.spec.model_dump(exclude={"files"}, exclude_none=True)
    files = [(name, len(text.encode())) for name, text in detail.spec.files.items()]
    log = service.store.log_path(job_id)
    metrics = reader.metrics(log)
    plots = [
        charts.plot(
            f"{name} per step",
            {name: points},
            x_format=lambda s: f"step {s:.0f}",
        )
        for name, points in metrics.items()
    ]
    return {
        "job": detail,
        "spec": spec,
        "files": files,
        "timeline": timeline(detail, time.time()),
        "plots": plots,
        "log": tail(log),
    }


def install_dashboard(app: FastAPI, service: Service) -> None:
    """The dashboard's routes on the API's app (see the module docstring)."""
    env = environment()
    reader = ReportReader()
    tokens = service.tokens is not None

    def page(name: str, **values: Any) -> HTMLResponse:
        html = env.get_template(name).render(tokens=tokens, **values)
        # The pages run only their own script: no inline script, nothing from elsewhere (style
        # attributes are allowed: the GPUs' and jobs' colours).
        headers = {
            "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
        }
        return HTMLResponse(html, headers=headers)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> HTMLResponse:
        return page("index.html", fragment="/ui/overview")

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def job(job_id: str) -> HTMLResponse:
        return page("job.html", job_id=job_id, fragment=f"/ui/jobs/{job_id}")

    @app.get("/ui/overview", response_class=HTMLResponse, include_in_schema=False)
    def overview_fragment(who: Who) -> HTMLResponse:
        return page("_overview.html", **overview(service))

    @app.get("/ui/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def job_fragment(job_id: str, who: Who) -> HTMLResponse:
        return page("_job.html", **job_page(service, reader, job_id))

    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

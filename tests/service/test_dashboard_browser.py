"""The dashboard in a real browser (Chromium, driven by Playwright): what a person sees.

Most tests drive a service whose scheduler is not started (no Ray), answering HTTP in a thread:
the page lists the jobs and updates itself, names are text, a job the scheduler places shows
on its GPUs within a poll, a bad submission shows the error,
a service with tokens asks for one and cancels with it, a job's page plots its reports. One test
(slow: a local Ray cluster) runs a real ``unstall serve`` on an emulated cluster: a job started
by the service shows on its GPUs within seconds, and cancelling it from the page ends it.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from live_runs import TWO_NODES
from service_helpers import START_S, serve_process, serving, unstarted_service
from unstall.service.dashboard import POLL_MS
from unstall.service.scheduler import JobStatus, Snapshot
from unstall.service.service import read_tokens

pytestmark = pytest.mark.browser

EVIL = "<script>alert(1)</script>"
ALICE = "alice-token-0123456789"
SPEC = {"gpus": 2, "model": "resnet50", "duration_s": 60.0}


# Seconds a request may take: a service's first submission loads the perf model (seconds on a
# busy machine), and what the page shows gets as long to appear.
SLOW_S = 60.0


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    playwright_expect.set_options(timeout=SLOW_S * 1000)
    return playwright_expect(locator)


def _submit(url: str, headers: dict[str, str], **spec: object) -> dict[str, Any]:
    answer = httpx.post(f"{url}/api/jobs", json={**SPEC, **spec}, headers=headers, timeout=SLOW_S)
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_the_page_lists_jobs_updates_itself_and_shows_names_as_text(
    page: Any, tmp_path: Path
) -> None:
    with serving(unstarted_service(tmp_path / "store")) as url:
        who = {"X-Unstall-User": "alice"}
        _submit(url, who, name=EVIL)
        page.goto(url)
        row = page.locator('#queue tr[data-job="job-1"]')
        expect(row.locator(".name")).to_have_text(EVIL)
        expect(row).to_contain_text("alice")
        expect(page.locator("#free-gpus")).to_have_text("4")
        assert page.locator(".gpu.free").count() == 4
        # A job submitted elsewhere shows without a reload.
        _submit(url, who, name="later")
        expect(page.locator('#queue tr[data-job="job-2"] .name')).to_have_text("later")
        assert page.dialogs == []  # the name's script never ran
        assert page.locator("script").count() == 1  # the page's own, and no other


def test_a_job_the_scheduler_places_shows_on_its_gpus_within_seconds(
    page: Any, tmp_path: Path
) -> None:
    service = unstarted_service(tmp_path / "store")
    with serving(service) as url:
        _submit(url, {"X-Unstall-User": "alice"}, name="r50")
        page.goto(url)
        expect(page.locator('#queue tr[data-job="job-1"]')).to_be_visible()
        # What the scheduler publishes once it has placed the job on node 1's two GPUs.
        started = time.time()
        service.scheduler.snapshot = Snapshot(
            at=started,
            jobs={"job-1": JobStatus("running", "1:2", 10.0, 100.0, 0, started, None, "")},
            free_by_node=(2, 0),
            holders={(1, 0): "job-1", (1, 1): "job-1"},
        )
        busy = page.locator('.gpu.busy[data-job="job-1"]')
        while busy.count() < 2:
            assert time.time() - started < POLL_MS / 1000 + 3.0, "not on its GPUs in time"
            time.sleep(0.05)
        assert page.locator('.node[data-node="1"] .gpu.busy').count() == 2
        expect(page.locator('#running tr[data-job="job-1"]')).to_contain_text("1:2")
        expect(page.locator("#busy-gpus")).to_have_text("2")
        assert page.locator("#queue").count() == 0


def test_a_bad_submission_shows_the_error_and_a_good_one_is_listed(
    page: Any, tmp_path: Path
) -> None:
    with serving(unstarted_service(tmp_path / "store")) as url:
        page.goto(url)
        page.fill("#who-user", "carol")
        page.click("#who button")
        expect(page.locator("#who-now")).to_have_text("as carol")
        page.fill('#submit input[name="gpus"]', "99")
        page.click('#submit button[type="submit"]')
        expect(page.locator("#message")).to_have_text(
            "Not submitted: gpus: 99 GPUs asked, the cluster has 4"
        )
        assert httpx.get(f"{url}/api/jobs", timeout=SLOW_S).json() == []
        page.fill('#submit input[name="gpus"]', "1")
        page.fill('#submit input[name="name"]', "mine")
        page.click('#submit button[type="submit"]')
        expect(page.locator("#message")).to_have_text("Submitted job-1 (mine).")
        expect(page.locator('#queue tr[data-job="job-1"]')).to_contain_text("carol")
        (stored,) = httpx.get(f"{url}/api/jobs", timeout=SLOW_S).json()
        assert stored["user"] == "carol" and stored["gpus"] == 1 and stored["name"] == "mine"


def test_a_service_with_tokens_asks_for_one_and_cancels_with_it(page: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE} alice\n")
    service = unstarted_service(tmp_path / "store", read_tokens(tokens))
    with serving(service) as url:
        _submit(url, {"Authorization": f"Bearer {ALICE}"}, name="r50")
        page.goto(url)
        expect(page.locator("#message")).to_contain_text("needs a token")
        assert page.locator("#queue").count() == 0  # nothing shown without it
        page.fill("#who-token", "wrong-token-0123456789")
        page.click("#who button")
        expect(page.locator("#message")).to_contain_text("needs a token")
        page.fill("#who-token", ALICE)
        page.click("#who button")
        row = page.locator('#queue tr[data-job="job-1"]')
        expect(row).to_contain_text("r50")
        row.locator("button.cancel").click()
        expect(page.locator("#message")).to_have_text("Cancelling job-1.")
        events = service.store.events("job-1")
        assert [(e.kind, e.detail) for e in events][-1] == ("cancel_requested", "alice")


def test_a_job_page_plots_its_reported_metrics_and_shows_its_log(page: Any, tmp_path: Path) -> None:
    service = unstarted_service(tmp_path / "store")
    with serving(service) as url:
        _submit(url, {"X-Unstall-User": "alice"}, name="loop")
        reports = [f'[rank 0] report {{"step": {s}, "loss": {2.0 / s}}}' for s in range(1, 9)]
        log = service.store.log_path("job-1")
        log.write_text("\n".join([*reports, f"[rank 0] {EVIL}"]) + "\n")
        page.goto(f"{url}/jobs/job-1")
        plot = page.locator('figure.chart:has-text("loss per step") svg')
        expect(plot).to_have_attribute("data-points", "8")
        assert plot.locator("circle.point").count() == 8
        expect(page.locator("#events")).to_contain_text("submitted")
        expect(page.locator("#log")).to_contain_text(EVIL)
        # More reports come: the plot grows without a reload.
        with open(log, "a") as more:
            more.write('[rank 0] report {"step": 9, "loss": 0.2}\n')
        expect(plot).to_have_attribute("data-points", "9")
        assert page.dialogs == []


@pytest.mark.slow  # a local Ray cluster and its executors: about 100 s on a busy 2-core machine
def test_a_job_the_service_starts_shows_on_its_gpus_and_cancel_from_the_page_ends_it(
    page: Any, tmp_path: Path
) -> None:
    cluster = tmp_path / "two.toml"
    cluster.write_text(TWO_NODES)
    log = tmp_path / "serve.log"
    process, url = serve_process(tmp_path / "store", cluster, log)
    try:
        page.goto(url)
        page.fill("#who-user", "ann")
        page.click("#who button")
        page.fill('#submit input[name="gpus"]', "2")
        page.fill('#submit input[name="length"]', "6000")  # 300 wall seconds at speedup 20
        page.click('#submit button[type="submit"]')
        expect(page.locator("#message")).to_have_text("Submitted job-1 (resnet50).")
        busy = page.locator('.gpu.busy[data-job="job-1"]')
        deadline = time.monotonic() + START_S
        while busy.count() < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        seen = time.time()
        record = httpx.get(f"{url}/api/jobs/job-1", timeout=SLOW_S).json()
        assert record["state"] == "running" and record["started_at"] is not None
        assert seen - record["started_at"] < 5.0  # on the page within seconds of its start
        expect(page.locator("#busy-gpus")).to_have_text("2")
        page.goto(f"{url}/jobs/job-1")
        expect(page.locator("#job-state")).to_have_text("running")
        page.locator("button.cancel").click()
        expect(page.locator("#job-state")).to_have_text("cancelled")
        expect(page.locator("#events")).to_contain_text("cancel_requested")
        page.goto(url)
        expect(page.locator("#busy-gpus")).to_have_text("0")
        metrics = httpx.get(
            f"{url}/metrics", headers={"X-Unstall-User": "ann"}, timeout=SLOW_S
        ).text
        assert 'unstall_jobs{state="cancelled"} 1.0' in metrics
        assert "unstall_job_startup_seconds_count 1.0" in metrics
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)

"""The dashboard's screenshots in docs/ (docs/service.md shows them), taken from a real service.

Starts ``unstall serve`` on the ``tiny`` preset (4 nodes x 4 GPUs, emulated on a local Ray, the
default policy, speedup 30), waits for its executors, submits jobs of three users in waves for
about two minutes (some finish, one is cancelled, some wait), then has headless Chromium
(Debian's, driven by Playwright) take the overview and one job's page. Needs ``apt-get install
chromium-headless-shell`` (or UNSTALL_CHROMIUM naming another Chromium).

    .venv/bin/python scripts/dashboard_screenshots.py [--out docs] [--wait-s 120]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from unstall.service import Client

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
# (user, GPUs, model, run seconds) per wave; waves are submitted WAVE_S wall seconds apart.
WAVES = (
    [("ann", 4, "resnet50", 2400.0), ("bob", 2, "vgg16", 300.0), ("cy", 1, "alexnet", 200.0)],
    [
        ("bob", 8, "resnet18", 3000.0),
        ("ann", 2, "resnet50", 400.0),
        ("cy", 1, "mobilenet_v2", 250.0),
    ],
    [("cy", 4, "transformer", 900.0), ("ann", 1, "alexnet", 300.0), ("bob", 2, "vgg16", 600.0)],
    [("ann", 8, "resnet50", 1800.0), ("cy", 2, "resnet18", 500.0), ("bob", 16, "resnet50", 600.0)],
)
WAVE_S = 25.0


def serve(store: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A service on ``store``; returns it and its URL once it answers."""
    command = [sys.executable, "-m", "unstall", "serve", "--cluster", "tiny", "--store", str(store)]
    command += ["--port", "0", "--speedup", "30"]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"serving on (http://\S+)", log.read_text())
        if found:
            return process, found.group(1)
        time.sleep(0.2)
    process.kill()
    raise SystemExit("the service did not answer:\n" + log.read_text())


def wait_ready(client: Client, timeout_s: float = 600.0) -> None:
    """Until the service's executors are up (its jobs start from then on)."""
    deadline = time.monotonic() + timeout_s
    while not httpx.get(f"{client.url}/api/stats", timeout=30).json()["ready"]:
        if time.monotonic() > deadline:
            raise SystemExit("the service's executors did not come up")
        time.sleep(1.0)


def submit_waves(client: Client, wait_s: float) -> str:
    """The waves of jobs, one job cancelled; returns the id of a job worth a page."""
    wait_ready(client)
    began = time.monotonic()
    ids = []
    for wave in WAVES:
        for user, gpus, model, seconds in wave:
            as_user = Client(client.url, user=user)
            ids.append((as_user.submit(gpus=gpus, model=model, duration_s=seconds).id, user))
        time.sleep(WAVE_S)
    cancelled, owner = ids[-1]  # the whole cluster's job: it waits
    Client(client.url, user=owner).cancel(cancelled)
    time.sleep(max(0.0, wait_s - (time.monotonic() - began)))
    return ids[0][0]


def screenshots(url: str, job_id: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("UNSTALL_CHROMIUM") or shutil.which("chromium-headless-shell")
    chromium = chromium or shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install chromium-headless-shell")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for path, name in (("/", "dashboard.png"), (f"/jobs/{job_id}", "dashboard-job.png")):
            page.goto(url + path)
            page.wait_for_selector("#live[data-updated]")
            page.screenshot(path=str(out / name), full_page=True)
            print(f"wrote {out / name}")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--wait-s", type=float, default=120.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="unstall-shots-") as folder:
        process, url = serve(Path(folder) / "store", Path(folder) / "serve.log")
        try:
            job_id = submit_waves(Client(url), options.wait_s)
            screenshots(url, job_id, options.out)
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(120)


if __name__ == "__main__":
    main()

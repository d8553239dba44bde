"""The service's API from Python: ``Client(url, token=)``.

>>> from unstall.service import Client  # doctest: +SKIP
>>> client = Client("http://127.0.0.1:8470")  # doctest: +SKIP
>>> job = client.submit(gpus=2, model="resnet50", duration_s=600)  # doctest: +SKIP
>>> client.wait(job.id).state  # doctest: +SKIP
'succeeded'
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from unstall.errors import UnstallError
from unstall.service.models import ClusterRecord, JobDetail, JobRecord, JobSpec, WhatIf

DEFAULT_URL = "http://127.0.0.1:8470"
ENDED = ("succeeded", "failed", "cancelled")


class ClientError(UnstallError):
    """The service refused a request (``status``: its HTTP status) or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


def default_url() -> str:
    return os.environ.get("UNSTALL_SERVER") or DEFAULT_URL


class Client:
    """One service at ``url`` (default ``UNSTALL_SERVER``, then ``http://127.0.0.1:8470``);
    ``token``: a Bearer token where the service has a token file; ``user``: who submits and
    cancels where it has none (default: this login)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        user: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.url = (url or default_url()).rstrip("/")
        headers = {"X-Unstall-User": user or _login()}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- the calls -----------------------------------------------------------------------------

    def submit(self, spec: JobSpec | None = None, /, **fields: Any) -> JobRecord:
        """Submit ``spec`` (or the spec's fields as keywords); the job's record."""
        body = (spec or JobSpec(**fields)).model_dump(exclude_defaults=True)
        return JobRecord.model_validate(self._call("POST", "/api/jobs", json=body))

    def list(self, *, state: str | None = None, user: str | None = None) -> list[JobRecord]:
        params = {k: v for k, v in (("state", state), ("user", user)) if v is not None}
        return [JobRecord.model_validate(r) for r in self._call("GET", "/api/jobs", params=params)]

    def get(self, job_id: str) -> JobDetail:
        return JobDetail.model_validate(self._call("GET", f"/api/jobs/{job_id}"))

    def cancel(self, job_id: str) -> JobRecord:
        return JobRecord.model_validate(self._call("POST", f"/api/jobs/{job_id}/cancel"))

    def logs(self, job_id: str, offset: int = 0) -> tuple[str, int]:
        """The job's log from byte ``offset``, and the offset to ask from next."""
        answer = self._request("GET", f"/api/jobs/{job_id}/logs", params={"offset": offset})
        return answer.text, int(answer.headers.get("X-Next-Offset", offset))

    def follow(self, job_id: str, poll_s: float = 1.0) -> Iterator[str]:
        """The job's log as it grows, until the job has ended and all of it was read."""
        offset = 0
        while True:
            text, offset = self.logs(job_id, offset)
            if text:
                yield text
                continue
            if self.get(job_id).state in ENDED:
                text, offset = self.logs(job_id, offset)
                if text:
                    yield text
                return
            time.sleep(poll_s)

    def cluster(self) -> ClusterRecord:
        return ClusterRecord.model_validate(self._call("GET", "/api/cluster"))

    def stats(self) -> dict[str, Any]:
        """The scheduler: whether it is up (``ready``), its rounds and what they cost."""
        return dict(self._call("GET", "/api/stats"))

    def whatif(self, policies: Sequence[str] = ()) -> WhatIf:
        """The queue as it is, forecast under the serving policy and each of ``policies``."""
        params = [("policy", name) for name in policies]
        return WhatIf.model_validate(self._call("GET", "/api/whatif", params=params))

    def wait(self, job_id: str, timeout_s: float | None = None, poll_s: float = 0.5) -> JobRecord:
        """The job's record once it has ended (or :class:`TimeoutError` after ``timeout_s``)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            record: JobRecord = self.get(job_id)
            if record.state in ENDED:
                return record
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {record.state} after {timeout_s} s")
            time.sleep(poll_s)

    def wait_ready(self, timeout_s: float | None = None, poll_s: float = 0.5) -> None:
        """Until the service's executors are up and its jobs taken in (submissions are taken
        before that, and wait); :class:`TimeoutError` after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.stats()["ready"]:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the service's executors are not up after {timeout_s} s")
            time.sleep(poll_s)

    # --- plumbing ------------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            answer = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(f"{self.url}: cannot reach the service ({exc})") from exc
        if answer.status_code >= 400:
            try:
                detail = answer.json().get("detail", answer.text)
            except ValueError:
                detail = answer.text
            raise ClientError(f"{answer.status_code}: {detail}", answer.status_code)
        return answer


def read_files(paths: list[Path]) -> dict[str, str]:
    """The files of a submission, by their names (their code travels with the job)."""
    return {path.name: path.read_text() for path in paths}


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "anonymous"

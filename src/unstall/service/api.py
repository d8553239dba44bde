"""The HTTP API of ``unstall serve`` (FastAPI; OpenAPI at ``/docs``).

| method and path | what |
|---|---|
| ``POST /api/jobs`` | submit a job (a :class:`~unstall.service.models.JobSpec`): its record |
| ``GET /api/jobs`` | every job (``?state=pending&user=alice`` to filter) |
| ``GET /api/jobs/{id}`` | one job with its spec and events |
| ``POST /api/jobs/{id}/cancel`` | cancel it (its user or an admin) |
| ``GET /api/jobs/{id}/logs`` | its log from ``?offset=`` bytes (next: ``X-Next-Offset``) |
| ``GET /api/cluster`` | nodes, their GPUs and the job on each |
| ``GET /api/stats`` | the scheduler's rounds and what the latest ones cost (ms) |
| ``GET /api/whatif`` | the queue forecast under the serving policy and each ``?policy=`` |
| ``GET /metrics`` | the service in Prometheus' text format (:mod:`unstall.service.metrics`) |
| ``GET /``, ``GET /jobs/{id}`` | the dashboard (:mod:`unstall.service.dashboard`) |

Errors answer ``{"detail": ...}``: 401 without a valid token (where the service has tokens), 403
for another user's job, 404 for an unknown job, 409 for a job that has ended, 413 for a body over
the size limit, 422 for a bad spec (naming the field), 503 for a what-if before the scheduler
has taken the jobs in.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from unstall.service.auth import Who
from unstall.service.dashboard import install_dashboard
from unstall.service.metrics import CONTENT_TYPE, exposition, registry_for
from unstall.service.models import (
    MAX_FILES_BYTES,
    ClusterRecord,
    JobDetail,
    JobRecord,
    JobSpec,
    JobStateName,
    WhatIf,
)
from unstall.service.service import Service, ServiceError

# A request body may be at most this many bytes (a spec with its files, JSON-encoded).
MAX_BODY_BYTES = 2 * MAX_FILES_BYTES


def create_app(service: Service) -> FastAPI:
    """The API over ``service``."""
    app = FastAPI(
        title="unstall scheduler service",
        summary="Submit jobs to a GPU cluster scheduled by unstall's policies.",
        version="1",
    )
    app.state.service = service

    @app.exception_handler(ServiceError)
    async def _refused(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content={"detail": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _validation_text(exc)})

    app.add_middleware(BodySizeLimit, limit=MAX_BODY_BYTES)

    @app.post("/api/jobs", status_code=201)
    async def submit(spec: JobSpec, who: Who) -> JobRecord:
        # In the event loop, which goes on taking requests while this one's transaction is
        # written (shared with the submissions that come with it; answered once committed).
        return await service.submit_async(spec, who)

    @app.get("/api/jobs")
    def jobs(
        who: Who,
        state: Annotated[JobStateName | None, Query()] = None,
        user: Annotated[str | None, Query()] = None,
    ) -> list[JobRecord]:
        return service.jobs(state=state, user=user)

    @app.get("/api/jobs/{job_id}")
    def job(job_id: str, who: Who) -> JobDetail:
        return service.job(job_id)

    @app.post("/api/jobs/{job_id}/cancel")
    def cancel(job_id: str, who: Who) -> JobRecord:
        return service.cancel(job_id, who)

    @app.get("/api/jobs/{job_id}/logs", response_class=PlainTextResponse)
    def logs(job_id: str, who: Who, offset: Annotated[int, Query(ge=0)] = 0) -> PlainTextResponse:
        text, next_offset = service.logs(job_id, offset)
        return PlainTextResponse(text, headers={"X-Next-Offset": str(next_offset)})

    @app.get("/api/cluster")
    def cluster(who: Who) -> ClusterRecord:
        return service.cluster()

    @app.get("/api/stats")
    def stats(who: Who) -> dict[str, object]:
        return service.stats()

    @app.get("/api/whatif")
    def whatif(who: Who, policy: Annotated[list[str] | None, Query()] = None) -> WhatIf:
        return service.whatif(policy or [])

    registry = registry_for(service)  # the app's own: no global registry shared between apps

    @app.get("/metrics", response_class=Response)
    def metrics(who: Who) -> Response:
        return Response(exposition(registry), media_type=CONTENT_TYPE)

    install_dashboard(app, service)
    return app


class BodySizeLimit:
    """413 for a request whose ``Content-Length`` is over ``limit`` bytes, before its body is
    read. Plain ASGI: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) would run every
    request in a task of its own and stream its answer back through a queue, which costs more
    than answering a submission does."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length":
                    length = value.decode("latin-1")
                    if length.isdigit() and int(length) > self.limit:
                        refused = JSONResponse(
                            status_code=413,
                            content={"detail": f"body: {length} bytes, at most {self.limit}"},
                        )
                        await refused(scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)


def _validation_text(exc: RequestValidationError) -> str:
    """``gpus: Input should be greater than or equal to 1``: each error with its field."""
    parts = []
    for error in exc.errors():
        location = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(location) or "body"
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{field}: {message}")
    return "; ".join(parts)

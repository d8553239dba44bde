"""Who sent a request to the service: every route of the API and the dashboard's data asks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from unstall.service.service import Caller, Service


async def caller_of(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_unstall_user: Annotated[str | None, Header()] = None,
) -> Caller:
    """Who sent the request: its Bearer token's user (or, with no tokens, the user it names).
    Async although it waits for nothing: FastAPI runs a plain function dependency in its
    thread pool, a hand-over to another thread on every request."""
    token = None
    if authorization is not None and authorization.lower().startswith("bearer "):
        token = authorization[7:].strip()
    service: Service = request.app.state.service
    return service.caller(token, x_unstall_user)


# Every route asks who calls: a service with tokens answers 401 to a request without one.
Who = Annotated[Caller, Depends(caller_of)]

"""The errors a parameter-server run raises besides configuration and user-code errors."""

from __future__ import annotations

from unstall.errors import UnstallError


class PSActorDiedError(UnstallError):
    """A worker or server actor died; the message names it."""


class PSTimeoutError(UnstallError):
    """A step did not finish in time; the message names what it was waiting on."""

"""The scheduler service: ``unstall serve`` and what talks to it.

What this part offers:

- :func:`serve`: the scheduling core (:mod:`unstall.loop`) with a wall clock, the live executors
  on a Ray cluster (local and emulated, or joined), a job store that survives the service
  (:class:`JobStore`: SQLite in a directory, or PostgreSQL) and an HTTP API (FastAPI), until
  stopped; :class:`ServeConfig` (host, port, store). ``with serving(...) as running:`` runs
  the same service while a block of your program runs (``running.url``).
- :class:`Client`: the API from Python (``submit``, ``list``, ``get``, ``cancel``, ``logs``,
  ``wait``, ``wait_ready``, ``whatif``); ``unstall jobs ...`` is the same from the command line.
- The API's models: :class:`JobSpec` (what a user submits), :class:`JobRecord` and
  :class:`JobDetail` (what the service answers: with each job's estimated start and end),
  :class:`ClusterRecord`, :class:`WhatIf` (the queue forecast under several policies).
- :func:`backfill_starts`: a Slurm-style backfill planner's start estimates (the yardstick the
  estimates are measured against, ``benchmarks/service_eta.py``).
"""

from unstall.service.client import Client, ClientError
from unstall.service.estimates import backfill_starts
from unstall.service.models import ClusterRecord, JobDetail, JobRecord, JobSpec, WhatIf
from unstall.service.serve import ServeConfig, serve, serving
from unstall.service.store import JobStore

__all__ = [
    "Client",
    "ClientError",
    "ClusterRecord",
    "JobDetail",
    "JobRecord",
    "JobSpec",
    "JobStore",
    "ServeConfig",
    "WhatIf",
    "backfill_starts",
    "serve",
    "serving",
]

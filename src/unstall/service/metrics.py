"""``/metrics``: the service in Prometheus' text format (prometheus-client).

A custom collector reads the service's state when Prometheus scrapes (the scheduler's snapshot,
its core's counters and round records, the live driver's per-job times): nothing is counted
twice, and each app has a registry of its own, so no global state leaks between services (or
tests). Times are wall seconds.

| metric | type | what |
|---|---|---|
| ``unstall_jobs{state}`` | gauge | jobs by state (pending, running, succeeded, failed, cancelled) |
| ``unstall_queue_length`` | gauge | jobs waiting in the queue |
| ``unstall_gpus{state}`` | gauge | GPUs busy, free and lost |
| ``unstall_scheduler_rounds_total`` | counter | scheduling rounds |
| ``unstall_decision_seconds`` | histogram | the policy's ``decide`` per round |
| ``unstall_apply_seconds`` | histogram | carrying a round's decision out |
| ``unstall_job_startup_seconds`` | histogram | a job's first start (group, model) |
| ``unstall_job_restore_seconds`` | histogram | a job's later starts (group, checkpoint) |
| ``unstall_preemptions_total`` | counter | jobs preempted |
| ``unstall_migrations_total`` | counter | jobs migrated |
| ``unstall_failures_total`` | counter | job segments that failed |
| ``unstall_estimate_start_error_seconds`` | histogram | |start - start estimated at submit| |
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from unstall.service.models import STATES, JobRecord
from unstall.service.service import Service

# Buckets (upper bounds, seconds): a policy's decision is milliseconds; a job's start seconds.
DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
STARTUP_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
ESTIMATE_BUCKETS = (10.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Counts:
    """A histogram's buckets, count and sum, added to as observations come."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        buckets, total = [], 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            total += count
            buckets.append(("+Inf" if bound == math.inf else repr(bound), total))
        return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=self.sum)


def histogram(
    name: str, documentation: str, values: Iterable[float], bounds: Sequence[float]
) -> HistogramMetricFamily:
    counts = _Counts(bounds)
    for value in values:
        counts.observe(value)
    return counts.family(name, documentation)


class ServiceCollector:
    """The service's metrics, read at each scrape (see the module docstring).

    The core's round records only grow: the collector adds the new ones to its decision
    histograms at each scrape instead of going through them all again."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._decide = _Counts(DECISION_BUCKETS)
        self._apply = _Counts(DECISION_BUCKETS)
        self._seen_rounds = 0
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        records = self.service.jobs()
        yield from self._jobs_and_gpus(records)
        yield from self._rounds()
        yield from self._job_times()
        yield from self._estimates(records)

    def _jobs_and_gpus(self, records: list[JobRecord]) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("unstall_jobs", "Jobs by state.", labels=["state"])
        for state in STATES:
            jobs.add_metric([state], sum(1 for r in records if r.state == state))
        yield jobs
        cluster = self.service.cluster()
        yield GaugeMetricFamily(
            "unstall_queue_length", "Jobs waiting in the queue.", value=cluster.pending
        )
        gpus = GaugeMetricFamily("unstall_gpus", "GPUs busy, free and lost.", labels=["state"])
        gpus.add_metric(["busy"], cluster.busy_gpus)
        gpus.add_metric(["free"], cluster.free_gpus)
        gpus.add_metric(["lost"], cluster.lost_gpus)
        yield gpus

    def _rounds(self) -> Iterator[Metric]:
        core = self.service.scheduler.core
        with self._lock:
            records = core.round_records
            new = records[self._seen_rounds : len(records)]
            self._seen_rounds += len(new)
            for record in new:
                self._decide.observe(record.decide_wall_s)
                self._apply.observe(record.apply_wall_s)
            decide = self._decide.family(
                "unstall_decision_seconds", "The policy's decision per scheduling round."
            )
            apply = self._apply.family(
                "unstall_apply_seconds", "Carrying a round's decision out (starts, stops)."
            )
        yield CounterMetricFamily(
            "unstall_scheduler_rounds", "Scheduling rounds.", value=core.rounds
        )
        yield decide
        yield apply
        for name, value, what in (
            ("unstall_preemptions", core.preemptions, "Jobs preempted."),
            ("unstall_migrations", core.migrations, "Jobs migrated."),
            ("unstall_failures", core.failures, "Job segments that failed."),
        ):
            yield CounterMetricFamily(name, what, value=value)

    def _job_times(self) -> Iterator[Metric]:
        scheduler = self.service.scheduler
        speedup = scheduler.config.speedup
        startups: list[float] = []
        restores: list[float] = []
        for record in list(scheduler.records.values()):
            if math.isfinite(record.startup_s):
                startups.append(record.startup_s / speedup)
            restores.extend(s / speedup for s in list(record.restore_s))
        yield histogram(
            "unstall_job_startup_seconds",
            "A job's first start: joining its group, building its model.",
            startups,
            STARTUP_BUCKETS,
        )
        yield histogram(
            "unstall_job_restore_seconds",
            "A job's later starts: joining its group, loading its checkpoint.",
            restores,
            STARTUP_BUCKETS,
        )

    def _estimates(self, records: list[JobRecord]) -> Iterator[Metric]:
        # Against the first estimate of each start, made at submit (kept after it started).
        errors = [
            abs(r.started_at - r.estimated_start_at_submit)
            for r in records
            if r.started_at is not None and r.estimated_start_at_submit is not None
        ]
        yield histogram(
            "unstall_estimate_start_error_seconds",
            "How far a job's start was from its estimated start, over the jobs that had one.",
            errors,
            ESTIMATE_BUCKETS,
        )


def registry_for(service: Service) -> CollectorRegistry:
    """A registry of the service's own (never prometheus-client's global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's metrics in Prometheus' text format."""
    return generate_latest(registry)

"""What the dashboard reads in a job's log (``STORE/logs/<job>.log``): its tail, and the metrics
its training loop reported.

A loop's ``ctx.report(step=, loss=...)`` is written to the log by each rank as a line
``[rank 0] report {"step": 100, "loss": 0.236}``. Rank 0's reports (or unprefixed ones) are the
job's metrics; a step reported again (a job resumed from a checkpoint repeats the steps after
it) keeps its latest value. Logs only grow, so each job's log is read once, from where the last
read stopped.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

REPORT = re.compile(r"^(?:\[rank (\d+)\] )?report (\{.*\})\s*$")
# Steps kept per metric at most (the oldest go first), and metrics per job at most.
MAX_STEPS = 20_000
MAX_METRICS = 8
# Bytes of a log read at once, and the bytes of its end the job page shows.
READ_CHUNK = 4 * 1024 * 1024
TAIL_BYTES = 16 * 1024


def parse_report(line: str) -> dict[str, float] | None:
    """A report line's numbers (``step`` among them), or None for any other line (another
    rank's report, a report that is not a JSON object of numbers with a step)."""
    found = REPORT.match(line)
    if found is None or found.group(1) not in (None, "0"):
        return None
    try:
        entry = json.loads(found.group(2))
    except ValueError:
        return None
    if not isinstance(entry, dict) or "step" not in entry:
        return None
    numbers = {}
    for name, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            numbers[str(name)] = float(value)
    return numbers if "step" in numbers else None


@dataclass
class _Read:
    offset: int = 0
    metrics: dict[str, dict[int, float]] = field(default_factory=dict)


class ReportReader:
    """Each job's reported metrics, read from its log as it grows (thread-safe)."""

    def __init__(self) -> None:
        self._reads: dict[Path, _Read] = {}
        self._lock = threading.Lock()

    def metrics(self, path: Path) -> dict[str, list[tuple[float, float]]]:
        """``{metric: [(step, value), ...]}`` in step order, from the log at ``path``."""
        with self._lock:
            read = self._reads.setdefault(path, _Read())
            self._catch_up(path, read)
            return {
                name: [(float(step), value) for step, value in sorted(values.items())]
                for name, values in read.metrics.items()
            }

    def _catch_up(self, path: Path, read: _Read) -> None:
        try:
            size = path.stat().st_size
        except OSError:
            return
        if size < read.offset:  # a new log under the same name: start again
            read.offset, read.metrics = 0, {}
        with open(path, "rb") as log:
            while read.offset < size:
                log.seek(read.offset)
                data = log.read(READ_CHUNK)
                end = data.rfind(b"\n")
                if end < 0:
                    return  # a line still being written: taken at the next read
                read.offset += end + 1
                for line in data[: end + 1].decode(errors="replace").splitlines():
                    entry = parse_report(line)
                    if entry is not None:
                        _keep(read.metrics, entry)


def _keep(metrics: dict[str, dict[int, float]], entry: dict[str, float]) -> None:
    step = int(entry["step"])
    for name, value in entry.items():
        if name == "step" or (name not in metrics and len(metrics) >= MAX_METRICS):
            continue
        values = metrics.setdefault(name, {})
        values[step] = value
        if len(values) > MAX_STEPS:
            del values[min(values)]


def tail(path: Path, size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of the log at ``path``, from its first whole line ("" if none)."""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            end = log.tell()
            log.seek(max(0, end - size))
            data = log.read()
    except OSError:
        return ""
    if end > size:
        data = data[data.find(b"\n") + 1 :]
    return data.decode(errors="replace")

"""What every trace reader is: a name, a sniffer for auto-detection, and ``read(path, options)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from unstall.config import check
from unstall.traces.duration_rules import DURATION_RULES
from unstall.traces.schema import Trace


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """Choices some formats need; each reader uses only its own fields.

    ``pollux_duration``: how the Pollux reader gives jobs a run time, which Pollux workloads do not
    have (see :mod:`unstall.traces.pollux`); ``seed`` seeds that rule. ``pai_task_table``: the
    Alibaba PAI task table to join with the job table (default: ``pai_task_table.csv`` beside it).
    """

    pollux_duration: str = "category"
    seed: int = 0
    pai_task_table: Path | None = None

    def __post_init__(self) -> None:
        check(
            self.pollux_duration in DURATION_RULES,
            self,
            "pollux_duration",
            f"must be one of {sorted(DURATION_RULES)}, got {self.pollux_duration!r}",
        )
        check(self.seed >= 0, self, "seed", f"must be >= 0, got {self.seed}")


@dataclass(frozen=True, kw_only=True)
class Reader:
    """One trace format.

    ``sniff(path, header)`` says whether a file looks like this format (``header`` holds the
    first line's comma-separated fields, empty for non-text files); ``read`` parses and validates.
    """

    name: str
    description: str
    suffixes: tuple[str, ...]
    sniff: Callable[[Path, Sequence[str]], bool]
    read: Callable[[Path, ReadOptions], Trace]

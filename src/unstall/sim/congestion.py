"""Background congestion over time: the fraction of shared-link bandwidth other traffic takes.

Levels are presets (a seeded random walk around a mean, changing every ``period_s``); a schedule
file (CSV ``time_s,fraction``) gives any other pattern.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from unstall.config import check
from unstall.errors import DataFileError

# Mean share of NIC and uplink bandwidth taken by background traffic, and how far it swings.
LEVELS: dict[str, tuple[float, float]] = {
    "none": (0.0, 0.0),
    "low": (0.2, 0.1),
    "medium": (0.4, 0.15),
    "high": (0.6, 0.2),
}
MAX_FRACTION = 0.95  # a link never loses all its bandwidth: jobs slow down but still finish


@dataclass(frozen=True, kw_only=True)
class CongestionSchedule:
    """Step function: ``fractions[i]`` holds from ``times_s[i]`` until the next change."""

    times_s: tuple[float, ...]
    fractions: tuple[float, ...]
    name: str = "custom"

    def __post_init__(self) -> None:
        check(len(self.times_s) == len(self.fractions), self, "fractions", "one per time")
        check(
            all(b > a for a, b in zip(self.times_s, self.times_s[1:], strict=False)),
            self,
            "times_s",
            "must be strictly increasing",
        )
        check(
            all(0.0 <= f <= MAX_FRACTION for f in self.fractions),
            self,
            "fractions",
            f"each must be in [0, {MAX_FRACTION}]",
        )

    @property
    def mean(self) -> float:
        return sum(self.fractions) / len(self.fractions) if self.fractions else 0.0


def preset(level: str, horizon_s: float, seed: int, period_s: float = 1800.0) -> CongestionSchedule:
    """A seeded random walk around the level's mean, new value every ``period_s`` seconds."""
    if level not in LEVELS:
        raise DataFileError("--congestion", f"unknown level {level!r}; known: {sorted(LEVELS)}")
    mean, swing = LEVELS[level]
    if mean == 0.0:
        return CongestionSchedule(times_s=(0.0,), fractions=(0.0,), name=level)
    rng = random.Random(seed)
    steps = max(1, int(horizon_s // period_s) + 1)
    times = tuple(i * period_s for i in range(steps))
    fractions = tuple(
        round(min(MAX_FRACTION, max(0.0, mean + rng.uniform(-swing, swing))), 4)
        for _ in range(steps)
    )
    return CongestionSchedule(times_s=times, fractions=fractions, name=level)


def load_schedule(path: Path) -> CongestionSchedule:
    """Read ``time_s,fraction`` rows; errors name the file, line and field."""
    if not path.is_file():
        raise DataFileError(str(path), "no such file")
    times: list[float] = []
    fractions: list[float] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or set(reader.fieldnames) != {"time_s", "fraction"}:
            raise DataFileError(str(path), "header must be exactly: time_s,fraction", line=1)
        for lineno, row in enumerate(reader, start=2):
            for field in ("time_s", "fraction"):
                try:
                    value = float(row[field])
                except (TypeError, ValueError):
                    raise DataFileError(
                        str(path), f"not a number: {row[field]!r}", line=lineno, field=field
                    ) from None
                (times if field == "time_s" else fractions).append(value)
            if not 0.0 <= fractions[-1] <= MAX_FRACTION:
                raise DataFileError(
                    str(path), f"must be in [0, {MAX_FRACTION}]", line=lineno, field="fraction"
                )
            if len(times) > 1 and times[-1] <= times[-2]:
                raise DataFileError(str(path), "times must increase", line=lineno, field="time_s")
    if not times:
        raise DataFileError(str(path), "no rows")
    return CongestionSchedule(times_s=tuple(times), fractions=tuple(fractions), name=path.stem)

"""Background congestion over time: the fraction of shared-link bandwidth other traffic takes.

Two kinds, one interface (:class:`Congestion`: a ``name`` for the results and
``schedule(horizon_s, seed)``): a :class:`CongestionLevel` is a seeded random walk around a mean,
changing every ``period_s`` (the levels ``none``, ``low``, ``medium`` and ``high`` are in
:data:`CONGESTION_LEVELS`); a :class:`CongestionSchedule` is any step function, for example one
read from a CSV file (``time_s,fraction``) by :func:`read_congestion_schedule`.
:func:`resolve_congestion` turns what a user names (a level's name, a schedule file, or one of
these objects) into one.
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Protocol

from unstall.config import check, check_non_negative, check_positive, read_text_file
from unstall.errors import ArgumentTypeError, ConfigError, DataFileError

MAX_FRACTION = 0.95  # a link never loses all its bandwidth: jobs slow down but still finish


class Congestion(Protocol):
    """Background congestion as the simulator takes it: a label and a step function."""

    @property
    def name(self) -> str:
        """What results call it (a level's name, or the schedule file as the user named it)."""
        ...

    def schedule(self, horizon_s: float, seed: int) -> CongestionSchedule:
        """The step function over a run of ``horizon_s`` seconds, seeded by the run's seed."""
        ...


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

    def schedule(self, horizon_s: float, seed: int) -> CongestionSchedule:
        """Itself: a given schedule holds whatever the run's length and seed."""
        return self


@dataclass(frozen=True, kw_only=True)
class CongestionLevel:
    """A seeded random walk: every ``period_s`` seconds a new fraction drawn uniformly within
    ``swing`` of ``mean`` (clipped to [0, :data:`MAX_FRACTION`], rounded to 4 digits)."""

    name: str
    mean: float
    swing: float = 0.0
    period_s: float = 1800.0

    def __post_init__(self) -> None:
        check(0.0 <= self.mean <= MAX_FRACTION, self, "mean", f"must be in [0, {MAX_FRACTION}]")
        check_non_negative(self, swing=self.swing)
        check_positive(self, period_s=self.period_s)

    def schedule(self, horizon_s: float, seed: int) -> CongestionSchedule:
        """One value per period from 0 until past ``horizon_s``, drawn from ``random.Random(seed)``
        (no congestion at all when the mean is 0)."""
        if self.mean == 0.0:
            return CongestionSchedule(times_s=(0.0,), fractions=(0.0,), name=self.name)
        rng = random.Random(seed)
        steps = max(1, int(horizon_s // self.period_s) + 1)
        times = tuple(i * self.period_s for i in range(steps))
        fractions = tuple(
            round(min(MAX_FRACTION, max(0.0, self.mean + rng.uniform(-self.swing, self.swing))), 4)
            for _ in range(steps)
        )
        return CongestionSchedule(times_s=times, fractions=fractions, name=self.name)


# Mean share of NIC and uplink bandwidth taken by background traffic, and how far it swings.
CONGESTION_LEVELS: dict[str, CongestionLevel] = {
    level.name: level
    for level in (
        CongestionLevel(name="none", mean=0.0),
        CongestionLevel(name="low", mean=0.2, swing=0.1),
        CongestionLevel(name="medium", mean=0.4, swing=0.15),
        CongestionLevel(name="high", mean=0.6, swing=0.2),
    )
}
NO_CONGESTION = CONGESTION_LEVELS["none"]


def congestion_level(name: str) -> CongestionLevel:
    """The level called ``name``, with an error listing the known ones."""
    if isinstance(name, int | float) and not isinstance(name, bool):
        # A share of the bandwidth, not a level's name: that is a schedule of one step.
        raise ConfigError(
            "congestion_level",
            "name",
            f"takes a level's name ({', '.join(sorted(CONGESTION_LEVELS))}), got the number "
            f"{name!r}: a fixed share of every link is CongestionSchedule(times_s=(0.0,), "
            f"fractions=({name!r},))",
        )
    level = CONGESTION_LEVELS.get(name) if isinstance(name, str) else None
    if level is None:
        raise ConfigError(
            "congestion", "level", f"unknown level {name!r}; known: {sorted(CONGESTION_LEVELS)}"
        )
    return level


def read_congestion_schedule(path: str | Path, *, name: str | None = None) -> CongestionSchedule:
    """Read ``time_s,fraction`` rows; errors name the file, line and field. ``name`` labels the
    schedule in results (default: the path as given)."""
    path = Path(path)
    # A byte-order mark, as spreadsheets write "CSV UTF-8", is no part of the header: the
    # reader drops it.
    text = read_text_file(path)
    if not text.strip():
        raise DataFileError(str(path), "the file is empty; want the header time_s,fraction")
    times: list[float] = []
    fractions: list[float] = []
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or set(reader.fieldnames) != {"time_s", "fraction"}:
            found = ",".join(reader.fieldnames or ())
            raise DataFileError(
                str(path), f"header must be exactly: time_s,fraction, got {found!r}", line=1
            )
        for row in reader:
            lineno = reader.line_num
            if None in row:  # DictReader's key for the fields beyond the header's
                raise DataFileError(
                    str(path), f"{2 + len(row[None])} fields where the header has 2", line=lineno
                )
            for field in ("time_s", "fraction"):
                try:
                    value = float(row[field])
                except (TypeError, ValueError):
                    raise DataFileError(
                        str(path), f"not a number: {row[field]!r}", line=lineno, field=field
                    ) from None
                if not math.isfinite(value):
                    raise DataFileError(
                        str(path),
                        f"must be a finite number, got {row[field]!r}",
                        line=lineno,
                        field=field,
                    )
                (times if field == "time_s" else fractions).append(value)
            if not 0.0 <= fractions[-1] <= MAX_FRACTION:
                raise DataFileError(
                    str(path),
                    f"must be in [0, {MAX_FRACTION}], got {row['fraction']}",
                    line=lineno,
                    field="fraction",
                )
            if len(times) > 1 and times[-1] <= times[-2]:
                raise DataFileError(str(path), "times must increase", line=lineno, field="time_s")
    if not times:
        raise DataFileError(str(path), "no rows")
    return CongestionSchedule(
        times_s=tuple(times), fractions=tuple(fractions), name=str(path) if name is None else name
    )


def resolve_congestion(
    congestion: Congestion | str | PathLike[str],
    *,
    owner: str = "resolve_congestion",
    field: str = "congestion",
) -> Congestion:
    """``congestion`` itself when it is one (a level, a schedule, any object with a ``name``
    and a ``schedule(horizon_s, seed)``); else the level it names (``none``, ``low``,
    ``medium``, ``high``) or the ``.csv`` schedule file (labelled in results as written here).
    Another type raises :class:`~unstall.errors.ArgumentTypeError` (a TypeError) naming
    ``owner.field``."""
    if isinstance(congestion, str) and congestion in CONGESTION_LEVELS:
        return CONGESTION_LEVELS[congestion]
    if isinstance(congestion, str | PathLike):
        text = str(congestion)
        if text.endswith(".csv"):
            return read_congestion_schedule(text, name=text)
        raise ConfigError(
            owner,
            field,
            f"{text!r} is neither a level {sorted(CONGESTION_LEVELS)} nor a .csv schedule",
        )
    if callable(getattr(congestion, "schedule", None)) and hasattr(congestion, "name"):
        return congestion
    wanted = (
        f"takes a congestion (a level's name {sorted(CONGESTION_LEVELS)}, a .csv schedule file, "
        'congestion_level("medium") or a CongestionSchedule)'
    )
    if isinstance(congestion, int | float) and not isinstance(congestion, bool):
        hint = (
            f": a constant share is CongestionSchedule(times_s=(0.0,), fractions=({congestion!r},))"
        )
    else:
        hint = ""
    raise ArgumentTypeError(owner, field, f"{wanted}; got {type(congestion).__name__}{hint}")

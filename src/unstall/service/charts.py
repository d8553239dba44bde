"""Plots for the dashboard, drawn on the server as SVG: this module works out the geometry (points
in the plot's pixels, axis ticks and their labels); the templates write the SVG, so every text
in a plot goes through the templates' escaping like the rest of the page.

No JavaScript library and nothing fetched at run time: a plot is a few dozen SVG elements.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# A plot's size in SVG pixels (the page scales it to its column) and its margins.
WIDTH, HEIGHT = 460, 170
LEFT, RIGHT, TOP, BOTTOM = 46, 10, 10, 24
# Points drawn per series at most: longer series are thinned evenly (their last point kept).
MAX_POINTS = 400
# Distinct colours for a plot's series, and per job: the golden angle spreads consecutive hues.
SERIES_COLOURS = ("#2b6cb0", "#c05621", "#2f855a", "#9b2c2c", "#6b46c1")
GOLDEN_ANGLE = 137.508

Format = Callable[[float], str]


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a plot: its name, colour, polyline (``"x,y x,y"``) and dots (x, y, label)."""

    name: str
    colour: str
    line: str
    dots: tuple[tuple[float, float, str], ...]


@dataclass(frozen=True, slots=True)
class Chart:
    """A plot as the template draws it (``empty``: what to say where there is nothing to plot)."""

    title: str
    series: tuple[Series, ...]
    x_ticks: tuple[tuple[float, str], ...]
    y_ticks: tuple[tuple[float, str], ...]
    empty: str = ""
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def points(self) -> int:
        return sum(len(s.dots) for s in self.series)


def job_colour(job_id: str) -> str:
    """A colour of its own for each job (``job-7``), the same on every page and every poll."""
    digits = "".join(c for c in job_id if c.isdigit())
    number = int(digits) if digits else sum(job_id.encode())
    return f"hsl({(number * GOLDEN_ANGLE) % 360:.0f}, 62%, 52%)"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2, 2.5 or 5 times a power of ten apart) over low..high."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


# Steps between time ticks: round seconds, minutes and hours.
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)


def time_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` wall times at round seconds, minutes or hours within low..high."""
    raw = (high - low) / max(1, count - 1)
    step = next((s for s in TIME_STEPS if s >= raw), TIME_STEPS[-1])
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) // step) + 1)]


def thin(
    points: Sequence[tuple[float, float]], most: int = MAX_POINTS
) -> list[tuple[float, float]]:
    """At most ``most`` of ``points``, evenly spaced, the last one kept."""
    if len(points) <= most:
        return list(points)
    step = len(points) / most
    kept = [points[int(i * step)] for i in range(most - 1)]
    kept.append(points[-1])
    return kept


def clock(at: float) -> str:
    """A wall time as the page shows it on an axis: ``HH:MM:SS`` (UTC)."""
    return time.strftime("%H:%M:%S", time.gmtime(at))


def number(value: float) -> str:
    """An axis label: short, with no trailing zeros."""
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.1e}"
    return f"{value:.4g}"


def plot(
    title: str,
    series: dict[str, Sequence[tuple[float, float]]],
    *,
    x_format: Format = number,
    x_time: bool = False,
    y_format: Format = number,
    y_floor: float | None = None,
    y_ceiling: float | None = None,
    dots_only: bool = False,
    empty: str = "nothing yet",
) -> Chart:
    """A plot of named series of (x, y) points: axes fitted to them (``y_floor``/``y_ceiling``
    pin an end, e.g. 0 and 1 for a share), ticks at round values (``x_time``: x is wall time,
    ticked at round minutes; ``dots_only``: points not joined, for values that are not a
    series in time, such as each job's completion time)."""
    filled = {name: thin(points) for name, points in series.items() if points}
    if not filled:
        return Chart(title=title, series=(), x_ticks=(), y_ticks=(), empty=empty)
    xs = [x for points in filled.values() for x, _ in points]
    ys = [y for points in filled.values() for _, y in points]
    x_lo, x_hi = min(xs), max(xs)
    y_lo = min(ys) if y_floor is None else min(y_floor, min(ys))
    y_hi = max(ys) if y_ceiling is None else max(y_ceiling, max(ys))
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_ticks = nice_ticks(y_lo, y_hi if y_hi > y_lo else y_lo + 1)
    y_lo, y_hi = min(y_ticks[0], y_lo), max(y_ticks[-1], y_hi)
    chart = Chart(title=title, series=(), x_ticks=(), y_ticks=())

    def px(x: float) -> float:
        return round(chart.left + (x - x_lo) / (x_hi - x_lo) * (chart.right - chart.left), 1)

    def py(y: float) -> float:
        span = (y_hi - y_lo) or 1.0
        return round(chart.bottom - (y - y_lo) / span * (chart.bottom - chart.top), 1)

    drawn = []
    for i, (name, points) in enumerate(filled.items()):
        dots = tuple((px(x), py(y), f"{name}: {y_format(y)} at {x_format(x)}") for x, y in points)
        line = "" if dots_only else " ".join(f"{x},{y}" for x, y, _ in dots)
        drawn.append(Series(name, SERIES_COLOURS[i % len(SERIES_COLOURS)], line, dots))
    ticks = time_ticks(x_lo, x_hi) if x_time else nice_ticks(x_lo, x_hi)
    x_ticks = tuple((px(t), x_format(t)) for t in ticks if x_lo <= t <= x_hi) or (
        (px(x_lo), x_format(x_lo)),
    )
    return Chart(
        title=title,
        series=tuple(drawn),
        x_ticks=x_ticks,
        y_ticks=tuple((py(t), y_format(t)) for t in y_ticks),
    )

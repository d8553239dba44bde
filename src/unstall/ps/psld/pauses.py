"""The pause a decision causes, learned from the pauses of the decisions carried out."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from unstall.ps.psld.config import ControllerConfig


@dataclass(frozen=True, kw_only=True)
class PauseSample:
    """One decision carried out: its kind, the bytes it moved and the pause it caused."""

    kind: str  # the decision's class name: "Reassign", "ScaleOut" or "ScaleIn"
    bytes_moved: int
    pause_s: float


class PauseModel:
    """The pause a decision will cause, learned from the pauses of those carried out.

    A migration (a ``Reassign`` or ``ScaleIn``: both move chunk state and switch the routing)
    costs ``fixed_s + bytes * per_byte_s``; a scale-out costs a start on top of its migration.
    Until a pause of a kind is measured the config's priors stand. Once the window holds moves
    of at least three sizes spanning 2x, both terms are fitted by least squares (a negative
    term, noise, falls back); before that the prior rate stays and the fixed part is the median
    of what the measured pauses leave (on one machine the fixed part dominates: a few MB move
    in milliseconds, the routing switch and the actor calls take tens). The start of a
    scale-out is the median of its pauses less their migration's predicted part."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.moves: deque[tuple[int, float]] = deque(maxlen=config.pause_window)
        self.starts: deque[tuple[int, float]] = deque(maxlen=config.pause_window)
        self.fixed_s = config.migration_fixed_s
        self.per_byte_s = 1.0 / (config.migration_mb_s * 1e6)
        self.start_s = config.scale_out_cost_s

    def observe(self, sample: PauseSample) -> None:
        if not self.config.learn_pauses or sample.pause_s < 0:
            return
        window = self.starts if sample.kind == "ScaleOut" else self.moves
        window.append((sample.bytes_moved, sample.pause_s))
        if self.moves:
            self.fixed_s, self.per_byte_s = self._fit_moves()
        if self.starts:
            left = [p - self.migration_s(b) for b, p in self.starts]
            self.start_s = max(statistics.median(left), 0.0)

    def _fit_moves(self) -> tuple[float, float]:
        prior_per_byte = 1.0 / (self.config.migration_mb_s * 1e6)
        sizes = [float(b) for b, _ in self.moves]
        pauses = [p for _, p in self.moves]
        if len(set(sizes)) >= 3 and max(sizes) >= 2 * min(sizes):
            mean_b, mean_p = statistics.fmean(sizes), statistics.fmean(pauses)
            var = sum((b - mean_b) ** 2 for b in sizes)
            slope = (
                sum((b - mean_b) * (p - mean_p) for b, p in zip(sizes, pauses, strict=True)) / var
            )
            intercept = mean_p - slope * mean_b
            if slope >= 0 and intercept >= 0:
                return intercept, slope
        fixed = statistics.median(p - b * prior_per_byte for b, p in self.moves)
        return max(fixed, 0.0), prior_per_byte

    def migration_s(self, nbytes: float) -> float:
        return self.fixed_s + nbytes * self.per_byte_s

    def scale_out_s(self, nbytes: float) -> float:
        return self.start_s + self.migration_s(nbytes)

    def source(self) -> str:
        """Where the predictions come from, for a decision's reason."""
        n = len(self.moves) + len(self.starts)
        return f"learned from {n} pause(s)" if n else "prior"

"""PSLD's controller, pure: per-server timings in, a load-distribution decision out.

Each iteration every server reports the bytes it owned and the seconds it took (its workers'
slowest ingress and egress plus its step). From these the controller keeps, per server, a
sliding window of seconds per byte: a mean and its standard error (a confidence interval). A
sample outside the interval restarts the window (the server's conditions changed), so the
estimate follows a moving straggler within an iteration or two.

The decision: the shares of the bytes that minimise the slowest server's predicted time (the
oracle's linear programme, :func:`~unstall.ps.assign.oracle.best_shares`, on the estimates);
servers still uncertain (new, or too few samples) get a small exploration share instead, so that
they are measured without risking much; the chunks then move the least needed to reach those
shares (:func:`rebalance`). Hysteresis: a move is made only when the predicted time saved over
the next ``horizon_iterations`` beats the migration's predicted pause by ``margin``, a pause
learned from those the decisions already carried out caused (:class:`PauseModel`). A spare
server is added when one more server is predicted to cut the slowest time by at least
``scale_out_gain`` and to pay for its start; a server whose share is near zero is drained and
removed. Every decision says why.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from unstall.config import check, check_non_negative, check_positive
from unstall.ps.assign.base import CostPhase
from unstall.ps.assign.oracle import best_shares
from unstall.ps.links import ServerCost

if TYPE_CHECKING:  # the Ray actor's module; the controller itself runs without Ray
    from unstall.ps.server import ServerIteration


@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """Knobs of the controller (defaults suit the presets' 4 MB models on 25 MB/s links)."""

    window: int = 6  # samples kept per server
    min_samples: int = 2  # below this a server is uncertain: explored, not trusted
    z: float = 3.0  # a sample beyond z standard errors (or ``change_tolerance``) is a change
    change_tolerance: float = 0.25  # relative: smaller deviations are noise
    explore_share: float = 0.04  # of all bytes, for each uncertain server
    horizon_iterations: int = 50
    margin: float = 1.5  # predicted gain must beat the cost by this factor
    min_relative_gain: float = 0.03  # and cut the slowest server's time by at least this much
    # Priors of the pause a decision causes; replaced by what the pauses of the decisions
    # already carried out measured (:class:`PauseModel`), when ``learn_pauses``.
    migration_mb_s: float = 200.0  # speed of moving chunk state server to server
    migration_fixed_s: float = 0.05  # pause of any migration (routing switch)
    scale_out_gain: float = 0.15  # relative cut of the slowest time an extra server must give
    scale_out_cost_s: float = 1.0  # pause of starting a server, on top of its migration
    learn_pauses: bool = True
    pause_window: int = 8  # measured pauses kept per kind of decision
    scale_in_share: float = 0.02  # a server predicted to deserve less than this is removed

    def __post_init__(self) -> None:
        check(self.window >= 2, self, "window", f"must be >= 2, got {self.window}")
        check(self.min_samples >= 1, self, "min_samples", "must be >= 1")
        check_positive(
            self,
            z=self.z,
            margin=self.margin,
            migration_mb_s=self.migration_mb_s,
            horizon_iterations=self.horizon_iterations,
            pause_window=self.pause_window,
        )
        check_non_negative(
            self, migration_fixed_s=self.migration_fixed_s, scale_out_cost_s=self.scale_out_cost_s
        )
        check(0 < self.explore_share < 0.5, self, "explore_share", "must be in (0, 0.5)")
        check(0 <= self.scale_in_share < 0.5, self, "scale_in_share", "must be in [0, 0.5)")


# --- telemetry in -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ServerSample:
    """One server in one iteration: the bytes it owned and the seconds it took for them."""

    server: int
    owned_bytes: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class ClusterView:
    """What the controller may change: chunk sizes, owners, live servers, spares left."""

    chunk_bytes: Mapping[int, int]  # chunk id -> bytes
    owner: Mapping[int, int]  # chunk id -> server id
    servers: tuple[int, ...]
    next_server: int  # the id a scale-out would get
    spares_left: int

    def loads(self) -> dict[int, int]:
        out = dict.fromkeys(self.servers, 0)
        for cid, sid in self.owner.items():
            out[sid] += self.chunk_bytes[cid]
        return out


# --- decisions out ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NoChange:
    reason: str


@dataclass(frozen=True, kw_only=True)
class Reassign:
    owner: Mapping[int, int]
    reason: str
    moved_bytes: int = 0
    predicted_before_s: float = 0.0
    predicted_after_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ScaleOut:
    """Start server ``server`` and route ``owner`` (which gives it an exploration share)."""

    server: int
    owner: Mapping[int, int]
    reason: str


@dataclass(frozen=True, kw_only=True)
class ScaleIn:
    """Route ``owner`` (nothing on ``server``), then stop ``server``."""

    server: int
    owner: Mapping[int, int]
    reason: str


Decision = NoChange | Reassign | ScaleOut | ScaleIn


# --- estimates ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RateEstimate:
    """Seconds per owned byte: window mean, standard error, samples."""

    per_byte_s: float
    stderr: float
    samples: int

    @property
    def rate_mb_s(self) -> float:
        return 1e-6 / self.per_byte_s if self.per_byte_s > 0 else math.inf


@dataclass
class RateEstimator:
    """Sliding windows of seconds-per-byte samples, one per server."""

    config: ControllerConfig
    windows: dict[int, deque[float]] = field(default_factory=dict)
    # Servers once measured ``min_samples`` times: after a change their one new sample is
    # trusted (the change is the news), where a new server is explored first.
    established: set[int] = field(default_factory=set)

    def add(self, sample: ServerSample) -> bool:
        """Add a sample; True when it revealed a change (the window restarted at it)."""
        if sample.owned_bytes <= 0:
            return False
        value = sample.seconds / sample.owned_bytes
        window = self.windows.setdefault(sample.server, deque(maxlen=self.config.window))
        est = self.estimate(sample.server)
        changed = False
        if est is not None and est.samples >= self.config.min_samples:
            bound = max(self.config.z * est.stderr, self.config.change_tolerance * est.per_byte_s)
            if abs(value - est.per_byte_s) > bound:
                window.clear()
                changed = True
        window.append(value)
        if len(window) >= self.config.min_samples:
            self.established.add(sample.server)
        return changed

    def estimate(self, server: int) -> RateEstimate | None:
        window = self.windows.get(server)
        if not window:
            return None
        values = list(window)
        se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf
        return RateEstimate(per_byte_s=statistics.fmean(values), stderr=se, samples=len(values))

    def forget(self, server: int) -> None:
        self.windows.pop(server, None)
        self.established.discard(server)

    def trusted(self, server: int) -> bool:
        est = self.estimate(server)
        if est is None:
            return False
        return est.samples >= self.config.min_samples or server in self.established


def samples_from(servers: Sequence[ServerIteration]) -> list[ServerSample]:
    """Per-server samples from an iteration's telemetry: the seconds the server's links were
    occupied by the workers' pushes and pulls (both directions) plus its step. These are the
    transfer times as the server saw them, without the queueing that depends on when each worker
    arrived, so a sample per byte is the server's service time whatever its load."""
    return [
        ServerSample(server=s.server, owned_bytes=s.owned_bytes, seconds=s.busy_s) for s in servers
    ]


# --- the pause a decision causes -----------------------------------------------------------------


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


# --- moving chunks to target loads --------------------------------------------------------------


def rebalance(
    chunk_bytes: Mapping[int, int], owner: Mapping[int, int], target: Mapping[int, float]
) -> dict[int, int]:
    """An owner map whose loads approach ``target`` (bytes per server) moving few chunks.

    A server whose target is 0 gives away everything; then, one chunk at a time, the most
    overloaded server gives the most underloaded one the chunk that brings the pair closest to
    their targets, for as long as a move brings them closer."""
    new = dict(owner)
    loads = dict.fromkeys(target, 0.0)
    for cid, sid in owner.items():
        loads[sid] = loads.get(sid, 0.0) + chunk_bytes[cid]
    receivers = [s for s in target if target[s] > 0]

    def move(cid: int, dst: int) -> None:
        loads[new[cid]] -= chunk_bytes[cid]
        loads[dst] += chunk_bytes[cid]
        new[cid] = dst

    for cid in sorted(new, key=lambda c: -chunk_bytes[c]):
        if target.get(new[cid], 0.0) <= 0:
            move(cid, max(receivers, key=lambda s: (target[s] - loads[s], -s)))
    for _ in range(2 * len(new)):
        src = max(loads, key=lambda s: (loads[s] - target.get(s, 0.0), -s))
        dst = max(receivers, key=lambda s: (target[s] - loads[s], -s))
        excess, deficit = loads[src] - target.get(src, 0.0), target[dst] - loads[dst]
        mine = [c for c in new if new[c] == src]
        if excess <= 0 or deficit <= 0 or not mine:
            break
        best = min(
            mine, key=lambda c: (abs(excess - chunk_bytes[c]) + abs(deficit - chunk_bytes[c]), c)
        )
        if chunk_bytes[best] >= excess + deficit:
            break  # no chunk brings the pair closer to their targets
        move(best, dst)
    return new


def moved_bytes(chunk_bytes: Mapping[int, int], a: Mapping[int, int], b: Mapping[int, int]) -> int:
    return sum(chunk_bytes[c] for c in a if a[c] != b[c])


def predicted_s(per_byte: Mapping[int, float], loads: Mapping[int, float]) -> float:
    """The slowest server's predicted seconds for ``loads``."""
    return max((per_byte[s] * b for s, b in loads.items() if b > 0), default=0.0)


# --- the controller -----------------------------------------------------------------------------


class PSLDController:
    """Feed it every iteration's samples (:meth:`observe`), ask it what to do (:meth:`decide`)."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self.estimator = RateEstimator(self.config)
        self.pauses = PauseModel(self.config)

    def observe(self, samples: Sequence[ServerSample]) -> list[int]:
        """Take one iteration's samples; the servers whose conditions changed."""
        return [s.server for s in samples if self.estimator.add(s)]

    def observe_pause(self, sample: PauseSample) -> None:
        """Take the pause a decision carried out caused: the hysteresis learns its cost."""
        self.pauses.observe(sample)

    def estimates(self, servers: Sequence[int]) -> dict[int, RateEstimate]:
        out = {}
        for sid in servers:
            est = self.estimator.estimate(sid)
            if est is not None:
                out[sid] = est
        return out

    def decide(self, view: ClusterView) -> Decision:
        est = self.estimates(view.servers)
        known = {s: e.per_byte_s for s, e in est.items() if self.estimator.trusted(s)}
        if not known:
            return NoChange(reason="warming up: no server measured enough yet")
        uncertain = [s for s in view.servers if s not in known]
        prior = statistics.median(known.values())  # an unmeasured server is assumed typical
        per_byte = {s: known.get(s, prior) for s in view.servers}
        target = self._target(view, known, uncertain)
        return (
            self._scale_in(view, known, target, per_byte)
            or self._scale_out(view, known, uncertain, per_byte, prior)
            or self._reassign(view, target, per_byte, uncertain)
        )

    # -- the pieces of a decision --

    def _target(
        self, view: ClusterView, known: Mapping[int, float], uncertain: Sequence[int]
    ) -> dict[int, float]:
        """Bytes per server: exploration shares for the uncertain, the min-max split of the
        rest over the known."""
        total = sum(view.chunk_bytes.values())
        explore = min(self.config.explore_share, 0.5 / max(1, len(uncertain)))
        rest = total * (1.0 - explore * len(uncertain))
        shares = optimal_shares(known)
        target = {s: rest * shares[s] for s in known}
        target.update({s: total * explore for s in uncertain})
        return target

    def _scale_in(
        self,
        view: ClusterView,
        known: Mapping[int, float],
        target: Mapping[int, float],
        per_byte: Mapping[int, float],
    ) -> ScaleIn | None:
        if len(view.servers) < 2 or len(known) < 2:
            return None
        total = sum(view.chunk_bytes.values())
        useless = [s for s in known if target[s] < self.config.scale_in_share * total]
        if not useless:
            return None
        victim = min(useless, key=lambda s: (target[s], -s))
        rest = {s: p for s, p in known.items() if s != victim}
        shares = optimal_shares(rest)
        new_target = {s: shares.get(s, 0.0) * total for s in view.servers}
        new_target.update({s: target[s] for s in view.servers if s not in known})
        new_target[victim] = 0.0
        owner = rebalance(view.chunk_bytes, view.owner, new_target)
        share = target[victim] / total
        return ScaleIn(
            server=victim,
            owner=owner,
            reason=f"server {victim} would get {share:.1%} of the bytes "
            f"(< {self.config.scale_in_share:.0%}): drained and stopped",
        )

    def _scale_out(
        self,
        view: ClusterView,
        known: Mapping[int, float],
        uncertain: Sequence[int],
        per_byte: Mapping[int, float],
        prior: float,
    ) -> ScaleOut | None:
        if view.spares_left <= 0 or uncertain:
            return None  # one newcomer at a time, measured before the next
        total = sum(view.chunk_bytes.values())
        now = predicted_s(per_byte, view.loads())
        best = _split_time(known, total)
        with_extra = _split_time({**known, view.next_server: prior}, total)
        cut = (best - with_extra) / best if best > 0 else 0.0
        gain_s = (now - with_extra) * self.config.horizon_iterations
        cost_s = self.pauses.scale_out_s(total * self.config.explore_share)
        if cut < self.config.scale_out_gain or gain_s <= self.config.margin * cost_s:
            return None
        target = self._target(view, known, [view.next_server])
        owner = rebalance(view.chunk_bytes, view.owner, target)
        return ScaleOut(
            server=view.next_server,
            owner=owner,
            reason=f"one more server is predicted to cut the slowest server's time by {cut:.0%} "
            f"({best * 1e3:.1f} -> {with_extra * 1e3:.1f} ms), {gain_s:.2f} s over "
            f"{self.config.horizon_iterations} iterations against {cost_s:.2f} s to start it "
            f"({self.pauses.source()}); "
            "it starts with an exploration share",
        )

    def _reassign(
        self,
        view: ClusterView,
        target: Mapping[int, float],
        per_byte: Mapping[int, float],
        uncertain: Sequence[int],
    ) -> Reassign | NoChange:
        owner = rebalance(view.chunk_bytes, view.owner, target)
        moved = moved_bytes(view.chunk_bytes, view.owner, owner)
        before = predicted_s(per_byte, view.loads())
        after = predicted_s(per_byte, _loads(view.chunk_bytes, owner, view.servers))
        if moved == 0:
            return NoChange(reason=f"the assignment is already the best ({before * 1e3:.1f} ms)")
        gain_s = (before - after) * self.config.horizon_iterations
        cost_s = self.pauses.migration_s(moved)
        explore = [s for s in uncertain if view.loads()[s] == 0]
        relative = (before - after) / before if before > 0 else 0.0
        worth = gain_s > self.config.margin * cost_s and relative >= self.config.min_relative_gain
        if not (worth or explore):
            return NoChange(
                reason=f"predicted gain {gain_s:.3f} s over {self.config.horizon_iterations} "
                f"iterations ({relative:.1%}) does not beat the migration ({cost_s:.3f} s, "
                f"{self.pauses.source()})"
            )
        slowest = max(view.servers, key=lambda s: per_byte[s] * view.loads()[s])
        why = f"explore server(s) {explore}" if explore and not worth else "exploit"
        return Reassign(
            owner=owner,
            moved_bytes=moved,
            predicted_before_s=before,
            predicted_after_s=after,
            reason=f"{why}: slowest server {slowest} at {before * 1e3:.1f} ms, "
            f"predicted {after * 1e3:.1f} ms after moving {moved / 1e6:.2f} MB "
            f"(gain {gain_s:.2f} s over {self.config.horizon_iterations} iterations "
            f"vs {cost_s:.3f} s migration, {self.pauses.source()})",
        )


def optimal_shares(per_byte: Mapping[int, float]) -> dict[int, float]:
    """The min-max split of the bytes over servers with these seconds per byte."""
    ids = sorted(per_byte)
    if len(ids) == 1:
        return {ids[0]: 1.0}
    # Normalised to the fastest server: seconds per byte (~1e-7) are below the LP's tolerances.
    fastest = max(min(per_byte.values()), 1e-30)
    phase = CostPhase(
        weight=1.0,
        servers=tuple(
            ServerCost(fixed_s=0.0, per_byte_s=max(per_byte[s], 1e-30) / fastest) for s in ids
        ),
    )
    shares = best_shares(1, [phase])
    return {s: float(x) for s, x in zip(ids, np.asarray(shares), strict=True)}


def _split_time(per_byte: Mapping[int, float], total: float) -> float:
    shares = optimal_shares(per_byte)
    return max(per_byte[s] * shares[s] * total for s in per_byte)


def _loads(
    chunk_bytes: Mapping[int, int], owner: Mapping[int, int], servers: Sequence[int]
) -> dict[int, float]:
    out = dict.fromkeys(servers, 0.0)
    for cid, sid in owner.items():
        out[sid] += chunk_bytes[cid]
    return out

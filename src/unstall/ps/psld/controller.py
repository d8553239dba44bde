"""PSLD's controller, pure: per-server timings in, a load-distribution decision out.

From the estimates (:mod:`~unstall.ps.psld.rates`) the decision takes the shares of the bytes
that minimise the slowest server's predicted time (the oracle's linear programme on the
estimates, which without fixed costs has a closed form:
:func:`~unstall.ps.psld.balance.optimal_shares`); servers still uncertain (new,
or too few samples) get a small exploration share instead, so that they are measured without
risking much; the chunks then move the least needed to reach those shares
(:func:`~unstall.ps.psld.balance.rebalance`). Hysteresis: a move is made only when the
predicted time saved over the next ``horizon_iterations`` beats the migration's predicted pause
by ``margin``, a pause learned from those the decisions already carried out caused
(:class:`~unstall.ps.psld.pauses.PauseModel`). A spare server is added when one more server is
predicted to cut the slowest time by at least ``scale_out_gain`` and to pay for its start; a
server whose share is near zero is drained and removed. Every decision says why.

Warm start (``ControllerConfig.warm_start``): before the first iteration every server is
probed (:meth:`PSLDController.observe_probe`: a buffer through its links and step, the seconds
per byte it took) and the chunks are placed by the split those predicted speeds give
(:meth:`PSLDController.place`) instead of the even one; the first iteration's samples then
replace the probes' estimates. With ``probe_every`` the servers are probed again at iteration
boundaries: a probe outside a server's interval restarts its estimate there, before an
iteration has run at the new speed.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from unstall.ps.psld.balance import (
    loads_of,
    moved_bytes,
    optimal_shares,
    predicted_s,
    rebalance,
    split_time,
)
from unstall.ps.psld.config import ControllerConfig
from unstall.ps.psld.decisions import ClusterView, Decision, NoChange, Reassign, ScaleIn, ScaleOut
from unstall.ps.psld.pauses import PauseModel, PauseSample
from unstall.ps.psld.rates import RateEstimate, RateEstimator, ServerSample


class PSLDController:
    """Feed it every iteration's samples (:meth:`observe`), ask it what to do (:meth:`decide`)."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self.estimator = RateEstimator(self.config)
        self.pauses = PauseModel(self.config)

    def observe(self, samples: Sequence[ServerSample]) -> list[int]:
        """Take one iteration's samples; the servers whose conditions changed."""
        return [s.server for s in samples if self.estimator.add(s)]

    def observe_probe(self, samples: Sequence[ServerSample]) -> list[int]:
        """Take probes' samples (see :meth:`RateEstimator.add_probe`); the servers whose
        conditions changed."""
        return [s.server for s in samples if self.estimator.add_probe(s)]

    def place(self, view: ClusterView) -> Reassign | NoChange:
        """The warm start: the owner map to load before the first iteration, from what the
        probes predicted (the min-max split over every server, as :meth:`decide` would make
        it once measured). Nothing is loaded yet, so nothing moves and no hysteresis applies;
        NoChange when a server has no estimate (the even split stays)."""
        est = self.estimates(view.servers)
        if len(est) < len(view.servers):
            return NoChange(reason="warm start: a server has no estimate; the even split stays")
        per_byte = {s: e.per_byte_s for s, e in est.items()}
        owner = rebalance(view.chunk_bytes, view.owner, self._target(view, per_byte, []))
        before = predicted_s(per_byte, view.loads())
        after = predicted_s(per_byte, loads_of(view.chunk_bytes, owner, view.servers))
        speeds = ", ".join(f"{s}: {est[s].rate_mb_s:.1f}" for s in sorted(est))
        return Reassign(
            owner=owner,
            moved_bytes=0,
            predicted_before_s=before,
            predicted_after_s=after,
            reason=f"warm start: probed service rates, MB of owned parameters/s ({speeds}); "
            f"the slowest server "
            f"predicted {after * 1e3:.1f} ms instead of {before * 1e3:.1f} ms at the even split",
        )

    def tripwires(self, view: ClusterView) -> dict[int, float]:
        """Per server, the seconds per owned byte beyond which a probe sent as an iteration
        starts should hold its pushes back for :meth:`decide`: outside the server's interval
        (a change, as :meth:`observe_probe` will find it) and slow enough to make it the
        slowest server by ``min_relative_gain`` (a server that stays fast enough is left to
        the iteration's samples). Only servers that own bytes and have an interval."""
        est = self.estimates(view.servers)
        loads = view.loads()
        slowest = predicted_s({s: e.per_byte_s for s, e in est.items()}, {s: loads[s] for s in est})
        out = {}
        for sid in est:
            upper = self.estimator.upper(sid)
            if loads[sid] <= 0 or upper is None:
                continue
            out[sid] = max(upper, slowest * (1 + self.config.min_relative_gain) / loads[sid])
        return out

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
        best = split_time(known, total)
        with_extra = split_time({**known, view.next_server: prior}, total)
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
        after = predicted_s(per_byte, loads_of(view.chunk_bytes, owner, view.servers))
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

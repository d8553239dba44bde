"""The knobs of PSLD's controller."""

from __future__ import annotations

from dataclasses import dataclass

from unstall.config import check, check_non_negative, check_positive


@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """Knobs of the controller (defaults suit the presets' 4 MB models on 25 MB/s links)."""

    window: int = 6  # samples kept per server
    # Below this a server is uncertain: explored, not trusted. One: a server's first sample,
    # taken with all of its even share, is already a whole iteration's transfers; waiting for
    # a second cost the presets' 10-iteration runs a tenth of their time at the straggler's pace.
    min_samples: int = 1
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
    # Warm start: before the first iteration every server is probed (a buffer standing for
    # ``probe_bytes`` of owned parameters goes through its emulated links and step and back)
    # and the run starts from the split those predicted speeds give, not from the even one,
    # which would run the first iteration at the straggler's pace and move load after it.
    warm_start: bool = True
    # A probe's sample is an iteration's observable (the seconds its bytes held the server's
    # links and step), exact on the emulated links whatever the size: 4 KiB keeps the probe
    # of a quarter-speed link at a few milliseconds. On real links, where that time is
    # measured with noise, a larger probe averages more.
    probe_bytes: int = 4_096
    # Every this many iterations (0: never) the servers are probed again at the boundary,
    # after the conditions of the next iteration are in place: a probe far from a server's
    # estimate restarts it there, so the split changes before the straggler slows an
    # iteration rather than after.
    probe_every: int = 0
    # Every iteration each server that owns bytes (and has an interval) is probed as the
    # workers start computing, when its links are idle: a probe slower than the server's
    # interval and slow enough to make it the slowest server by ``min_relative_gain`` holds
    # every push back until the controller has decided (and moved chunks), so a straggler
    # that appeared at the boundary slows no iteration; otherwise the pushes go on at once.
    probe_in_step: bool = True

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
        check(self.probe_bytes >= 1, self, "probe_bytes", f"must be >= 1, got {self.probe_bytes}")
        check(self.probe_every >= 0, self, "probe_every", f"must be >= 0, got {self.probe_every}")

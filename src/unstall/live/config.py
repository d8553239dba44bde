"""How a live run is carried out: one frozen config, built once and handed whole to the backend.

Times in a live run are *trace seconds*: wall seconds times ``speedup``, so that a live run and a
simulated one of the same trace compare column for column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from unstall.config import check, check_number

COMPUTE_MODES = ("real", "emulated")
# The Ray resource that stands for one GPU on a node without GPUs (tests, laptops, emulated
# clusters): a node declares ``{"unstall_gpu": 4}`` and hosts four executors.
DEFAULT_SLOT_RESOURCE = "unstall_gpu"
OWNER = "LiveConfig"


@dataclass(frozen=True, kw_only=True)
class LiveConfig:
    """Settings of one live run.

    - ``speedup``: trace seconds per wall second. A job's work (its trace duration at its
      consolidated placement) is divided by it, and every reported time is wall time times it.
    - ``compute``: ``"real"`` trains the job's model (real forward, backward and all-reduce);
      ``"emulated"`` waits the perf model's iteration time on the job's placement (compute plus
      the transfer not hidden behind it, with the links shared as the simulator shares them)
      and does a real all-reduce of a small buffer every step, so the job's processes still
      synchronise for real.
    - ``slot_resource``: the Ray resource that counts GPUs on nodes without a ``GPU`` resource.
    - ``step_wall_s``: an emulated step waits for this many wall seconds at least (several
      iterations at once), so that many emulated GPUs on one machine do not spend their time
      in Python's per-iteration overhead; it is also how quickly a stop request is answered.
    - ``checkpoint_every_s``: wall seconds between the checkpoints a running job leaves (a job
      whose process dies resumes from its last one; preemption and migration checkpoint at once).
    - ``batch_size`` and ``image_size``: the per-GPU batch and the image side of zoo models in
      real compute (small on CPUs; a GPU cluster may raise them).
    - ``lr``: the SGD learning rate of real compute (momentum 0.9).
    - ``restore_s`` and ``startup_s``: the checkpoint-and-restore time and a job's start-up
      time that the simulator's prediction beside a live run charges (None: what this run
      measured; the start-up each job's own, the median for jobs that never started).
    - ``join_timeout_s``: how long a job's processes wait for each other to form their group.
    - ``max_failures``: a job whose processes fail this many times in a row without getting
      past their last checkpoint is given up (outcome ``failed``, its error in the job table)
      and the run goes on: a job that cannot run (a model that does not fit, a broken data
      function) must not hold its GPUs in a loop of restarts.
    - ``seed``: seeds the synthetic data, the models' initial weights and the policy's random
      generator.
    """

    speedup: float = 1.0
    compute: str = "emulated"
    slot_resource: str = DEFAULT_SLOT_RESOURCE
    step_wall_s: float = 0.05
    checkpoint_every_s: float = 5.0
    batch_size: int = 8
    image_size: int = 32
    lr: float = 0.05
    restore_s: float | None = None
    startup_s: float | None = None
    join_timeout_s: float = 60.0
    max_failures: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("speedup", "step_wall_s", "checkpoint_every_s", "lr", "join_timeout_s"):
            value = getattr(self, name)
            check_number(OWNER, name, value, wanted="a number")
            check(math.isfinite(value) and value > 0, OWNER, name, f"must be > 0, got {value!r}")
        check(
            self.compute in COMPUTE_MODES,
            OWNER,
            "compute",
            f"must be one of {', '.join(COMPUTE_MODES)}, got {self.compute!r}",
        )
        check(
            isinstance(self.slot_resource, str) and bool(self.slot_resource),
            OWNER,
            "slot_resource",
            f"must name a Ray resource, got {self.slot_resource!r}",
        )
        for name in ("batch_size", "image_size"):
            value = getattr(self, name)
            check_number(OWNER, name, value, whole=True)
            check(value >= 1, OWNER, name, f"must be >= 1, got {value!r}")
        check_number(OWNER, "seed", self.seed, whole=True)
        check_number(OWNER, "max_failures", self.max_failures, whole=True)
        check(
            self.max_failures >= 1,
            OWNER,
            "max_failures",
            f"must be >= 1, got {self.max_failures!r}",
        )
        for name in ("restore_s", "startup_s"):
            value = getattr(self, name)
            check_number(OWNER, name, value, optional=True, wanted="seconds or None")
            check(value is None or value >= 0, OWNER, name, f"must be >= 0, got {value!r}")

    @property
    def emulated(self) -> bool:
        return self.compute == "emulated"

"""How the workers were launched: by ``unstall profile run`` itself (spawned on this host) or by
torchrun (one process per worker, possibly on several hosts). Pure: reads a given environment.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` in every process it starts; the profiler then joins that group (``env://``)
instead of spawning its own workers. Hosts are ``WORLD_SIZE // LOCAL_WORLD_SIZE`` (torchrun
starts the same number of processes on every host and numbers ranks host by host).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from unstall.config import check

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")


@dataclass(frozen=True, kw_only=True)
class TorchrunLaunch:
    """This process's place in a torchrun launch."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str

    def __post_init__(self) -> None:
        check(self.world_size >= 1, "torchrun", "WORLD_SIZE", "must be >= 1")
        check(0 <= self.rank < self.world_size, "torchrun", "RANK", "must be in [0, WORLD_SIZE)")
        check(self.local_world_size >= 1, "torchrun", "LOCAL_WORLD_SIZE", "must be >= 1")
        check(
            self.world_size % self.local_world_size == 0,
            "torchrun",
            "LOCAL_WORLD_SIZE",
            "must divide WORLD_SIZE (the same number of workers on every host)",
        )
        check(
            0 <= self.local_rank < self.local_world_size,
            "torchrun",
            "LOCAL_RANK",
            "must be in [0, LOCAL_WORLD_SIZE)",
        )

    @property
    def nodes(self) -> int:
        return self.world_size // self.local_world_size


def torchrun_launch(environ: Mapping[str, str]) -> TorchrunLaunch | None:
    """The launch described by ``environ`` (``os.environ``), or ``None`` outside torchrun."""
    if not all(name in environ for name in TORCHRUN_VARIABLES):
        return None
    numbers = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        text = environ[name]
        check(text.strip().isdigit(), "torchrun", name, f"not a number: {text!r}")
        numbers[name.lower()] = int(text)
    return TorchrunLaunch(master_addr=environ["MASTER_ADDR"], **numbers)

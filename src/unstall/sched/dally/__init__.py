"""Dally: network-sensitive scheduling (delay scheduling over locality levels, network-sensitive
preemption and re-consolidation), its decision a sequence of named steps the settings turn on
(:data:`~unstall.sched.dally.config.STEPS`), one file a mechanism."""

from unstall.sched.dally.config import DallyConfig
from unstall.sched.dally.policy import Dally

__all__ = ["Dally", "DallyConfig"]

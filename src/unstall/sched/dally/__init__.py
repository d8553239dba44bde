"""Dally: network-sensitive scheduling (delay scheduling over locality levels, network-sensitive
preemption and re-consolidation, and an auto-tuner for the delay timers), one file a mechanism."""

from unstall.sched.dally.config import DallyConfig
from unstall.sched.dally.policy import Dally

__all__ = ["Dally", "DallyConfig"]

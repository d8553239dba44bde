"""The optional members of the SpeedModel protocol: their defaults, for models that lack them,
and what the perf model declares."""

from __future__ import annotations

from sim_fakes import FakeSpeed
from unstall.net import small
from unstall.sched import ClusterLayout
from unstall.sim.perf_speed import PerfSpeedModel
from unstall.sim.speed import speed_capabilities


def test_a_speed_model_without_the_optional_members_gets_the_defaults() -> None:
    layout = ClusterLayout.regular(racks=1, nodes_per_rack=2, gpus_per_node=4)
    caps = speed_capabilities(FakeSpeed(layout))
    assert caps.base_iter_s is None and caps.rate_timing is None


def test_the_perf_model_times_by_rate_and_measures_per_type_only_when_heterogeneous() -> None:
    regular = speed_capabilities(PerfSpeedModel(small()))
    assert regular.base_iter_s is None and regular.rate_timing is not None
    other_type = speed_capabilities(PerfSpeedModel(small(), duration_gpu="k80"))
    assert other_type.base_iter_s is not None

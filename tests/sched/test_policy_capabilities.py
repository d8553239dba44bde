"""The optional members of the Policy protocol: their defaults, for policies that lack them, and
what the built-ins declare."""

from __future__ import annotations

import random

import unstall.sim  # noqa: F401  (provides dally's look-ahead to the registry)
from unstall.sched import (
    ClusterSnapshot,
    Decision,
    PolicyBase,
    make_policy,
    policy_capabilities,
)


class Bare:
    """A user's policy with only the protocol's required members."""

    name = "bare"
    needs_oracle = False

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return Decision()

    def reset(self) -> None:
        pass


class Ticking(PolicyBase):
    name = "ticking"
    tick_s = 60.0

    def decide(self, snapshot: ClusterSnapshot, rng: random.Random) -> Decision:
        return Decision()


def test_a_policy_without_the_optional_members_gets_the_defaults() -> None:
    caps = policy_capabilities(Bare())
    assert (caps.needs_oracle, caps.tick_s) == (False, None)
    assert policy_capabilities(object()).needs_oracle is False


def test_policy_base_holds_the_defaults_and_a_subclass_overrides_them() -> None:
    assert (PolicyBase.needs_oracle, PolicyBase.tick_s) == (False, None)
    ticking = Ticking()
    ticking.reset()  # PolicyBase's: nothing to forget
    assert policy_capabilities(ticking).tick_s == 60.0


def test_the_built_in_policies_declare_their_capabilities() -> None:
    assert policy_capabilities(make_policy("srtf")).needs_oracle is True
    assert policy_capabilities(make_policy("tiresias")).tick_s == 300.0
    assert policy_capabilities(make_policy("dally", tick_s=120.0)).tick_s == 120.0
    for name in ("fifo", "consolidate", "gandiva", "dally"):
        policy = make_policy(name)
        assert isinstance(policy, PolicyBase)
        assert policy_capabilities(policy) == policy_capabilities(Bare())

"""Policies from what a user names: a registered name or ``FILE.py:Class`` with options as
text typed by the policy's options dataclass, or typed options through make_policy; a policy
object as it is; bad text gives one error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

import unstall.sim  # noqa: F401  (provides dally's look-ahead to the registry)
from policy_files import write_user_policies
from unstall.errors import ArgumentTypeError, ConfigError
from unstall.sched import (
    Dally,
    DallyConfig,
    Fifo,
    labelled_policy,
    make_policy,
    policy_options_class,
    policy_text_options,
    resolve_policy,
)
from unstall.sched.dally.lookahead_config import DallyOptions
from unstall.usercode import UserCodeError


@pytest.mark.parametrize(
    ("entry", "split"),
    [
        ("nodelay=dally-fixed", ("nodelay", "dally-fixed")),
        (" a_b-2 = my.py:Mine ", ("a_b-2", "my.py:Mine")),
        ("dally", ("dally", "dally")),
        ("dir.x=y.py:C", ("dir.x=y.py:C", "dir.x=y.py:C")),  # no label: a file name with "="
        ("a/b=c.py:D", ("a/b=c.py:D", "a/b=c.py:D")),
        ("=fifo", ("=fifo", "=fifo")),
        ("x=", ("x=", "x=")),
    ],
)
def test_a_labelled_entry_splits_into_label_and_policy(entry: str, split: tuple[str, str]) -> None:
    assert labelled_policy(entry) == split


def test_registered_policies_take_typed_text_options() -> None:
    policy = resolve_policy(
        "dally-fixed", (("order", "las"), ("preemption", "no"), ("wait_factor", "4"))
    )
    assert isinstance(policy, Dally)
    assert policy.config.order == "las"
    assert policy.config.preemption is False
    assert policy.config.wait_factor == 4.0
    thresholds = resolve_policy("dally-fixed", (("las_thresholds_gpu_s", "10,20"),))
    assert isinstance(thresholds, Dally)
    assert thresholds.config.las_thresholds_gpu_s == (10.0, 20.0)
    assert resolve_policy("fifo").name == "fifo"
    assert (
        policy_options_class("dally-fixed") is DallyConfig and policy_options_class("fifo") is None
    )
    assert policy_text_options("dally-fixed", (("order", "las"),)) == {"order": "las"}
    assert policy_options_class("dally") is DallyOptions  # Dally's knobs and its tuner's


@pytest.mark.parametrize(
    ("name", "options", "named"),
    [
        # Text options are named as their user names them: the policy, not its options class.
        ("dally-fixed", [("no_such_knob", "1")], "dally-fixed.no_such_knob"),
        ("dally-fixed", [("preemption", "maybe")], "dally-fixed.preemption"),
        ("dally-fixed", [("wait_factor", "fast")], "dally-fixed.wait_factor"),
        ("dally-fixed", [("wiat_factor", "4")], "unknown option (did you mean 'wait_factor'?)"),
        ("dally-fixed", [("order", "random")], "DallyConfig.order"),
        ("fifo", [("order", "las")], "policy.options"),
        ("nope", [], "unknown policy 'nope'"),
    ],
)
def test_bad_policy_text_names_the_field(
    name: str, options: list[tuple[str, str]], named: str
) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_policy(name, options)
    assert named in str(err.value)


def test_user_policy_classes_load_from_a_file_with_typed_options(tmp_path: Path) -> None:
    path = write_user_policies(tmp_path)
    greedy = resolve_policy(f"{path}:Greedy", (("largest_first", "yes"),))
    assert greedy.name == "greedy" and greedy.largest_first is True  # type: ignore[attr-defined]
    plain = resolve_policy(f"{path}:Plain", (("margin", "3"),))
    assert plain.margin == 3.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"Greedy\.nope: unknown option"):
        resolve_policy(f"{path}:Greedy", (("nope", "1"),))
    with pytest.raises(ConfigError, match=r"Plain\.margin: 'wide' is not a float"):
        resolve_policy(f"{path}:Plain", (("margin", "wide"),))
    with pytest.raises(ConfigError, match="lacks the Policy protocol"):
        resolve_policy(f"{path}:NotAPolicy")
    # Only what is missing: the class defines name and needs_oracle.
    with pytest.raises(ConfigError) as half:
        resolve_policy(f"{path}:NoMethods", owner="SimRequest")
    assert str(half.value) == (
        f"make_policy.name: {path}:NoMethods built a NoMethods, which lacks the Policy "
        "protocol's decide(snapshot, rng) and reset()"
    )
    with pytest.raises(UserCodeError, match="Missing"):
        resolve_policy(f"{path}:Missing")


def test_make_policy_takes_user_code_with_typed_options(tmp_path: Path) -> None:
    path = write_user_policies(tmp_path)
    greedy = make_policy(f"{path}:Greedy", largest_first=True)
    assert greedy.largest_first is True  # type: ignore[attr-defined]
    assert make_policy(f"{path}:Plain", margin=2).margin == 2  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"Greedy\.largest_first: must be True or False"):
        make_policy(f"{path}:Greedy", largest_first="yes")
    with pytest.raises(ConfigError, match=r"Plain\.margin: must be a number, got 'x'"):
        make_policy(f"{path}:Plain", margin="x")
    assert policy_options_class(f"{path}:Greedy").__name__ == "Greedy"  # type: ignore[union-attr]


def test_a_policy_object_passes_and_a_wrong_type_is_a_type_error() -> None:
    fifo = Fifo()
    assert resolve_policy(fifo) is fifo
    with pytest.raises(ConfigError, match=r"resolve_policy\.options: given with a policy object"):
        resolve_policy(fifo, (("order", "las"),))
    with pytest.raises(TypeError) as err:
        resolve_policy(Fifo, owner="simulate")  # type: ignore[arg-type]
    assert isinstance(err.value, ArgumentTypeError)
    assert str(err.value).startswith("simulate.policy: takes a policy object (name, ")
    assert str(err.value).endswith("got a class, Fifo: instantiate it (Fifo())")
    with pytest.raises(TypeError, match=r"got int, which lacks name and needs_oracle and decide"):
        resolve_policy(3)  # type: ignore[arg-type]

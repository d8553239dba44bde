"""The front door: ``measure_stalls`` profiles a model, data and loss of the user's own (here
from a file the spawned workers cannot import), and its errors are one line naming the culprit."""

from __future__ import annotations

from pathlib import Path

import pytest

from unstall.errors import ConfigError, UnstallError
from unstall.net.link import Link
from unstall.profile import measure_stalls
from unstall.usercode import UserCodeError, load_callable

USER_CODE = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32))
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.body(x))


def model():
    return Net()


def data(rank, world_size):
    generator = torch.Generator().manual_seed(rank)
    for _ in range(6):
        yield torch.randn(5, 12, generator=generator), torch.randint(0, 4, (5,))


def loss(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets) * 2.0


def bad_loss(outputs, targets):
    return outputs.sum() / undefined_name


def not_a_model():
    return "a string"


def no_layers():
    return nn.ReLU()
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_training.py"
    path.write_text(USER_CODE, encoding="utf-8")
    return path


def _load(path: Path, name: str) -> object:
    return load_callable(f"{path}:{name}")


def test_a_model_data_and_loss_from_a_users_file_profile(user_file: Path) -> None:
    runs: list[str] = []
    report = measure_stalls(
        _load(user_file, "model"),  # type: ignore[arg-type]
        _load(user_file, "data"),  # type: ignore[arg-type]
        loss=_load(user_file, "loss"),  # type: ignore[arg-type]
        workers=2,
        network=Link(bandwidth_gbps=10.0, latency_us=2000.0),
        iterations=2,
        warmup=1,
        repeats=1,
        on_run=runs.append,
    )
    assert sorted(report.runs) == ["cached", "compute", "local", "network", "warm"]
    assert runs == ["compute", "warm", "cached", "local", "network"]  # the progress hook
    assert report.job_profile.device == "cpu" and report.device_name
    assert "first 4 batches each worker's iterable yields" in report.data
    spans = {(s.rank, s.run, s.iteration) for s in report.trace}
    assert {(rank, "network", i) for rank in (0, 1) for i in (0, 1)} <= spans
    assert {(0, "compute", 1), (0, "warm", 0)} <= spans
    profile = report.job_profile
    params = 12 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4
    assert (profile.model, profile.local_batch) == ("model", 5)
    assert (profile.gradient_bytes, profile.gradient_tensors, profile.layers) == (4 * params, 6, 3)
    assert profile.measured.keys() == {"1", "2", "11"}
    assert profile.data_s is not None and profile.data_s >= 0  # the user's pipeline was timed
    # Two buckets-worth of latency at most: one bucket, 2 ms, plus the bytes at 10 Gbit/s.
    assert report.emulated_delay_s == pytest.approx(2e-3 + 4 * params * 8 / 10e9, rel=0.01)
    assert report.to_dict()["network"] == {"gbps": 10.0, "latency_ms": 2.0}


def test_a_failing_loss_in_a_worker_is_one_line_naming_it(user_file: Path) -> None:
    with pytest.raises(UnstallError) as info:
        measure_stalls(
            _load(user_file, "model"),  # type: ignore[arg-type]
            _load(user_file, "data"),  # type: ignore[arg-type]
            loss=_load(user_file, "bad_loss"),  # type: ignore[arg-type]
            workers=1,
            iterations=1,
            warmup=0,
            repeats=1,
        )
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("profiling workers failed: loss function bad_loss (")
    assert "my_training.py" in message and "NameError" in message


def test_bad_arguments_fail_before_any_worker_starts(user_file: Path) -> None:
    data = _load(user_file, "data")
    with pytest.raises(
        UserCodeError, match=r"not_a_model .* returned a str, not a torch\.nn\.Module"
    ):
        measure_stalls(_load(user_file, "not_a_model"), data)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"no_layers has 0 trainable tensors"):
        measure_stalls(_load(user_file, "no_layers"), data, name="no_layers")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"measure_stalls\.data"):
        measure_stalls(_load(user_file, "model"), [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"ProfileConfig\.network"):
        measure_stalls(_load(user_file, "model"), data, network="1,0.5")  # type: ignore[arg-type]

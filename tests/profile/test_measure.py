"""The front door: ``measure_stalls`` profiles a model, data and loss of the user's own (here
from a file the spawned workers cannot import), and its errors are one line naming the culprit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unstall.errors import ConfigError, UnstallError
from unstall.net.link import Link
from unstall.profile import ProfileConfig, measure_stalls
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


def detached_loss(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets).detach()


def nan_loss(outputs, targets):
    return outputs.sum() * float("nan")


def short_rows(rank, world_size):
    for _ in range(6):
        yield torch.randn(5, 12 if rank == 0 else 7), torch.randint(0, 4, (5,))


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


def test_a_nan_loss_is_refused_in_one_line_naming_it(user_file: Path) -> None:
    with pytest.raises(UnstallError) as info:
        measure_stalls(
            _load(user_file, "model"),  # type: ignore[arg-type]
            _load(user_file, "data"),  # type: ignore[arg-type]
            loss=_load(user_file, "nan_loss"),  # type: ignore[arg-type]
            workers=1,
            iterations=1,
            warmup=0,
            repeats=1,
        )
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("profiling workers failed: loss function nan_loss (")
    assert (
        "returned nan on the first batch (outputs float32 (5, 4) and targets int64 (5,))" in message
    )


def test_a_loss_backward_cannot_start_from_is_refused_naming_it(user_file: Path) -> None:
    with pytest.raises(UnstallError) as info:
        measure_stalls(
            _load(user_file, "model"),  # type: ignore[arg-type]
            _load(user_file, "data"),  # type: ignore[arg-type]
            loss=_load(user_file, "detached_loss"),  # type: ignore[arg-type]
            workers=1,
            iterations=1,
            warmup=0,
            repeats=1,
        )
    message = str(info.value)
    assert message.startswith("profiling workers failed: loss function detached_loss (")
    assert "my_training.py" in message and "does not require grad" in message, message
    assert "\n" not in message


def test_a_loss_class_for_the_loss_is_refused_before_any_worker_starts(user_file: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"measure_stalls\.loss: .*, got the class MSELoss: build one, torch\.nn\.MSELoss\(\)",
    ):
        measure_stalls(
            _load(user_file, "model"),  # type: ignore[arg-type]
            _load(user_file, "data"),  # type: ignore[arg-type]
            loss=torch.nn.MSELoss,  # type: ignore[arg-type]
        )


def test_a_batch_the_model_cannot_take_on_one_worker_names_the_model_and_the_batch(
    user_file: Path,
) -> None:
    # Worker 1 alone gets 7 features where the model takes 12: torch's error is raised in
    # torch's code, inside the timed DDP loop; the message says whose model and which batch.
    with pytest.raises(UnstallError) as info:
        measure_stalls(
            _load(user_file, "model"),  # type: ignore[arg-type]
            _load(user_file, "short_rows"),  # type: ignore[arg-type]
            workers=2,
            iterations=1,
            warmup=0,
            repeats=1,
        )
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("profiling workers failed: the model of model function model (")
    assert f"{user_file}:" in message and "Net.forward" in message, message
    assert "on a batch of inputs float32 (5, 7), targets int64 (5,)" in message, message
    assert "mat1 and mat2 shapes cannot be multiplied" in message


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


def test_a_module_instance_for_the_model_is_refused_before_any_worker_starts(
    user_file: Path,
) -> None:
    """An nn.Module is callable (its forward): it used to reach the workers and fail there as
    "model function Sequential (...torch...) failed: TypeError: forward() missing ..."."""
    data = _load(user_file, "data")
    with pytest.raises(ConfigError) as info:
        measure_stalls(torch.nn.Linear(4, 2), data)  # type: ignore[arg-type]
    assert str(info.value) == (
        "measure_stalls.model: must be a function (or class) returning an nn.Module, or a"
        " model's name, got a Linear instance: pass what builds one, e.g."
        " functools.partial(torch.nn.Linear, ...) with its arguments"
    )
    with pytest.raises(ConfigError, match=r"measure_stalls\.model: .*got int 3$"):
        measure_stalls(3, data)  # type: ignore[arg-type]


UNGUARDED = """
import torch
from torch import nn
from unstall.profile import measure_stalls

def model():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

def data(rank, world_size):
    for _ in range(4):
        yield torch.randn(4, 8), torch.randint(0, 2, (4,))

measure_stalls(model, data, workers=2, iterations=1, warmup=0, repeats=1)
"""

GUARD_ADVICE = (
    "again in each worker: the script must guard its top-level code with"
    ' `if __name__ == "__main__":` (or call the profiler from an importable file)'
)


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout + result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path: Path) -> None:
    """Spawn runs the script again in each worker, which called measure_stalls again there;
    the error was "profiling workers failed: process 1 terminated with exit code 1" (or the
    last line of multiprocessing's own many-line message)."""
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert _last_line(run) == (
        "unstall.errors.UnstallError: the profiling workers are started with spawn, which runs"
        f" the calling script ({script}) {GUARD_ADVICE}"
    )


def test_a_script_read_from_stdin_is_told_to_run_from_a_file(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-"],
        input=UNGUARDED,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert _last_line(run) == (
        "unstall.errors.UnstallError: the profiling workers are started with spawn, which runs"
        " the calling script again in each worker, and '<stdin>' is not a file (a script read"
        ' from stdin?): run it from a file, its top-level code under `if __name__ == "__main__":`'
    )


def test_names_and_one_config_profile_a_zoo_model() -> None:
    """A model's name (its synthetic batches by default), a loss's name, and the config built
    once and handed whole."""
    config = ProfileConfig(workers=1, iterations=1, warmup=0, repeats=1)
    report = measure_stalls(
        "mlp:in_features=8,width=16,depth=2", None, config, loss="cross_entropy"
    )
    assert report.model == "mlp" and report.model_options["width"] == 16
    assert report.job_profile.local_batch == 8 and sorted(report.runs) == ["compute"]
    with pytest.raises(ConfigError, match=r"measure_stalls\.config: given with workers"):
        measure_stalls("mlp", None, config, workers=2)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        measure_stalls("mlp", None, wrokers=2)

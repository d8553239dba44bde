"""Data sources: each worker's in-memory batches, the data runs built from a user's function, and
the job bundle's trip to a process that cannot import the user's file."""

from __future__ import annotations

import functools
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unstall.profile import (
    ImageFileData,
    InjectedDelays,
    SyntheticBatches,
    SyntheticData,
    UserData,
)
from unstall.profile.images import read_dataset, write_image_dataset
from unstall.profile.job import ProfiledJob, model_shape, pack, unpack
from unstall.usercode import UserCodeError, load_callable
from unstall.workload import zoo

USER_CODE = """
import torch
from torch import nn


def model():
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def data(rank, world_size):
    for step in range(3):
        yield torch.full((2, 6), float(10 * rank + step)), torch.zeros(2, dtype=torch.long)


def broken(rank, world_size):
    yield torch.zeros(2, 6), torch.zeros(2, dtype=torch.long)
    raise RuntimeError("disk gone")


def not_pairs(rank, world_size):
    return [torch.zeros(2, 6)]


def nothing(rank, world_size):
    return iter(())


def dict_inputs(rank, world_size):
    yield {"x": torch.zeros(2, 6)}, torch.zeros(2, dtype=torch.long)
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_job.py"
    path.write_text(USER_CODE, encoding="utf-8")
    return path


def test_synthetic_batches_are_seeded_per_worker_and_cycled() -> None:
    synthetic = SyntheticData(functools.partial(zoo.example_batch, "mlp", in_features=8), 4)
    data = SyntheticBatches(synthetic)
    feed = data.memory_feed(0, 2, seed=0)
    again = data.memory_feed(0, 2, seed=0)
    other = data.memory_feed(1, 2, seed=0)
    assert feed(0)[0].shape == (4, 8)
    assert torch.equal(feed(1)[0], again(1)[0]) and torch.equal(feed(5)[0], feed(1)[0])
    assert not torch.equal(feed(0)[0], other(0)[0])
    assert data.data_runs == () and data.data_feeds(seed=0, delays=InjectedDelays()) == {}
    # the workload's one rule: worker r's batch of step i is SyntheticData.batch(r, i)
    assert torch.equal(feed(2)[0], synthetic.batch(0, 2)[0])


def test_user_data_gives_memory_batches_and_the_warm_and_cached_runs(user_file: Path) -> None:
    data = UserData(load_callable(f"{user_file}:data"), label="my_job.py:data")
    assert data.data_runs == ("warm", "cached")
    memory = data.memory_feed(1, 2, seed=0)  # worker 1's first batches, cycled
    assert [float(memory(i)[0][0, 0]) for i in range(4)] == [10.0, 11.0, 12.0, 10.0]
    feeds = data.data_feeds(seed=0, delays=InjectedDelays())
    # Warm: worker 0 of 1 reads its iterable as it runs, and again from the start when it ends.
    assert [float(feeds["warm"](i)[0][0, 0]) for i in range(5)] == [0.0, 1.0, 2.0, 0.0, 1.0]
    assert float(feeds["cached"](4)[0][0, 0]) == 1.0


def test_user_data_errors_name_the_function(user_file: Path) -> None:
    def source(name: str) -> UserData:
        return UserData(load_callable(f"{user_file}:{name}"))

    with pytest.raises(
        UserCodeError, match=r"broken .*my_job\.py:15\) failed, line 17: RuntimeError: disk gone"
    ):
        source("broken").data_feeds(seed=0, delays=InjectedDelays())["warm"](1)
    with pytest.raises(UserCodeError, match=r"not_pairs.*must yield \(inputs, targets\)"):
        source("not_pairs").memory_feed(0, 1, seed=0)
    with pytest.raises(UserCodeError, match=r"nothing.*yielded no batch"):
        source("nothing").memory_feed(0, 1, seed=0)
    # A pair whose inputs are no tensor: the message says what the pair held.
    with pytest.raises(UserCodeError, match=r"pairs of tensors; got a tuple \(dict, Tensor\)$"):
        source("dict_inputs").memory_feed(0, 1, seed=0)


def test_image_files_feed_their_own_decoded_images_without_a_memory_source(
    tmp_path: Path,
) -> None:
    write_image_dataset(tmp_path, count=6, image_size=32, num_classes=3, seed=0)
    data = ImageFileData(read_dataset(tmp_path), 4, label=str(tmp_path))
    assert data.memory_feed(1, 2, seed=0)(0)[0].shape == (4, 3, 32, 32)
    feeds = data.data_feeds(seed=0, delays=InjectedDelays())
    assert set(feeds) == {"cold", "warm", "cached"}
    data.before_run("cold")  # drops the files' pages; no root needed
    assert feeds["cold"](0)[1].shape == (4,)


def test_the_model_shape_of_a_user_model(user_file: Path) -> None:
    shape = model_shape(load_callable(f"{user_file}:model"))
    assert (shape.gradient_tensors, shape.layers) == (4, 2)
    assert shape.tensor_bytes == (6 * 5 * 4, 5 * 4, 5 * 3 * 4, 3 * 4)
    assert shape.gradient_bytes == sum(shape.tensor_bytes)


def test_a_job_from_a_users_file_reaches_a_process_that_cannot_import_it(
    user_file: Path, tmp_path: Path
) -> None:
    job = ProfiledJob(
        model=load_callable(f"{user_file}:model"),
        data=UserData(load_callable(f"{user_file}:data"), label="data"),
        loss=torch.nn.CrossEntropyLoss(),
    )
    blob = pack(job)
    assert isinstance(unpack(blob), ProfiledJob)
    # The blob names the user's folder (for what the file imports from beside it); the job
    # itself needs none of it: unpickled without that folder on sys.path.
    folders, _ = pickle.loads(blob)
    assert folders == (str(user_file.parent.resolve()),)
    script = (
        "import pickle, sys\n"
        "folders, packed = pickle.loads(sys.stdin.buffer.read())\n"
        "job = pickle.loads(packed)\n"
        "inputs, _ = job.data.memory_feed(1, 2, 0)(0)\n"
        "print(type(job.model()).__name__, float(inputs[0, 0]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=blob,
        capture_output=True,
        cwd=tmp_path.parent,  # not the user's folder: my_job is not importable there
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == ["Sequential", "10.0"]
    assert b"my_job" not in pickle.dumps(job.loss)

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unstall.errors import ConfigError
from unstall.traces import detect_format, read_trace
from unstall.traces.pollux import GPU_TIME_CATEGORY_S
from unstall.traces.reading import ReadOptions
from unstall.traces.schema import TraceError

TEXT = (
    "name,time,application,num_replicas,batch_size\n"
    "cifar10-0,107,cifar10,6,2048\n"
    "deepspeech2-1,110,deepspeech2,6,320\n"
    "ncf-2,135,ncf,1,32768\n"
    "imagenet-3,262,imagenet,16,3200\n"
)


def write(tmp_path: Path, text: str = TEXT) -> Path:
    path = tmp_path / "workload-1.csv"
    path.write_text(text)
    return path


def test_midpoint_rule_is_exact(tmp_path: Path) -> None:
    path = write(tmp_path)
    assert detect_format(path) == "pollux"
    trace = read_trace(path, options=ReadOptions(pollux_duration="midpoint"))
    jobs = trace.jobs
    assert list(jobs["job_id"]) == ["cifar10-0", "deepspeech2-1", "ncf-2", "imagenet-3"]
    assert list(jobs["submit_s"]) == [0.0, 3.0, 28.0, 155.0]
    assert trace.submit_offset_s == 107.0
    assert list(jobs["num_gpus"]) == [6, 6, 1, 16]
    assert list(jobs["model"]) == ["resnet18", "lstm_lm", "ncf", "resnet50"]
    expected = [
        np.sqrt(60 * 3600) / 6,
        3600 * np.sqrt(10) / 6,
        np.sqrt(60 * 3600),
        360000 * np.sqrt(10) / 16,
    ]
    assert np.allclose(jobs["duration_s"], expected)
    assert "midpoint" in trace.notes[0]


def test_category_rule_is_seeded_and_within_the_class(tmp_path: Path) -> None:
    path = write(tmp_path)
    a = read_trace(path, options=ReadOptions(seed=1))
    b = read_trace(path, options=ReadOptions(seed=1))
    c = read_trace(path, options=ReadOptions(seed=2))
    assert a.equals(b) and not a.equals(c)
    apps = ["cifar10", "deepspeech2", "ncf", "imagenet"]
    gpu_time = a.jobs["duration_s"] * a.jobs["num_gpus"]
    for app, t in zip(apps, gpu_time, strict=True):
        low, high = GPU_TIME_CATEGORY_S[app]
        assert low <= t <= high


def test_bad_rows(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown application 'gpt5'") as info:
        read_trace(write(tmp_path, TEXT + "gpt5-4,300,gpt5,1,8\n"))
    assert (info.value.line, info.value.field) == (6, "application")
    with pytest.raises(TraceError, match="must be >= 1") as info:
        read_trace(write(tmp_path, TEXT + "ncf-4,300,ncf,0,8\n"), "pollux")
    assert (info.value.line, info.value.field) == (6, "num_replicas")
    with pytest.raises(TraceError, match="duplicate id 'ncf-2'") as info:
        read_trace(write(tmp_path, TEXT + "ncf-2,300,ncf,1,8\n"), "pollux")
    assert (info.value.line, info.value.field) == (6, "name")


def test_unknown_rule_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="pollux_duration"):
        ReadOptions(pollux_duration="guess")


@pytest.mark.data
def test_the_pollux_workloads(shared_data: Path) -> None:
    files = sorted((shared_data / "pollux" / "workloads").glob("workload-*.csv"))
    if not files:
        pytest.skip("needs ../shared/data/pollux/workloads: not present")
    for path in files:
        trace = read_trace(path)
        assert trace.format == "pollux"
        assert len(trace) == 160
        assert trace.jobs["model"].notna().all()
        assert (trace.jobs["duration_s"] > 0).all()

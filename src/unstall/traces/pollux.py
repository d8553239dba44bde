"""Pollux workloads: ``name,time,application,num_replicas,batch_size``.

The Pollux artifact (petuum/adaptdl, ``simulator/workloads``) sampled 160 jobs of the Philly
trace per workload and kept only their submission ``time`` (seconds); it then replaced each job
by one of six applications, chosen by the sampled job's total GPU time:

=================  ==========================  =======================
GPU time           application(s)              zoo model used here
=================  ==========================  =======================
1 min - 1 h        ``cifar10``, ``ncf``        ``resnet18``, ``ncf``
1 h - 10 h         ``deepspeech2``, ``bert``   ``lstm_lm``, ``transformer``
10 h - 100 h       ``yolov3``                  ``resnet50``
100 h - 1000 h     ``imagenet``                ``resnet50``
=================  ==========================  =======================

(the 1-minute floor is the artifact's ``duration >= 60`` filter). A Pollux job has no run time:
it trains to a target and Pollux adapts its GPUs and batch size, so its duration is an outcome.
This reader therefore derives a duration by a documented rule, chosen with
``ReadOptions.pollux_duration``:

- ``category`` (default): the job's GPU time is drawn log-uniformly within its application's
  category above (seeded by ``ReadOptions.seed``), and ``duration = GPU time / num_replicas``
  (perfect scaling at the requested size).
- ``midpoint``: no randomness; every job gets its category's geometric midpoint GPU time
  (e.g. ``sqrt(1 h * 10 h)`` = 3.16 GPU-hours for ``bert``), divided by ``num_replicas``.

The rule and seed are written into the trace's notes. ``num_gpus`` is ``num_replicas``;
``batch_size`` is checked but not kept (the schema has no column for it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from unstall.traces.duration_rules import DURATION_RULES
from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.schema import Trace
from unstall.traces.validation import (
    CsvLines,
    Rows,
    check_columns,
    numbers,
    read_csv,
    texts,
    unique,
)

NAME = "pollux"
REQUIRED = ("name", "time", "application", "num_replicas")
OPTIONAL = ("batch_size",)

HOUR = 3600.0
# GPU-time bounds (seconds) of the category each application was drawn for (see the docstring).
GPU_TIME_CATEGORY_S: dict[str, tuple[float, float]] = {
    "cifar10": (60.0, 1 * HOUR),
    "ncf": (60.0, 1 * HOUR),
    "deepspeech2": (1 * HOUR, 10 * HOUR),
    "bert": (1 * HOUR, 10 * HOUR),
    "yolov3": (10 * HOUR, 100 * HOUR),
    "imagenet": (100 * HOUR, 1000 * HOUR),
}
# Nearest model of unstall's zoo for each Pollux application: ResNet-18 on CIFAR-10 and
# ResNet-50 on ImageNet are what Pollux ran; YOLOv3's Darknet-53 backbone is a residual CNN close
# to ResNet-50 in size; DeepSpeech2 is recurrent (lstm_lm); BERT is a transformer.
MODEL_FOR_APPLICATION: dict[str, str] = {
    "cifar10": "resnet18",
    "ncf": "ncf",
    "deepspeech2": "lstm_lm",
    "bert": "transformer",
    "yolov3": "resnet50",
    "imagenet": "resnet50",
}


def sniff(path: Path, header: Sequence[str]) -> bool:
    return set(REQUIRED) <= set(header) and set(header) <= set(REQUIRED + OPTIONAL)


def read(path: Path, options: ReadOptions) -> Trace:
    """Parse and validate a Pollux workload; durations by ``options.pollux_duration``."""
    frame = read_csv(path, text_columns=("name", "application"))
    check_columns(path, frame.columns, REQUIRED, OPTIONAL)
    rows = Rows(path, CsvLines(path))
    file_rows = np.arange(len(frame))
    names = texts(rows, frame["name"], file_rows, "name", allow_missing=False)
    unique(rows, names, file_rows, "name")
    submit = numbers(rows, frame["time"], file_rows, "time", minimum=0)
    replicas = numbers(
        rows, frame["num_replicas"], file_rows, "num_replicas", integer=True, minimum=1
    )
    if "batch_size" in frame.columns:
        numbers(rows, frame["batch_size"], file_rows, "batch_size", integer=True, minimum=1)
    app = texts(rows, frame["application"], file_rows, "application", allow_missing=False)
    known = app.isin(list(GPU_TIME_CATEGORY_S)).to_numpy(bool)
    shown = app.to_numpy(dtype=object)
    rows.fail_first(
        ~known,
        file_rows,
        "application",
        lambda i: f"unknown application {shown[i]!r}; known: {sorted(GPU_TIME_CATEGORY_S)}",
    )
    bounds = np.array([GPU_TIME_CATEGORY_S[a] for a in shown], dtype=np.float64).reshape(-1, 2)
    gpu_time = DURATION_RULES[options.pollux_duration](bounds[:, 0], bounds[:, 1], options.seed)
    jobs = pd.DataFrame(
        {
            "job_id": names,
            "submit_s": submit,
            "num_gpus": replicas.astype(np.int64),
            "duration_s": gpu_time / replicas,
            "model": app.map(MODEL_FOR_APPLICATION).astype("string"),
        }
    )
    note = (
        f"Pollux workloads have no run time: durations from rule {options.pollux_duration!r}"
        f" (seed {options.seed}), GPU time within each application's category / num_replicas"
    )
    return Trace.from_frame(jobs, source=str(path), format=NAME, notes=(note,))


READER = Reader(
    name=NAME,
    description="Pollux workload (name,time,application,num_replicas,batch_size); "
    "durations derived by a documented rule",
    suffixes=(".csv",),
    sniff=sniff,
    read=read,
)

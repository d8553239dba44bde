"""Stall profiler: where the time of an iteration of data-parallel training goes.

Differential runs of a real DDP training loop, each adding one source of waiting (DS-Analyzer's
method with two communication stalls): compute alone, the input pipeline (fetch and prep
stalls), N workers on one host (interconnect stall), N workers over the network or an emulated
link (network stall). What the part offers:

- :func:`measure_stalls` ``(model, data, *, loss=..., workers=, network=, ...)``: profile your
  model function, data (a :class:`DataSource` or a function ``(rank, world_size) -> batches``)
  and loss; returns a :class:`StallReport`, whose ``job_profile`` (a :class:`JobProfile`, saved
  with ``.save(path)`` and read back with ``JobProfile.load(path)``) drives
  :func:`unstall.cost.recommend` and ``unstall sim``. It names the device the run used: ``cpu``
  (with the CPU's name and measured fp32 matmul rate; recommend converts it to each GPU by FLOP
  rates, the simulator takes it converted with ``JobProfile.on_gpu``), or the GPU's preset. The
  workers are started with spawn, which runs the calling script again in each: guard a
  script's top-level code with ``if __name__ == "__main__":``.
- :class:`ProfileConfig`: how the runs go, built once and handed whole
  (``measure_stalls(model, data, config)``); its fields may come as keywords instead.
- Names, as the command line takes them (:mod:`unstall.profile.names`): ``measure_stalls``
  takes a model's name (a zoo name, a variant ``resnet:depth=34``, ``FILE.py:FUNC``), data's
  (``synthetic``, an image folder, ``FILE.py:FUNC``) and a loss's (``cross_entropy``, ``mse``);
  :func:`resolve_model` and :func:`resolve_data` give the objects.
- Data sources: :class:`SyntheticData` (random batches, the workload's: one seed rule with
  the parameter server; the profiler holds them as :class:`SyntheticBatches`),
  :class:`ImageFileData` (an image
  folder, class folders or the flat layout, read cold, warm and cached through a DataLoader;
  :func:`read_dataset` reads one, :func:`write_image_dataset` writes a flat one),
  :class:`UserData` (your data function: the profiler builds the in-memory and cached variants
  from the first batches it yields).
- The comm-stall model: :func:`measure_sweep_point` and :func:`measure_points` measure a sweep
  of model variants (:data:`DEFAULT_SWEEP`; :func:`sweep_measure` profiles each by name),
  :func:`fit_comm_stall` fits every candidate law and picks the one that predicts left-out
  models best (a :class:`CommStallFit`); :func:`load_points` /
  :func:`save_points` keep a sweep on disk.
- Showing a report: :func:`text_bar`, :func:`write_chrome_trace` (Perfetto) of its
  ``chrome_trace()`` (every rank's timed iterations, the stalls as slices).

The emulated link is a :class:`unstall.net.link.Link`. For example, a small model of your own on
two workers over a 1 Gbit/s link with 0.5 ms per gradient bucket:

>>> import torch
>>> from torch import nn
>>> from unstall.net.link import Link
>>> from unstall.profile import measure_stalls
>>> def model():
...     return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
>>> def data(rank, world_size):
...     generator = torch.Generator().manual_seed(rank)
...     for _ in range(8):
...         yield torch.randn(16, 32, generator=generator), torch.randint(0, 10, (16,))
>>> link = Link(bandwidth_gbps=1.0, latency_us=500.0)
>>> report = measure_stalls(
...     model, data, workers=2, network=link, iterations=2, warmup=1, repeats=1, name="tiny"
... )
>>> sorted(report.runs)
['cached', 'compute', 'local', 'network', 'warm']
>>> profile = report.job_profile
>>> profile.model, profile.device, profile.local_batch, profile.gradient_tensors, profile.layers
('tiny', 'cpu', 16, 4, 2)
>>> report.network_stall_s >= 0 and report.emulated_delay_s > 0
True
"""

from unstall.profile.config import InjectedDelays, ProfileConfig, resolve_device, run_names
from unstall.profile.fit import CANDIDATES, CommStallFit, fit_comm_stall
from unstall.profile.images import ImageSet, list_dataset, read_dataset, write_image_dataset
from unstall.profile.launch import TorchrunLaunch, torchrun_launch
from unstall.profile.measure import measure_stalls
from unstall.profile.names import DEFAULT_BATCH, ResolvedModel, resolve_data, resolve_model
from unstall.profile.report import StallReport
from unstall.profile.select import CV_GROUPS
from unstall.profile.sources import DataSource, ImageFileData, SyntheticBatches, UserData
from unstall.profile.stalls import STALL_FIELDS, StallBreakdown, text_bar
from unstall.profile.sweep import (
    DEFAULT_HELD_OUT,
    DEFAULT_SWEEP,
    STALL_KINDS,
    SweepPoint,
    load_points,
    measure_points,
    measure_sweep_point,
    save_points,
    sweep_measure,
)
from unstall.profile.trace import write_chrome_trace
from unstall.workload.profiles import JobProfile
from unstall.workload.zoo_jobs import SyntheticData

__all__ = [
    "CANDIDATES",
    "CV_GROUPS",
    "DEFAULT_BATCH",
    "DEFAULT_HELD_OUT",
    "DEFAULT_SWEEP",
    "STALL_FIELDS",
    "STALL_KINDS",
    "CommStallFit",
    "DataSource",
    "ImageFileData",
    "ImageSet",
    "InjectedDelays",
    "JobProfile",
    "ProfileConfig",
    "ResolvedModel",
    "StallBreakdown",
    "StallReport",
    "SweepPoint",
    "SyntheticBatches",
    "SyntheticData",
    "TorchrunLaunch",
    "UserData",
    "fit_comm_stall",
    "list_dataset",
    "load_points",
    "measure_points",
    "measure_stalls",
    "measure_sweep_point",
    "read_dataset",
    "resolve_data",
    "resolve_device",
    "resolve_model",
    "run_names",
    "save_points",
    "sweep_measure",
    "text_bar",
    "torchrun_launch",
    "write_chrome_trace",
    "write_image_dataset",
]

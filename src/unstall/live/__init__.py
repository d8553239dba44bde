"""Live scheduling: the simulator's policies place real training jobs on a Ray cluster.

What this part offers:

- ``run_live(trace, policy, *, cluster=, address=, config=, max_jobs=, model_mix=,
  duration_gpu=, user_work=, train=, log_dir=, predict=, keep_final_checkpoints=, log=,
  on_event=, on_status=)`` -> :class:`LiveRun`:
  the same :class:`unstall.sched.Policy` objects as :func:`unstall.sim.simulate`, their
  decisions checked by the same rules, carried out by real processes: one long-lived executor
  per GPU pinned to its node, each job a fresh ``torch.distributed`` group (gloo on CPUs, NCCL
  on GPUs) that checkpoints when it is preempted or migrated and resumes exactly elsewhere.
- :class:`LiveConfig`: speedup (trace seconds per wall second), compute (``real`` training, or
  ``emulated``: the perf model's iteration times with a real all-reduce every step), the slot
  resource of GPU-less nodes, checkpoint period, batch and image sizes of real compute.
- :class:`LiveRun`: the simulator's summary and per-job columns in trace seconds, plus what
  only a live run measures (:class:`LiveFacts`: start-up, restore and checkpoint times, each
  round's decision time, process failures, nodes lost), each segment's set-up with what its
  placement spanned (``setups``, in wall seconds: what ``unstall live calibrate`` fits a
  :class:`unstall.sim.StartupModel` on) and, on request, the simulator's prediction of the
  same run.
- :class:`LiveStatus`: the run as it stands, handed to ``on_status`` a few times a second
  (running jobs with placement and progress, the queue in order, jobs finished, GPUs busy),
  built by :func:`unstall.live.status.live_status` from the scheduling core's state.
- :class:`UserWork`: a user's own model, data and loss for the jobs (the functions, or their
  ``FILE.py:FUNC`` references loaded in the executors); or the user's own
  training loop, ``train(ctx)`` (``run_live(train=...)``), given a :class:`TrainContext`
  (rank, world size, device, group, ``restore``, ``should_stop``, ``save``, ``report``).
- Errors: :class:`LiveClusterError` (the Ray cluster cannot host the run),
  :class:`LiveRunError`, :class:`LiveInterrupted` (a Ctrl-C, with what finished).

Layering: ``live`` sits beside ``ps`` and ``profile``; it imports ``sim``, ``sched``,
``workload``, ``net`` and ``traces``, and nothing below imports it.
"""

# First: Ray's flags (a local Ray on loopback) are set by ray_connect before Ray is imported,
# which the modules below do.
from unstall import ray_connect  # noqa: F401

# isort: split
from unstall.live.backend import LiveInterrupted, LiveRunError
from unstall.live.cluster import LiveClusterError
from unstall.live.config import COMPUTE_MODES, DEFAULT_SLOT_RESOURCE, LiveConfig
from unstall.live.run import LiveFacts, LiveRun, run_live
from unstall.live.status import LiveStatus
from unstall.live.train_loop import TrainContext
from unstall.live.training import UserWork

__all__ = [
    "COMPUTE_MODES",
    "DEFAULT_SLOT_RESOURCE",
    "LiveClusterError",
    "LiveConfig",
    "LiveFacts",
    "LiveInterrupted",
    "LiveRun",
    "LiveRunError",
    "LiveStatus",
    "TrainContext",
    "UserWork",
    "run_live",
]

"""The GPU type a trace's durations are run times on: the reference that does not move.

A duration is the job's run time at its most consolidated placement on one declared GPU type,
never on "whatever the cluster has", so that replacing a cluster's GPUs by slower ones makes the
same jobs slower. The type comes, first match wins, from:

1. ``duration_gpu`` given to the run (``--duration-gpu``): every job's;
2. the trace's own ``gpu_type`` column (Philly's readers set ``p40``): each job its own, jobs
   that name none take 3.;
3. :data:`DEFAULT_DURATION_GPU` (``v100``, the GPU of the ``small`` and ``medium`` presets and
   of the measurements the speed table is fitted on).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from unstall.net.hardware import DEVICE_PRESETS
from unstall.traces.schema import Trace, TraceError

DEFAULT_DURATION_GPU = "v100"


@dataclass(frozen=True)
class DurationGpus:
    """Where a run's durations were measured: ``gpu`` is the run's reference type (the one
    network sensitivity is measured on, and every job's unless ``per_job`` says otherwise);
    ``per_job`` the type of each job of the trace in trace order when they differ, else None;
    ``source`` says where the type came from (for the run header)."""

    gpu: str
    per_job: tuple[str, ...] | None
    source: str

    def describe(self) -> str:
        """One line for a run header: ``durations are run times on v100 (the default ...)``."""
        if self.per_job is None:
            return f"durations are run times on {self.gpu} ({self.source})"
        counts = Counter(self.per_job)
        mix = ", ".join(f"{gpu} {n}" for gpu, n in sorted(counts.items()))
        return f"durations are run times on each job's GPU type ({self.source}: jobs {mix})"


def check_trace_gpu_types(trace: Trace) -> None:
    """Every ``gpu_type`` of the trace names a GPU the simulator knows (the trace part checks
    only the form of the name): the first unknown one is named with its job and row."""
    types = trace.jobs["gpu_type"]
    bad = (types.notna() & ~types.isin(list(DEVICE_PRESETS))).to_numpy(bool)
    if not bad.any():
        return
    first = int(np.flatnonzero(bad)[0])
    raise TraceError(
        trace.source,
        f"row {first + 1} (job {trace.jobs['job_id'].iloc[first]!r}): gpu_type names an unknown "
        f"GPU type {types.iloc[first]!r}; known: {sorted(DEVICE_PRESETS)}",
        field="gpu_type",
    )


def duration_gpus(trace: Trace, duration_gpu: str | None = None) -> DurationGpus:
    """The GPU type(s) ``trace``'s durations are run times on (see the module docstring);
    ``duration_gpu`` (already checked to be a known type) overrides the trace."""
    if duration_gpu is not None:
        return DurationGpus(duration_gpu.lower(), None, "duration_gpu, --duration-gpu")
    check_trace_gpu_types(trace)
    column = trace.jobs["gpu_type"]
    named = column.dropna()
    if named.empty:
        return DurationGpus(
            DEFAULT_DURATION_GPU,
            None,
            "the default; a trace's gpu_type column or --duration-gpu sets another",
        )
    counts = Counter(named.tolist())
    # The most common type is the run's reference; ties by name, so the choice is stable.
    main = min(counts, key=lambda gpu: (-counts[gpu], gpu))
    if len(counts) == 1 and len(named) == len(column):
        return DurationGpus(main, None, "the trace's gpu_type column; --duration-gpu overrides")
    per_job = tuple(column.fillna(DEFAULT_DURATION_GPU).tolist())
    if len(set(per_job)) == 1:
        return DurationGpus(per_job[0], None, "the trace's gpu_type column")
    return DurationGpus(main, per_job, "the trace's gpu_type column")

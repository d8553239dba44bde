"""Job traces: the unstall schema, readers for public formats, a seeded synthetic generator.

What this part offers:

- :class:`Trace`: a validated table of jobs (``job_id, submit_s, num_gpus, duration_s`` plus
  optional ``model, iterations, user, vc, status``); ``trace.summary()`` gives a
  :class:`TraceSummary`, ``trace.arrays()`` the simulator's numpy view.
- ``read_trace(path, fmt="auto", options=None)``: read any format of :data:`READERS` (Philly CSV
  and JSON, Helios, Alibaba PAI, Pollux, unstall's own); bad input raises :class:`TraceError`
  naming the file, line and field. ``detect_format`` says which format a file is.
- ``resolve_trace(trace=None, fmt="auto", options=None)``: a Trace as it is, a file read as
  ``read_trace`` reads it, or the embedded default trace for None (what the front doors that
  take a trace call).
- ``write_trace(trace, path)``: CSV or Parquet in the unstall schema.
- ``generate(SyntheticTraceConfig(...))``: a seeded Philly-like trace; ``default_trace()`` is the
  small one shipped in the package.
- ``assign_models(trace, mix, seed=)``: a seeded model for jobs whose trace names none.

Example:

>>> import tempfile
>>> from pathlib import Path
>>> from unstall.traces import SyntheticTraceConfig, generate, read_trace, write_trace
>>> trace = generate(SyntheticTraceConfig(jobs=50, seed=1))
>>> len(trace), list(trace.jobs.columns[:4])
(50, ['job_id', 'submit_s', 'num_gpus', 'duration_s'])
>>> path = write_trace(trace, Path(tempfile.mkdtemp()) / "jobs.csv")
>>> again = read_trace(path)
>>> again.format, again.equals(trace)
('unstall', True)
>>> default_trace().summary().jobs
400
"""

from unstall.traces.default import (
    LOOKALIKE_FIRST_SEED,
    default_trace,
    default_trace_config,
    lookalike_trace_config,
)
from unstall.traces.models import ZOO_MODELS, assign_models
from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.registry import READERS, detect_format, read_trace
from unstall.traces.resolve import resolve_trace
from unstall.traces.schema import Trace, TraceArrays, TraceError
from unstall.traces.summary import TraceSummary
from unstall.traces.synthetic import SyntheticTraceConfig, generate
from unstall.traces.unstall_format import write_trace

__all__ = [
    "LOOKALIKE_FIRST_SEED",
    "READERS",
    "ZOO_MODELS",
    "ReadOptions",
    "Reader",
    "SyntheticTraceConfig",
    "Trace",
    "TraceArrays",
    "TraceError",
    "TraceSummary",
    "assign_models",
    "default_trace",
    "default_trace_config",
    "detect_format",
    "generate",
    "lookalike_trace_config",
    "read_trace",
    "resolve_trace",
    "write_trace",
]

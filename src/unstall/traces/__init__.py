"""Job traces: the unstall schema, readers for public formats, a seeded synthetic generator.

``read_trace(path, fmt="auto")`` reads any format in :data:`READERS` and returns a validated
:class:`Trace`; bad input raises :class:`TraceError` naming the file, line and field.
``generate(SyntheticTraceConfig(...))`` makes a Philly-like trace; ``default_trace()`` is the small
one shipped in the package; ``assign_models`` gives model-less traces a seeded model mix.
"""

from unstall.traces.default import default_trace, default_trace_config
from unstall.traces.models import ZOO_MODELS, assign_models
from unstall.traces.reading import Reader, ReadOptions
from unstall.traces.registry import READERS, detect_format, read_trace
from unstall.traces.schema import Trace, TraceArrays, TraceError, TraceSummary
from unstall.traces.synthetic import SyntheticTraceConfig, generate
from unstall.traces.unstall_format import write_trace

__all__ = [
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
    "read_trace",
    "write_trace",
]

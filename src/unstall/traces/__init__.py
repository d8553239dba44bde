"""Job traces: the unstall schema, readers for public formats, a seeded synthetic generator."""

from unstall.traces.registry import READERS, detect_format, read_trace

__all__ = ["READERS", "detect_format", "read_trace"]

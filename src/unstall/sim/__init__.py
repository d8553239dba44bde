"""Event-driven simulator of a GPU cluster running a job trace under a scheduling policy."""

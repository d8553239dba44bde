"""Stall profiler: differential runs of a real DDP training loop (compute, fetch, prep,
interconnect and network stalls) and the comm-stall model fitted across model variants."""

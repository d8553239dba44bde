"""PSLD's controller, pure: per-server timings in, a load-distribution decision out."""

"""Parameter server on Ray: chunks, assignment strategies, emulated stragglers, synchronous SGD.

Pure cores: :mod:`chunks` (what a model's parameters are cut into), :mod:`assign` (one strategy a
file: tensors and servers in, chunk -> server map out), :mod:`links` (the emulated link and its
cost model), :mod:`optim` (the SGD-with-momentum step shared by servers and the reference),
:mod:`scenarios` (stragglers as data), :mod:`data` (the global batches). Ray lives at the edges:
:mod:`server`, :mod:`worker`, :mod:`coordinator` and :mod:`train`.
"""

import os

# Keep a local Ray instance on the loopback interface: with Ray's multi-node mode off it
# advertises 127.0.0.1 instead of the machine's first network address. Ray reads this flag when
# it is imported, which the modules of this package do; runs against an existing cluster
# (--address / RAY_ADDRESS) switch the mode back on in ``coordinator.ensure_ray``.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

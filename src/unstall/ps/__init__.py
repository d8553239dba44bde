"""Parameter server on Ray: chunks, assignment strategies, emulated stragglers, synchronous SGD.

Pure cores: :mod:`chunks` (what a model's parameters are cut into), :mod:`assign` (one strategy a
file: tensors and servers in, chunk -> server map out), :mod:`links` (the emulated link and its
cost model), :mod:`optim` (the SGD-with-momentum step shared by servers and the reference),
:mod:`scenarios` (stragglers as data), :mod:`data` (the global batches). Ray lives at the edges:
:mod:`server`, :mod:`worker`, :mod:`coordinator` and :mod:`train`.
"""

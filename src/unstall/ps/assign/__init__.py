"""Placements, one a file: the model's tensors and the number of servers in, an
:class:`~unstall.ps.chunks.Assignment` out (see :class:`~unstall.ps.assign.base.Placement`).

``mxnet``, ``byteps``, ``tf-greedy``, ``round-robin`` (the frameworks' defaults), ``oracle``
(the best static split knowing every server's cost) and ``psld`` (PSLD's fine, even start).
The strategies that a run takes (:mod:`unstall.ps.strategies`) wrap these.
"""

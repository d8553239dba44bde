"""Links and bandwidth sharing: the cluster topology and the max-min fair-share model.

``topology`` describes racks of nodes of GPUs and the three kinds of link a data-parallel job's
traffic crosses (intra-node GPU links, node NICs, rack uplinks), each with a hashable id;
``sharing`` divides link capacities among the flows that cross them, max-min fair.
"""

"""Links and bandwidth sharing: one link type, the cluster topology, the max-min fair-share model.

What this part offers:

- :class:`Link`: the one link type of unstall (bandwidth in Gbit/s per direction, latency in µs,
  achieved efficiency), used by the simulator's topology, the profiler's emulated network and the
  parameter server's emulated server links.
- :class:`TopologyConfig`: racks of nodes of GPUs (regular, or node groups of their own size
  and GPU type: :class:`NodeGroup`) and the three kinds of link a data-parallel job's traffic
  crosses (intra-node GPU links, node NICs, rack uplinks), each with a hashable id
  (``intra_link(node)``, ``nic_link(node)``, ``uplink_link(rack)``).
- Presets ``small()``, ``medium()``, ``philly()``, by name in :data:`TOPOLOGY_PRESETS` through
  ``topology_preset(name)``; ``load_topology(path)`` takes a preset's name or reads a TOML or JSON
  file (a preset to start from, then overrides), ``topology_from_mapping`` the same from a dict;
  ``resolve_cluster(cluster)`` passes a topology through and loads a name or path (what the
  front doors that take a cluster call).
- ``max_min_fair(capacities, flows, caps=, background=)``: the max-min fair rate of every flow
  over shared links; ``link_usage`` what each link then carries.
- Hardware presets: GPUs (``device(name)``, :data:`DEVICE_PRESETS`), intra-node interconnects and
  NICs (:class:`LinkPreset`); ``preset_for_gpu`` (a
  CUDA device name to its preset) and ``cpu_to_gpu_factor`` (a CPU's measured rate to a GPU's,
  for profiles measured on a CPU, labelled :data:`CPU_DEVICE`).
- GPU speeds per model family from measurements (:mod:`unstall.net.device_speeds`):
  ``relative_speed(gpu, family, precision, step)`` against a V100 in fp32 (fitted on Gavel's
  K80 / P100 / V100 throughputs, public figures for T4 / A10G / A100 / H100; a model of no
  fitted family with a known ``step``, :class:`StepFeatures`, takes the roofline fitted on the
  same measurements, :mod:`unstall.net.device_roofline`), ``model_family(model)`` and
  ``compute_time_scale(from, to, precision, family, step)`` between GPUs.

Example:

>>> from unstall.net import Link, max_min_fair, nic_link, topology_from_mapping, topology_preset
>>> cluster = topology_preset("small")
>>> cluster.n_gpus, cluster.racks, cluster.nic.describe()
(32, 2, '25 Gbit/s, 25 µs')
>>> Link(bandwidth_gbps=8.0, latency_us=50.0).time_s(1e9)  # 1 GB over 8 Gbit/s, plus 50 µs
1.00005
>>> bigger = topology_from_mapping({"preset": "small", "nic": "100g"}, source="example")
>>> bigger.nic.bandwidth_gbps, bigger.capacity(nic_link(0)) > cluster.capacity(nic_link(0))
(100.0, True)
>>> mixed = topology_from_mapping(
...     {"nodes": [{"count": 2, "gpus_per_node": 8, "device": "v100"},
...                {"count": 4, "gpus_per_node": 4, "device": "k80"}]},
...     source="example",
... )
>>> mixed.n_gpus, mixed.n_racks, mixed.node_device[0], mixed.compute_device([0, 2])
(32, 2, 'v100', 'k80')
>>> max_min_fair({"nic": 10.0, "uplink": 4.0}, {"a": ["nic"], "b": ["nic", "uplink"]})
{'b': 4.0, 'a': 6.0}
"""

from unstall.net.device_roofline import StepFeatures
from unstall.net.device_speeds import (
    MODEL_FAMILIES,
    PUBLIC_FIGURES,
    compute_time_scale,
    model_family,
    relative_speed,
    speed_table,
)
from unstall.net.hardware import (
    CPU_DEVICE,
    DEVICE_PRESETS,
    INTERCONNECT_PRESETS,
    NIC_PRESETS,
    DevicePreset,
    LinkPreset,
    cpu_to_gpu_factor,
    device,
    interconnect,
    nic,
    preset_for_gpu,
)
from unstall.net.link import Link
from unstall.net.sharing import link_usage, max_min_fair
from unstall.net.topology import (
    CALIBRATED_NETWORK_EFFICIENCY,
    INTRA,
    NIC,
    TOPOLOGY_PRESETS,
    UPLINK,
    LinkId,
    NodeGroup,
    TopologyConfig,
    intra_link,
    medium,
    nic_link,
    philly,
    small,
    topology_preset,
    uplink_link,
)
from unstall.net.topology_files import load_topology, resolve_cluster, topology_from_mapping

__all__ = [
    "CALIBRATED_NETWORK_EFFICIENCY",
    "CPU_DEVICE",
    "DEVICE_PRESETS",
    "INTERCONNECT_PRESETS",
    "INTRA",
    "MODEL_FAMILIES",
    "NIC",
    "NIC_PRESETS",
    "PUBLIC_FIGURES",
    "TOPOLOGY_PRESETS",
    "UPLINK",
    "DevicePreset",
    "Link",
    "LinkId",
    "LinkPreset",
    "NodeGroup",
    "StepFeatures",
    "TopologyConfig",
    "compute_time_scale",
    "cpu_to_gpu_factor",
    "device",
    "interconnect",
    "intra_link",
    "link_usage",
    "load_topology",
    "max_min_fair",
    "medium",
    "model_family",
    "nic",
    "nic_link",
    "philly",
    "preset_for_gpu",
    "relative_speed",
    "resolve_cluster",
    "small",
    "speed_table",
    "topology_from_mapping",
    "topology_preset",
    "uplink_link",
]

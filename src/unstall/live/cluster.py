"""The live cluster as Ray has it: nodes, their GPUs, GPU types and racks, mapped onto the
topology that the policies and the perf model see.

- GPUs: a node's ``GPU`` resource, else its slot resource (``unstall_gpu`` by default: what a
  node without GPUs declares to host emulated ones, ``ray start --resources
  '{"unstall_gpu": 4}'``).
- GPU type: the topology file's, else Ray's accelerator label (``accelerator_type:V100``).
- Racks: the topology file's, else the node label ``unstall.rack`` (``ray start --labels
  unstall.rack=1``), else one rack.
- Order: nodes with an ``unstall.node`` label in its order, then the rest by address and id; a
  topology file's node ``i`` is the ``i``-th of them.

Without an address, :func:`start_local_cluster` starts a Ray of the topology's nodes on this
machine's loopback interface (one Ray node per cluster node, with its GPU slots and labels),
through Ray's own multi-node launcher (``ray.cluster_utils.Cluster``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unstall.errors import UnstallError
from unstall.net.hardware import DEVICE_PRESETS
from unstall.net.topology import CALIBRATED_NETWORK_EFFICIENCY, NodeGroup, TopologyConfig

NODE_LABEL = "unstall.node"
RACK_LABEL = "unstall.rack"
ACCELERATOR_PREFIX = "accelerator_type:"
# The GPU type of nodes whose Ray names none (CPU nodes with slots): the simulator's default.
DEFAULT_GPU_TYPE = "v100"


class LiveClusterError(UnstallError):
    """The Ray cluster cannot host the run (no GPUs, fewer nodes than the topology file)."""


@dataclass(frozen=True)
class LiveNode:
    """One node of the run: its index in the topology, the Ray node it is, its GPUs."""

    index: int
    ray_node_id: str
    address: str
    gpus: int
    gpu_type: str
    rack: int
    uses_gpus: bool  # a real ``GPU`` resource, not emulated slots


@dataclass(frozen=True)
class LiveCluster:
    """The run's cluster: the topology the policies see and the Ray nodes behind it."""

    topology: TopologyConfig
    nodes: tuple[LiveNode, ...]
    slot_resource: str
    loopback: bool

    def mapping(self) -> list[str]:
        """One line per node: topology node, rack, GPUs and type -> Ray node and address."""
        return [
            f"node {n.index} (rack {n.rack}, {n.gpus} x {n.gpu_type}"
            f"{'' if n.uses_gpus else ' emulated'}) -> Ray node {n.ray_node_id[:12]} at "
            f"{n.address}"
            for n in self.nodes
        ]


def _label(node: dict[str, Any], key: str) -> str | None:
    value = (node.get("Labels") or {}).get(key)
    return str(value) if value is not None else None


def _gpus(node: dict[str, Any], slot_resource: str) -> tuple[int, bool]:
    resources = node.get("Resources") or {}
    real = int(resources.get("GPU", 0))
    if real > 0:
        return real, True
    return int(resources.get(slot_resource, 0)), False


def _gpu_type(node: dict[str, Any]) -> str:
    for key in node.get("Resources") or {}:
        if key.startswith(ACCELERATOR_PREFIX):
            name = key[len(ACCELERATOR_PREFIX) :].lower()
            for known in DEVICE_PRESETS:
                if known in name:
                    return known
    return DEFAULT_GPU_TYPE


def _order(node: dict[str, Any]) -> tuple[int, str, str]:
    label = _label(node, NODE_LABEL)
    index = int(label) if label is not None and label.isdigit() else 1 << 30
    return (index, str(node.get("NodeManagerAddress", "")), str(node.get("NodeID", "")))


def discover(
    ray_nodes: list[dict[str, Any]],
    *,
    topology: TopologyConfig | None,
    slot_resource: str,
    loopback: bool,
) -> LiveCluster:
    """The run's cluster from Ray's node list (``ray.nodes()``) and, where given, a topology
    whose nodes are mapped onto them in order."""
    hosts = sorted(
        (n for n in ray_nodes if n.get("Alive") and _gpus(n, slot_resource)[0] > 0), key=_order
    )
    if not hosts:
        raise LiveClusterError(
            f"the Ray cluster has no node with GPUs: none has a 'GPU' resource or the slot "
            f"resource {slot_resource!r} (start CPU nodes with ray start --resources "
            f"'{{\"{slot_resource}\": 4}}')"
        )
    if topology is not None:
        return _mapped(hosts, topology, slot_resource, loopback)
    nodes = []
    for i, host in enumerate(hosts):
        gpus, real = _gpus(host, slot_resource)
        rack = _label(host, RACK_LABEL)
        nodes.append(
            LiveNode(
                index=i,
                ray_node_id=str(host["NodeID"]),
                address=str(host.get("NodeManagerAddress", "")),
                gpus=gpus,
                gpu_type=_gpu_type(host),
                rack=int(rack) if rack is not None and rack.isdigit() else 0,
                uses_gpus=real,
            )
        )
    racks = sorted({n.rack for n in nodes})
    rack_index = {rack: i for i, rack in enumerate(racks)}
    nodes = [
        LiveNode(**{**n.__dict__, "rack": rack_index[n.rack]})  # racks numbered from 0
        for n in nodes
    ]
    topo = TopologyConfig(
        name="ray",
        nodes=tuple(
            NodeGroup(count=1, gpus_per_node=n.gpus, device=n.gpu_type, rack=n.rack) for n in nodes
        ),
        network_efficiency=CALIBRATED_NETWORK_EFFICIENCY,
    )
    return LiveCluster(
        topology=topo, nodes=tuple(nodes), slot_resource=slot_resource, loopback=loopback
    )


def _mapped(
    hosts: list[dict[str, Any]], topology: TopologyConfig, slot_resource: str, loopback: bool
) -> LiveCluster:
    wanted = topology.n_nodes
    if len(hosts) < wanted:
        raise LiveClusterError(
            f"cluster {topology.name!r} has {wanted} nodes, the Ray cluster {len(hosts)} with "
            f"GPUs (a 'GPU' or {slot_resource!r} resource): start more nodes, or give a "
            "smaller cluster file"
        )
    nodes = []
    for i in range(wanted):
        host = hosts[i]
        gpus, real = _gpus(host, slot_resource)
        need = topology.node_gpus[i]
        if gpus < need:
            raise LiveClusterError(
                f"cluster {topology.name!r} node {i} has {need} GPUs, its Ray node "
                f"{str(host['NodeID'])[:12]} at {host.get('NodeManagerAddress')} only {gpus}"
            )
        nodes.append(
            LiveNode(
                index=i,
                ray_node_id=str(host["NodeID"]),
                address=str(host.get("NodeManagerAddress", "")),
                gpus=need,
                gpu_type=topology.node_device[i],
                rack=topology.node_rack[i],
                uses_gpus=real,
            )
        )
    return LiveCluster(
        topology=topology, nodes=tuple(nodes), slot_resource=slot_resource, loopback=loopback
    )


# A local cluster's folder (RAY_TMPDIR of all its processes) and the file naming its owner.
LOCAL_PREFIX = "us-live-"
OWNER_FILE = "owner.pid"


def reap_orphans(root: str = "/tmp") -> list[int]:
    """End what a local cluster whose owner died (``kill -9`` of ``unstall serve`` or ``live
    run``) left running: Ray's processes and the executors, found by the cluster's folder in
    their environment; the folder goes too. Returns the processes signalled."""
    ended: list[int] = []
    for folder in Path(root).glob(f"{LOCAL_PREFIX}*"):
        owner_file = folder / OWNER_FILE
        try:
            owner = int(owner_file.read_text())
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        marker = f"RAY_TMPDIR={folder}".encode()
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                environ = (proc / "environ").read_bytes()
            except OSError:
                continue
            if marker + b"\0" in environ or environ.endswith(marker):
                with contextlib.suppress(OSError):
                    os.kill(int(proc.name), signal.SIGKILL)
                    ended.append(int(proc.name))
        shutil.rmtree(folder, ignore_errors=True)
    return ended


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (ended, not yet waited for) is no owner.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class LocalRayCluster:
    """A Ray cluster on this machine's loopback interface: a head node for the driver and the
    checkpoint store, and one node per topology node with its GPU slots and its labels."""

    def __init__(self, topology: TopologyConfig, slot_resource: str) -> None:
        # Nodes of a local cluster bind loopback only with Ray's multi-node mode off: in the
        # environment (for the nodes' processes) and in Ray's constants (for this process,
        # which read the flag when it imported Ray).
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        from unstall.ray_connect import sigterm_kept

        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = False
        # Ray's multi-node launcher writes the cluster's address into its temporary folder,
        # where any ``ray.init()`` on this machine would find and join it: a folder of its own
        # keeps the run's cluster to the run. (Short: Ray's socket paths must stay short.)
        reap_orphans()
        self._tmp = tempfile.mkdtemp(prefix=LOCAL_PREFIX, dir="/tmp")
        # Who owns the cluster: a later run ends what a killed owner left behind.
        Path(self._tmp, OWNER_FILE).write_text(str(os.getpid()))
        self._tmp_before = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = self._tmp

        # Its nodes start from this process, and Ray then takes SIGTERM for itself (at each
        # node): its handler drains a node for 30 s and exits. Ours (the command's: stop
        # cleanly, as Ctrl-C does, and end this cluster) is put back once they are up.
        with sigterm_kept():
            self._start(topology, slot_resource, Cluster)
        self.address: str = self._cluster.address

    def _start(self, topology: TopologyConfig, slot_resource: str, cluster: Any) -> None:
        """The head node and a node per topology node; all ended again if one fails."""
        self._cluster = cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "include_dashboard": False},
        )
        try:
            for i in range(topology.n_nodes):
                self._cluster.add_node(
                    num_cpus=0,
                    resources={slot_resource: topology.node_gpus[i]},
                    labels={NODE_LABEL: str(i), RACK_LABEL: str(topology.node_rack[i])},
                )
            self._cluster.wait_for_nodes()
        except BaseException:
            self.shutdown()
            raise

    def remove_node(self, ray_node_id: str) -> None:
        """Take a node away (as a machine that fails would): its processes end."""
        for node in self._cluster.worker_nodes:
            if node.node_id == ray_node_id:
                self._cluster.remove_node(node, allow_graceful=False)
                return
        raise KeyError(ray_node_id)

    def shutdown(self) -> None:
        try:
            # Its worker nodes end at once: by now the driver has stopped its actors (what a job
            # needs kept is in the store's files), and a graceful stop only waits.
            for node in list(self._cluster.worker_nodes):
                self._cluster.remove_node(node, allow_graceful=False)
            self._cluster.shutdown()
        finally:
            if self._tmp_before is None:
                os.environ.pop("RAY_TMPDIR", None)
            else:
                os.environ["RAY_TMPDIR"] = self._tmp_before
            shutil.rmtree(self._tmp, ignore_errors=True)

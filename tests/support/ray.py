"""A real local Ray cluster for tests: a head and worker nodes, each its own raylet process.

Started with ``ray.cluster_utils.Cluster`` from the test process (which does not join it as a
driver); FICC joins it with ``ficc serve --ray ADDRESS``. Every node is on this machine and
binds loopback, as the loopback-only network namespace of the tests requires. A "remote" node
binds another loopback address (127.0.0.2: in the namespace all of 127.0.0.0/8 reaches lo), so
FICC sees it at an address not its own, and has a blob store of its own (``FICC_NODE_STORE``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ray.cluster_utils import Cluster

WORKER_LABEL = "ficc-test-role"
NODE_STORE_VARIABLE = "FICC_NODE_STORE"


@dataclass(frozen=True)
class RemoteNode:
    """A worker node at ``address`` whose blob store is ``store``."""

    address: str
    store: Path


@dataclass
class RayCluster:
    """The running cluster, its address, and the worker nodes by their label."""

    cluster: Cluster
    address: str
    workers: dict[str, Any]

    def ray_node_id(self, role: str) -> str:
        return str(self.workers[role].node_id)

    def remove(self, role: str) -> None:
        """Take a worker node away, as a machine that leaves does (its processes end)."""
        self.cluster.remove_node(self.workers.pop(role))


@contextlib.contextmanager
def ray_cluster(
    *roles: str, remote: Mapping[str, RemoteNode] | None = None
) -> Iterator[RayCluster]:
    """A one-CPU head node and one one-CPU worker node per role (and per ``remote`` role, at its
    address with its own blob store); shut down when done."""
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        workers = {
            role: cluster.add_node(num_cpus=1, labels={WORKER_LABEL: role}) for role in roles
        }
        for role, node in (remote or {}).items():
            workers[role] = cluster.add_node(
                num_cpus=1,
                labels={WORKER_LABEL: role},
                node_ip_address=node.address,
                env_vars={NODE_STORE_VARIABLE: str(node.store)},
            )
        cluster.wait_for_nodes()
        yield RayCluster(cluster, str(cluster.address), workers)
    finally:
        cluster.shutdown()


def parent_of(pid: int) -> int:
    """The parent pid of a running process."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def command_line(pid: int) -> str:
    """A process's command line (or the title it set itself), spaces between arguments."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()

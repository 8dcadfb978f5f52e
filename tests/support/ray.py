"""A real local Ray cluster for tests: a head and worker nodes, each its own raylet process.

Started with ``ray.cluster_utils.Cluster`` from the test process (which does not join it as a
driver); FICC joins it with ``ficc serve --ray ADDRESS``. Every node is on this machine and
binds loopback, as the loopback-only network namespace of the tests requires.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ray.cluster_utils import Cluster

WORKER_LABEL = "ficc-test-role"


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
def ray_cluster(*roles: str) -> Iterator[RayCluster]:
    """A one-CPU head node and one one-CPU worker node per role; shut down when done."""
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        workers = {
            role: cluster.add_node(num_cpus=1, labels={WORKER_LABEL: role}) for role in roles
        }
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

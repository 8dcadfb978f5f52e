"""The composition root: settings in, a wired cluster out. Only entrypoints import it.

``settings`` reads the configuration, ``cluster`` wires the parts (:func:`build`), ``ray``
places them on a Ray cluster when asked, and ``lifecycle`` opens the storage, starts and
closes a cluster.
"""

from ficc.bootstrap.cluster import LABEL_SETTING, Cluster, Federation, build
from ficc.bootstrap.lifecycle import (
    NODE_REFRESH_SECONDS,
    InitResult,
    database_schema,
    initialise,
    new_node_id,
    open_cluster,
)
from ficc.bootstrap.ray import RayPlacement
from ficc.bootstrap.settings import (
    CONNECT_SECONDS_VARIABLE,
    RANGE_BYTES_VARIABLE,
    STALL_SECONDS_VARIABLE,
    Settings,
    TransferTuning,
    connect_seconds_from_environment,
    system_clock,
)

__all__ = [
    "CONNECT_SECONDS_VARIABLE",
    "LABEL_SETTING",
    "NODE_REFRESH_SECONDS",
    "RANGE_BYTES_VARIABLE",
    "STALL_SECONDS_VARIABLE",
    "Cluster",
    "Federation",
    "InitResult",
    "RayPlacement",
    "Settings",
    "TransferTuning",
    "build",
    "connect_seconds_from_environment",
    "database_schema",
    "initialise",
    "new_node_id",
    "open_cluster",
    "system_clock",
]

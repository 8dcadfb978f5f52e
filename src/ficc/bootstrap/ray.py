"""FICC on a Ray cluster: Ray's nodes as the cluster's, and runtimes that place replicas."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.runtimes.attempt_fence import fence_attempt
from ficc.domain.inference import RuntimeName
from ficc.services.nodes import Nodes
from ficc.services.ports.runtimes import Runtime

if TYPE_CHECKING:
    from ficc.adapters.ray_nodes import RayNodes
    from ficc.adapters.runtimes.ray import RayRuntime


@dataclass
class RayPlacement:
    """FICC on a Ray cluster: its node source and the runtimes that place replicas on nodes.

    Ray is imported only here, and only with ``--ray``: the default serve never loads it.
    """

    nodes: RayNodes
    runtimes: list[RayRuntime]
    refresh_seconds: float

    @classmethod
    def wrap(
        cls,
        address: str,
        cluster_key_text: str,
        runtimes: dict[RuntimeName, Runtime],
        engines: EngineClients,
        store: Path,
    ) -> RayPlacement:
        """Replace the engine runtimes in ``runtimes`` with their Ray-placed forms."""
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        from ficc.adapters.ray_nodes import RAY_NODE_REFRESH_SECONDS, RayNodes, namespace_of
        from ficc.adapters.runtimes.ray import RayRuntime
        from ficc.adapters.runtimes.supervised import SupervisedRuntime

        ray_nodes = RayNodes(address, namespace_of(cluster_key_text))
        placed: list[RayRuntime] = []
        for name, runtime in list(runtimes.items()):
            if isinstance(runtime, SupervisedRuntime):
                log_dir = runtime.log_path("x").parent
                wrapped = RayRuntime(
                    runtime, ray_nodes, log_dir=log_dir, store=store, engines=engines
                )
                runtimes[name] = wrapped
                placed.append(wrapped)
        return cls(ray_nodes, placed, RAY_NODE_REFRESH_SECONDS)

    async def record_nodes(self, nodes: Nodes) -> None:
        """Ask Ray for its nodes and record them in ``nodes``; the ones that left become
        unavailable."""
        observed = await asyncio.to_thread(self.nodes.observe)
        await nodes.record_observed_nodes(self.nodes.as_nodes(observed, nodes.clock()))

    async def fence_attempt(self, attempt_id: str, grace_seconds: float) -> int:
        """End an unrecorded attempt's actor, and any engine of it on this machine."""
        ended = 0
        for runtime in self.runtimes:
            ended += await runtime.fence_attempt(attempt_id, grace_seconds)
        return ended + await fence_attempt(attempt_id, grace_seconds)

"""The ``vllm`` runtime: ``vllm serve`` on a node with a GPU.

Refused up front (Conflict naming every reason) where the node has no GPU or vLLM is not
installed, rather than failing minutes into a launch.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.runtimes.sandbox import EngineSandbox
from ficc.adapters.runtimes.supervised import SupervisedRuntime, local_node_reasons
from ficc.domain.inference import RuntimeName
from ficc.services.ports.runtimes import Availability, LaunchRequest, NodeInfo

_FLAGS = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "dtype": "--dtype",
}


def default_vllm_command() -> tuple[str, ...]:
    """The ``vllm`` next to FICC's interpreter, else the one on PATH."""
    beside = Path(sys.executable).parent / "vllm"
    return (str(beside),) if beside.exists() else ("vllm",)


class VllmRuntime(SupervisedRuntime):
    """Runs models with vLLM's OpenAI-compatible server on this node's GPUs."""

    def __init__(
        self,
        *,
        log_dir: Path,
        vllm_command: Sequence[str] | None = None,
        engines: EngineClients | None = None,
        sandbox: EngineSandbox | None = None,
    ) -> None:
        super().__init__(log_dir=log_dir, engines=engines, sandbox=sandbox)
        self._vllm = tuple(vllm_command or default_vllm_command())

    @property
    def name(self) -> RuntimeName:
        """``vllm``."""
        return RuntimeName.VLLM

    async def availability(self, node: NodeInfo) -> Availability:
        """The local node, with a GPU, and the ``vllm`` command installed."""
        reasons = local_node_reasons(node)
        if node.gpu_count <= 0:
            reasons.append(f"node {node.node_id} has no GPU; vllm runs on GPU nodes only")
        if shutil.which(self._vllm[0]) is None:
            # No path in the reason: peers read it through inference.prepare.
            reasons.append("vllm is not installed on this node")
        return Availability(tuple(reasons))

    def api_key_environment(self, api_key: str) -> dict[str, str]:
        """``vllm serve`` takes ``VLLM_API_KEY`` in place of ``--api-key``."""
        return {"VLLM_API_KEY": api_key}

    def command(self, request: LaunchRequest, port: int, listen_fd: int | None = None) -> list[str]:
        """``vllm serve MODEL`` answering to the service's name on 127.0.0.1:``port`` (vLLM
        binds the port itself: it takes no socket, so ``listen_fd`` is never given, and it
        shares FICC's network; the sandbox hides FICC's files and processes from it)."""
        assert request.model_path is not None
        arguments = [
            *self._vllm,
            "serve",
            str(request.model_path),
            "--served-model-name",
            request.model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        for option, flag in _FLAGS.items():
            if option in request.options:
                arguments += [flag, str(request.options[option])]
        if request.options.get("enforce_eager"):
            arguments.append("--enforce-eager")
        return arguments

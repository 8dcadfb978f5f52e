"""The inference engines FICC runs services on, one adapter per runtime name."""

from __future__ import annotations

from pathlib import Path

from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.runtimes.llama_cpp import LlamaCppRuntime
from ficc.adapters.runtimes.openai import OpenAIRuntime
from ficc.adapters.runtimes.sandbox import EngineSandbox
from ficc.adapters.runtimes.vllm import VllmRuntime
from ficc.domain.inference import RuntimeName, UpstreamAllowList
from ficc.services.ports.runtimes import Runtime

__all__ = ["LlamaCppRuntime", "OpenAIRuntime", "VllmRuntime", "build_runtimes"]


def build_runtimes(
    *,
    log_dir: Path,
    engines: EngineClients | None = None,
    upstream_allow: UpstreamAllowList | None = None,
    sandbox: EngineSandbox | None = None,
) -> dict[RuntimeName, Runtime]:
    """Every runtime, its engines' logs under ``log_dir`` (one folder per service).

    ``engines``: the connector that learns each launched engine's API key; ``upstream_allow``:
    the upstream URLs ``openai`` services may reach; ``sandbox``: how engines are confined
    (what they must not see: FICC's state directory).
    """
    return {
        RuntimeName.LLAMA_CPP: LlamaCppRuntime(log_dir=log_dir, engines=engines, sandbox=sandbox),
        RuntimeName.OPENAI: OpenAIRuntime(upstream_allow=upstream_allow, engines=engines),
        RuntimeName.VLLM: VllmRuntime(log_dir=log_dir, engines=engines, sandbox=sandbox),
    }

"""The inference engines FICC runs services on, one adapter per runtime name."""

from __future__ import annotations

from pathlib import Path

from ficc.adapters.runtimes.llama_cpp import LlamaCppRuntime
from ficc.adapters.runtimes.openai import OpenAIRuntime
from ficc.adapters.runtimes.vllm import VllmRuntime
from ficc.domain.inference import RuntimeName
from ficc.services.runtimes import Runtime

__all__ = ["LlamaCppRuntime", "OpenAIRuntime", "VllmRuntime", "build_runtimes"]


def build_runtimes(*, log_dir: Path) -> dict[RuntimeName, Runtime]:
    """Every runtime, its engines' logs under ``log_dir`` (one file per replica attempt)."""
    return {
        RuntimeName.LLAMA_CPP: LlamaCppRuntime(log_dir=log_dir),
        RuntimeName.OPENAI: OpenAIRuntime(),
        RuntimeName.VLLM: VllmRuntime(log_dir=log_dir),
    }

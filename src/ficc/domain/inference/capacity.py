"""Admission rules: what a service needs of its node, what is committed, whether it fits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ficc.base.errors import InvalidInput
from ficc.domain.inference.runtimes import RuntimeName
from ficc.domain.inference.spec import ServiceSpec

ENGINE_OVERHEAD_BYTES: Final = 256 * 1024 * 1024
"""Memory an engine needs beyond its model file (measured: ~235 MB RSS for SmolLM2)."""

MAX_GRANT_RUNNING_SERVICES: Final = 4
"""Services a grant's peer created that may run (or start, or drain) at once."""
MAX_GRANT_RUNNING_REPLICAS: Final = 8
"""Replicas of those services at once: 8 engines of at least 256 MiB each is about 2 GiB plus
the models, a share a peer can be lent without owning the node."""

TRAINED_CONTEXT_KEY: Final = "context_length"
"""The manifest metadata key that states a model's trained context, in tokens, where known."""


@dataclass(frozen=True)
class Requirements:
    """What a service takes from its node while it runs."""

    memory_bytes: int = 0
    cpu_slots: int = 0
    gpus: int = 0

    def __add__(self, other: Requirements) -> Requirements:
        return Requirements(
            self.memory_bytes + other.memory_bytes,
            self.cpu_slots + other.cpu_slots,
            self.gpus + other.gpus,
        )

    def to_json(self) -> dict[str, int]:
        return {"memory_bytes": self.memory_bytes, "cpu_slots": self.cpu_slots, "gpus": self.gpus}


def requirements(spec: ServiceSpec, model_bytes: int) -> Requirements:
    """Memory (model and engine per replica), CPU threads and GPUs of ``spec``."""
    threads = int(spec.options.get("n_threads", 1)) if spec.runtime is RuntimeName.LLAMA_CPP else 0
    per_replica_memory = (
        model_bytes + ENGINE_OVERHEAD_BYTES if spec.runtime is not RuntimeName.OPENAI else 0
    )
    return Requirements(
        memory_bytes=per_replica_memory * spec.replicas,
        cpu_slots=threads * spec.replicas,
        gpus=1 if spec.runtime is RuntimeName.VLLM else 0,
    )


@dataclass(frozen=True)
class Shortfall:
    """One resource a service needs more of than its node has free."""

    resource: str
    needed: int
    available: int
    reason: str


@dataclass(frozen=True)
class Capacity:
    """What a node has: its CPUs, its total and currently available memory, its GPUs."""

    cpu_count: int
    memory_bytes: int
    memory_available_bytes: int
    gpu_count: int


def fit(
    need: Requirements, committed: Requirements, capacity: Capacity
) -> tuple[list[Shortfall], list[str]]:
    """Whether ``need`` fits beside what running services committed: refusals and warnings.

    Free memory is the smaller of what the node reports available and its total less the
    committed memory of running services: the first sees other processes, the second sees
    engines that are starting and have not taken their memory yet.
    """
    shortfalls: list[Shortfall] = []
    warnings: list[str] = []
    free_memory = max(
        min(capacity.memory_available_bytes, capacity.memory_bytes - committed.memory_bytes), 0
    )
    if need.memory_bytes > free_memory:
        shortfalls.append(
            Shortfall(
                "memory_bytes",
                need.memory_bytes,
                free_memory,
                f"needs {need.memory_bytes} bytes of memory; {free_memory} are free",
            )
        )
    free_cpus = max(capacity.cpu_count - committed.cpu_slots, 0)
    if need.cpu_slots > capacity.cpu_count:
        shortfalls.append(
            Shortfall(
                "cpu_slots",
                need.cpu_slots,
                capacity.cpu_count,
                f"needs {need.cpu_slots} CPU slots; the node has {capacity.cpu_count}",
            )
        )
    elif need.cpu_slots > free_cpus:
        warnings.append(f"needs {need.cpu_slots} CPU slots; {free_cpus} are not yet taken")
    if need.gpus > capacity.gpu_count:
        shortfalls.append(
            Shortfall(
                "gpus",
                need.gpus,
                capacity.gpu_count,
                f"needs {need.gpus} GPU(s); the node has {capacity.gpu_count}",
            )
        )
    return shortfalls, warnings


def grant_running_shortfall(running: list[ServiceSpec], spec: ServiceSpec) -> Shortfall | None:
    """The per-grant cap ``spec`` would pass, beside the grant's ``running`` services."""
    services = len(running) + 1
    if services > MAX_GRANT_RUNNING_SERVICES:
        return Shortfall(
            "running_services",
            services,
            MAX_GRANT_RUNNING_SERVICES,
            f"a grant's services may run at most {MAX_GRANT_RUNNING_SERVICES} at once",
        )
    replicas = sum(other.replicas for other in running) + spec.replicas
    if replicas > MAX_GRANT_RUNNING_REPLICAS:
        return Shortfall(
            "running_replicas",
            replicas,
            MAX_GRANT_RUNNING_REPLICAS,
            f"a grant's services may run at most {MAX_GRANT_RUNNING_REPLICAS} replicas at once",
        )
    return None


def trained_context(metadata: Mapping[str, Any]) -> int | None:
    """The model's trained context in tokens, when its manifest states it."""
    value = metadata.get(TRAINED_CONTEXT_KEY)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def check_context(spec: ServiceSpec, metadata: Mapping[str, Any]) -> None:
    """``options.n_ctx`` may not pass the model's trained context, where it is known."""
    trained = trained_context(metadata)
    n_ctx = spec.options.get("n_ctx")
    if trained is not None and isinstance(n_ctx, int) and n_ctx > trained:
        raise InvalidInput(
            f"options.n_ctx is {n_ctx}; the model was trained with a context of {trained}",
            field="options.n_ctx",
            details={"maximum": trained},
        )

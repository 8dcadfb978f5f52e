"""Nodes: the machines a cluster schedules inference on, and their capacity."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int
    memory_used_bytes: int


@dataclass(frozen=True)
class Node:
    id: str
    name: str
    cpu_count: int
    memory_bytes: int
    memory_available_bytes: int
    gpus: tuple[Gpu, ...]
    is_local: bool
    updated_at: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "local": self.is_local,
            "capacity": {
                "cpu_count": self.cpu_count,
                "memory_bytes": self.memory_bytes,
                "gpus": [
                    {"index": gpu.index, "name": gpu.name, "memory_bytes": gpu.memory_bytes}
                    for gpu in self.gpus
                ],
            },
            "availability": {
                "memory_available_bytes": self.memory_available_bytes,
                "gpus": [
                    {
                        "index": gpu.index,
                        "memory_available_bytes": max(gpu.memory_bytes - gpu.memory_used_bytes, 0),
                    }
                    for gpu in self.gpus
                ],
            },
            "updated_at": self.updated_at,
        }

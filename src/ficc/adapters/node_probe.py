"""Probe this machine's capacity, so the local node can be registered and scheduled on.

CPUs are those this process may run on (its affinity, which containers and taskset narrow),
memory comes from /proc/meminfo, and GPUs from ``nvidia-smi`` where it is installed. A machine
without NVIDIA GPUs, or whose driver does not answer, has no GPUs: that is a fact to report,
not an error that should stop the cluster from starting.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ficc.base.units import KiB, MiB

logger = logging.getLogger(__name__)

MEMINFO_PATH: Final = Path("/proc/meminfo")
NVIDIA_SMI_ARGUMENTS: Final = (
    "--query-gpu=index,name,memory.total,memory.used",
    "--format=csv,noheader,nounits",
)
NVIDIA_SMI_TIMEOUT_SECONDS: Final = 10.0


@dataclass(frozen=True)
class GpuCapacity:
    index: int
    name: str
    memory_bytes: int
    memory_used_bytes: int


@dataclass(frozen=True)
class NodeCapacity:
    cpu_count: int
    memory_bytes: int
    memory_available_bytes: int
    gpus: tuple[GpuCapacity, ...]


def cpu_count() -> int:
    """CPUs this process may run on; falls back to all CPUs where affinity is unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_meminfo(text: str) -> tuple[int, int]:
    """``(MemTotal, MemAvailable)`` in bytes from the text of /proc/meminfo."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            scale = KiB if len(fields) > 1 and fields[1] == "kB" else 1
            values[key.strip()] = int(fields[0]) * scale
    try:
        total = values["MemTotal"]
    except KeyError:
        raise ValueError("/proc/meminfo has no MemTotal line") from None
    # Kernels before 3.14 lack MemAvailable; MemFree is the cautious stand-in.
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return total, available


def _mebibytes(text: str) -> int | None:
    text = text.strip()
    return int(text) * MiB if text.isdigit() else None


def parse_nvidia_smi_csv(text: str) -> tuple[GpuCapacity, ...]:
    """GPUs from ``nvidia-smi --query-gpu=index,name,memory.total,memory.used`` CSV output.

    Memory is in MiB. A GPU whose total memory is unknown ("[N/A]") is left out: nothing could
    be scheduled on it safely. Unknown used memory counts as all of it used, for the same reason.
    """
    gpus: list[GpuCapacity] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(",")
        if len(parts) < 4 or not parts[0].strip().isdigit():
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        # A name may contain a comma; the numbers around it cannot.
        name = ",".join(parts[1:-2]).strip()
        total = _mebibytes(parts[-2])
        if total is None:
            continue
        used = _mebibytes(parts[-1])
        gpus.append(
            GpuCapacity(
                index=int(parts[0]),
                name=name,
                memory_bytes=total,
                memory_used_bytes=total if used is None else used,
            )
        )
    return tuple(gpus)


def probe_gpus(
    nvidia_smi: str | None = None, *, timeout_seconds: float = NVIDIA_SMI_TIMEOUT_SECONDS
) -> tuple[GpuCapacity, ...]:
    """NVIDIA GPUs of this machine; none when nvidia-smi is absent, fails or times out."""
    binary = nvidia_smi or shutil.which("nvidia-smi")
    if binary is None:
        return ()
    try:
        completed = subprocess.run(
            [binary, *NVIDIA_SMI_ARGUMENTS],
            capture_output=True,
            text=True,
            timeout=timeout_seconds,
            check=True,
        )
        return parse_nvidia_smi_csv(completed.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        logger.warning("nvidia-smi gave no GPU list (%s); reporting no GPUs", exc)
        return ()


def probe_node(*, meminfo_path: Path = MEMINFO_PATH, nvidia_smi: str | None = None) -> NodeCapacity:
    """This machine's capacity now: CPUs, memory and GPUs."""
    total, available = parse_meminfo(meminfo_path.read_text(encoding="ascii"))
    return NodeCapacity(
        cpu_count=cpu_count(),
        memory_bytes=total,
        memory_available_bytes=available,
        gpus=probe_gpus(nvidia_smi),
    )

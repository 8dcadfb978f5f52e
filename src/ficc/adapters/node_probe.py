"""Probe this machine's capacity, so the local node can be registered and scheduled on.

CPUs are those this process may run on (its affinity, which containers and taskset narrow),
memory comes from /proc/meminfo, and GPUs from NVML (``nvidia-ml-py``, in a worker thread) where
it is installed, else from ``nvidia-smi`` as an asyncio subprocess. A machine without NVIDIA
GPUs, or whose driver does not answer, has no GPUs: that is a fact to report, not an error that
should stop the cluster from starting.

The probe runs every few seconds inside the server, beside peer sessions whose liveness is
counted in seconds: it never blocks the event loop, and a driver that hangs costs at most
``NVIDIA_SMI_TIMEOUT_SECONDS`` of one probe, not of the loop.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Final

from ficc.base.units import KiB, MiB
from ficc.domain.nodes import Capacity, Gpu

logger = logging.getLogger(__name__)

MEMINFO_PATH: Final = Path("/proc/meminfo")
NVIDIA_SMI_ARGUMENTS: Final = (
    "--query-gpu=index,name,memory.total,memory.used",
    "--format=csv,noheader,nounits",
)
NVIDIA_SMI_TIMEOUT_SECONDS: Final = 2.0
"""A healthy nvidia-smi answers in well under a second; a hung driver is given up on quickly."""


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


def parse_nvidia_smi_csv(text: str) -> tuple[Gpu, ...]:
    """GPUs from ``nvidia-smi --query-gpu=index,name,memory.total,memory.used`` CSV output.

    Memory is in MiB. A GPU whose total memory is unknown ("[N/A]") is left out: nothing could
    be scheduled on it safely. Unknown used memory counts as all of it used, for the same reason.
    """
    gpus: list[Gpu] = []
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
            Gpu(
                index=int(parts[0]),
                name=name,
                memory_bytes=total,
                memory_used_bytes=total if used is None else used,
            )
        )
    return tuple(gpus)


async def probe_gpus(
    nvidia_smi: str | None = None, *, timeout_seconds: float = NVIDIA_SMI_TIMEOUT_SECONDS
) -> tuple[Gpu, ...]:
    """NVIDIA GPUs of this machine; none when nvidia-smi is absent, fails or times out.

    Run as an asyncio subprocess: the loop goes on while it runs, and one that outlives
    ``timeout_seconds`` is killed and reaped.
    """
    binary = nvidia_smi or shutil.which("nvidia-smi")
    if binary is None:
        return ()
    try:
        process = await asyncio.create_subprocess_exec(
            binary,
            *NVIDIA_SMI_ARGUMENTS,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        logger.warning("nvidia-smi could not be run (%s); reporting no GPUs", exc)
        return ()
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_seconds)
    except TimeoutError:
        process.kill()
        await process.wait()
        logger.warning("nvidia-smi gave no answer in %s s; reporting no GPUs", timeout_seconds)
        return ()
    if process.returncode != 0:
        logger.warning(
            "nvidia-smi failed with exit code %s (%s); reporting no GPUs",
            process.returncode,
            stderr.decode(errors="replace").strip()[:200],
        )
        return ()
    try:
        return parse_nvidia_smi_csv(stdout.decode(errors="replace"))
    except ValueError as exc:
        logger.warning("nvidia-smi gave no GPU list (%s); reporting no GPUs", exc)
        return ()


def _nvml_gpus() -> tuple[Gpu, ...] | None:
    """GPUs through NVML; None where ``nvidia-ml-py`` is not installed or NVML does not start.

    Blocking (NVML calls the driver): run it in a worker thread.
    """
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    nvml_error: type[Exception] = nvml.NVMLError  # the base of NVML's many error classes
    try:
        nvml.nvmlInit()
    except nvml_error as exc:  # no driver, or one that does not answer
        logger.info("NVML did not start (%s); asking nvidia-smi", exc)
        return None
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            device = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(device)
            memory = nvml.nvmlDeviceGetMemoryInfo(device)
            gpus.append(
                Gpu(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_bytes=int(memory.total),
                    memory_used_bytes=int(memory.used),
                )
            )
        return tuple(gpus)
    except nvml_error as exc:  # a GPU that stopped answering: fall back to nvidia-smi
        logger.warning("NVML gave no GPU list (%s); asking nvidia-smi", exc)
        return None
    finally:
        nvml.nvmlShutdown()


async def probe_node(
    *, meminfo_path: Path = MEMINFO_PATH, nvidia_smi: str | None = None
) -> Capacity:
    """This machine's capacity now: CPUs, memory and GPUs, without blocking the loop.

    ``nvidia_smi``: the binary to ask; naming one skips NVML (tests probe a given binary).
    """
    meminfo = await asyncio.to_thread(meminfo_path.read_text, encoding="ascii")
    total, available = parse_meminfo(meminfo)
    gpus = None if nvidia_smi is not None else await asyncio.to_thread(_nvml_gpus)
    return Capacity(
        cpu_count=cpu_count(),
        memory_bytes=total,
        memory_available_bytes=available,
        gpus=gpus if gpus is not None else await probe_gpus(nvidia_smi),
    )

"""Probing this machine: real values are plausible; nvidia-smi output parses as captured."""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.fakes.inference import bench
from tests.support.fakes.unit_of_work import FakeStore, FakeUnitOfWorkFactory
from tests.support.loop_watchdog import MAX_LOOP_HOLD_SECONDS, loop_watchdog

from ficc.adapters.node_probe import (
    NVIDIA_SMI_TIMEOUT_SECONDS,
    parse_meminfo,
    parse_nvidia_smi_csv,
    probe_gpus,
    probe_node,
)
from ficc.base.units import GiB, MiB
from ficc.domain.inference import ServiceState
from ficc.domain.nodes import Capacity, Gpu
from ficc.services.nodes import Nodes

# Captured from `nvidia-smi --query-gpu=index,name,memory.total,memory.used
# --format=csv,noheader,nounits` on a two-GPU machine (a sample, not this machine's output).
CAPTURED_NVIDIA_SMI_SAMPLE = """\
0, NVIDIA H200, 143771, 0
1, NVIDIA GeForce RTX 4090, 24564, 1023
"""

CAPTURED_MEMINFO_SAMPLE = """\
MemTotal:       24684096 kB
MemFree:        21053440 kB
MemAvailable:   23627304 kB
Buffers:          123456 kB
HugePages_Total:       0
"""


async def test_the_probe_reports_plausible_values_for_this_machine() -> None:
    node = await probe_node()
    assert node.cpu_count == len(os.sched_getaffinity(0))
    assert 1 <= node.cpu_count <= (os.cpu_count() or 1)
    assert 64 * MiB <= node.memory_bytes <= 64 * 1024 * GiB
    assert 0 < node.memory_available_bytes <= node.memory_bytes


async def test_the_probe_reports_gpus_exactly_when_nvidia_smi_is_installed() -> None:
    gpus = (await probe_node()).gpus
    if shutil.which("nvidia-smi") is None:
        assert gpus == ()
    else:
        assert gpus, "nvidia-smi is installed but no GPU was reported"
        assert [gpu.index for gpu in gpus] == sorted({gpu.index for gpu in gpus})
        for gpu in gpus:
            assert gpu.name
            assert GiB <= gpu.memory_bytes <= 1024 * GiB
            assert 0 <= gpu.memory_used_bytes <= gpu.memory_bytes


def test_a_captured_nvidia_smi_sample_parses_into_gpus_in_bytes() -> None:
    assert parse_nvidia_smi_csv(CAPTURED_NVIDIA_SMI_SAMPLE) == (
        Gpu(index=0, name="NVIDIA H200", memory_bytes=143771 * MiB, memory_used_bytes=0),
        Gpu(
            index=1,
            name="NVIDIA GeForce RTX 4090",
            memory_bytes=24564 * MiB,
            memory_used_bytes=1023 * MiB,
        ),
    )


def test_a_gpu_name_with_a_comma_is_kept_whole() -> None:
    (gpu,) = parse_nvidia_smi_csv("3, Tesla V100-SXM2-16GB, rev A, 16160, 5\n")
    assert (gpu.index, gpu.name, gpu.memory_bytes) == (
        3,
        "Tesla V100-SXM2-16GB, rev A",
        16160 * MiB,
    )


def test_unknown_used_memory_counts_as_all_used_and_unknown_total_skips_the_gpu() -> None:
    gpus = parse_nvidia_smi_csv("0, A, 1000, [N/A]\n1, B, [N/A], [N/A]\n")
    assert gpus == (Gpu(0, "A", 1000 * MiB, 1000 * MiB),)


def test_empty_nvidia_smi_output_means_no_gpus() -> None:
    assert parse_nvidia_smi_csv("\n") == ()


@pytest.mark.parametrize("line", ["garbage", "x, name, 1, 2", "0, 1"])
def test_a_malformed_nvidia_smi_line_is_an_error(line: str) -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_nvidia_smi_csv(line)


def fake_nvidia_smi(directory: Path, script: str) -> str:
    binary = directory / "nvidia-smi"
    binary.write_text("#!/bin/sh\n" + script)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return str(binary)


async def test_probe_gpus_runs_nvidia_smi_with_the_query_arguments(tmp_path: Path) -> None:
    binary = fake_nvidia_smi(
        tmp_path,
        'test "$1" = "--query-gpu=index,name,memory.total,memory.used" || exit 9\n'
        'test "$2" = "--format=csv,noheader,nounits" || exit 9\n'
        "echo '0, Fake GPU, 2048, 1024'\n",
    )
    assert await probe_gpus(binary) == (Gpu(0, "Fake GPU", 2048 * MiB, 1024 * MiB),)


async def test_an_nvidia_smi_that_fails_means_no_gpus(tmp_path: Path) -> None:
    binary = fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert await probe_gpus(binary) == ()


async def test_an_nvidia_smi_that_hangs_means_no_gpus(tmp_path: Path) -> None:
    binary = fake_nvidia_smi(tmp_path, "exec sleep 30\n")
    assert await probe_gpus(binary, timeout_seconds=0.2) == ()


async def test_a_missing_nvidia_smi_binary_means_no_gpus(tmp_path: Path) -> None:
    assert await probe_gpus(str(tmp_path / "absent" / "nvidia-smi")) == ()


def test_a_captured_meminfo_sample_parses_into_bytes() -> None:
    assert parse_meminfo(CAPTURED_MEMINFO_SAMPLE) == (24684096 * 1024, 23627304 * 1024)


def test_meminfo_without_memavailable_falls_back_to_memfree() -> None:
    assert parse_meminfo("MemTotal: 100 kB\nMemFree: 40 kB\n") == (102400, 40960)


def test_meminfo_without_memtotal_is_an_error() -> None:
    with pytest.raises(ValueError, match="MemTotal"):
        parse_meminfo("MemFree: 40 kB\n")


async def test_the_probe_reads_the_meminfo_file_it_is_given(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(CAPTURED_MEMINFO_SAMPLE)
    node = await probe_node(meminfo_path=meminfo, nvidia_smi=str(tmp_path / "absent"))
    assert (node.memory_bytes, node.memory_available_bytes, node.gpus) == (
        24684096 * 1024,
        23627304 * 1024,
        (),
    )


# --- nothing blocks the loop ----------------------------------------------------------------


async def test_a_hanging_nvidia_smi_never_holds_the_event_loop(tmp_path: Path) -> None:
    binary = fake_nvidia_smi(tmp_path, "exec sleep 30\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(CAPTURED_MEMINFO_SAMPLE)
    async with loop_watchdog() as lag:
        started = time.monotonic()
        node = await probe_node(meminfo_path=meminfo, nvidia_smi=binary)
        took = time.monotonic() - started
    assert node.gpus == ()
    assert took >= NVIDIA_SMI_TIMEOUT_SECONDS  # it really waited for the hung driver...
    assert lag.worst_seconds < MAX_LOOP_HOLD_SECONDS, lag  # ...beside the loop, not on it
    assert lag.ticks > 10


async def test_registering_the_local_node_and_starting_a_service_never_hold_the_loop(
    tmp_path: Path,
) -> None:
    slow = fake_nvidia_smi(tmp_path, "sleep 0.5\necho '0, Fake GPU, 2048, 1024'\n")
    b = bench(tmp_path)
    store = FakeStore()

    async def probe() -> Capacity:
        found = await probe_node(nvidia_smi=slow)
        return replace(found, memory_bytes=16 * GiB, memory_available_bytes=16 * GiB)

    async with loop_watchdog() as lag:
        nodes = Nodes(FakeUnitOfWorkFactory(store), b.clock)
        await nodes.register_local_node(probe, "node_x", name="here")
        await b.add_node()
        model = await b.add_model(MiB)
        service = await b.create(model, replicas=2)
        await b.control(service["id"], "start")
        await b.until(lambda: b.service(service["id"]).state is ServiceState.RUNNING)
    [node] = store.nodes.values()
    assert (node.name, [gpu.name for gpu in node.gpus]) == ("here", ["Fake GPU"])
    assert lag.worst_seconds < MAX_LOOP_HOLD_SECONDS, lag

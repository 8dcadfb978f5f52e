"""Catalogue import: blob store throughput beside a plain copy-and-hash, and flat memory.

A model file is generated in a temp directory, fsynced so no earlier writeback skews a phase,
then imported into a fresh blob store. The baselines copy it with ``shutil.copyfile`` (which
the kernel does without user-space buffers) and hash it with ``hashlib.file_digest``, once as
stated and once with the fsync the store performs, so the cost of durability is visible.

Peak memory is measured in child processes (VmHWM from /proc/self/status, the kernel's
high-water mark, so a short spike between samples still counts): the growth while importing
1 GiB must be about the growth while importing 100 MiB.

``FICC_BENCH_CATALOGUE_BYTES`` shrinks the large file for a quick trial run.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import row
from ficc.adapters.blobstore import BlobStore
from ficc.base.units import GiB, MiB

LARGE_BYTES = int(os.environ.get("FICC_BENCH_CATALOGUE_BYTES", GiB))
SMALL_BYTES = min(100 * MiB, LARGE_BYTES)
WRITE_CHUNK_BYTES = 4 * MiB
REPETITIONS = 3

_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from ficc.adapters.blobstore import BlobStore

    def high_water_kib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise RuntimeError("no VmHWM in /proc/self/status")

    store = BlobStore(Path(sys.argv[2]))
    before = high_water_kib()
    store.import_file(Path(sys.argv[1]))
    print(json.dumps({"before_kib": before, "after_kib": high_water_kib()}))
    """
)


def generate(path: Path, size_bytes: int, seed: int) -> None:
    """Write ``size_bytes`` of incompressible bytes, chunk by chunk, and make them durable."""
    block = random.Random(seed).randbytes(WRITE_CHUNK_BYTES)
    with path.open("wb") as handle:
        written = 0
        counter = 0
        while written < size_bytes:
            chunk = counter.to_bytes(8, "big") + block[8:]
            chunk = chunk[: size_bytes - written]
            handle.write(chunk)
            written += len(chunk)
            counter += 1
        handle.flush()
        os.fsync(handle.fileno())


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def copy_and_hash(source: Path, target: Path, *, durable: bool) -> str:
    shutil.copyfile(source, target)
    if durable:
        with target.open("rb") as handle:
            os.fsync(handle.fileno())
    with source.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def peak_growth_mib(source: Path, store_root: Path) -> float:
    """Growth of the peak resident set of a child process while it imports ``source``."""
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, str(source), str(store_root)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    measured = json.loads(completed.stdout)
    return float(measured["after_kib"] - measured["before_kib"]) / 1024


def throughput_mib_s(size_bytes: int, seconds: float) -> float:
    return size_bytes / MiB / seconds


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="ficc-bench-catalogue-") as work:
        root = Path(work)
        large = root / "large.bin"
        small = root / "small.bin"
        generate(large, LARGE_BYTES, seed=1)
        generate(small, SMALL_BYTES, seed=2)
        size_label = f"{LARGE_BYTES / MiB:,.0f} MiB"

        store = BlobStore(root / "store")
        plain_seconds = import_seconds = durable_seconds = float("inf")
        # Interleaved repetitions, best of each: writeback of one phase must not bias another.
        for _ in range(REPETITIONS):
            seconds, plain_digest = timed(
                lambda: copy_and_hash(large, root / "copy", durable=False)
            )
            plain_seconds = min(plain_seconds, seconds)
            (root / "copy").unlink()

            seconds, (digest, size) = timed(lambda: store.import_file(large))
            import_seconds = min(import_seconds, seconds)
            if (digest, size) != (plain_digest, LARGE_BYTES):
                raise RuntimeError("the blob store and hashlib disagree on the file's SHA-256")
            store.remove(digest)

            seconds, _ = timed(lambda: copy_and_hash(large, root / "copy", durable=True))
            durable_seconds = min(durable_seconds, seconds)
            (root / "copy").unlink()

        growth_small = peak_growth_mib(small, root / "store-small")
        growth_large = peak_growth_mib(large, root / "store-large")

    imported = throughput_mib_s(LARGE_BYTES, import_seconds)
    return [
        row(
            "catalogue.import_throughput",
            f"import {size_label} into the blob store",
            "MiB/s",
            imported,
            "shutil.copyfile + sha256",
            throughput_mib_s(LARGE_BYTES, plain_seconds),
        ),
        row(
            "catalogue.import_throughput_vs_durable_copy",
            f"import {size_label} into the blob store",
            "MiB/s",
            imported,
            "shutil.copyfile + fsync + sha256",
            throughput_mib_s(LARGE_BYTES, durable_seconds),
        ),
        row(
            "catalogue.import_peak_rss_growth",
            f"peak RSS growth, import of {size_label}",
            "MiB",
            growth_large,
            f"same, import of {SMALL_BYTES / MiB:,.0f} MiB",
            growth_small,
        ),
    ]

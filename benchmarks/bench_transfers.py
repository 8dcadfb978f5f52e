"""Model acquisition between two real clusters beside raw iroh, and the requester's memory.

Two ``ficc serve`` processes (the grantor and the requester) pair over HyperNet on loopback
(run inside a loopback-only network namespace). The grantor imports two generated models of
random bytes, 100 MiB and 1 GiB, and grants both; the requester acquires each with FICC's
default range size (64 MiB). A transfer's time runs from the acquire request to the state
``complete``: every byte is fetched, hashed, written, fsynced, verified and registered.

Baselines, measured in the same run:

- throughput: one raw iroh bi-stream between two processes (a child sends, this process
  receives and discards), the same shape as the requester and grantor — each process has its
  own iroh thread. Target: acquisition ≥ 0.8 × raw.
- memory: the requester's peak RSS (VmHWM, the kernel's high-water mark, read from
  /proc/PID/status before the process ends) acquiring 1 GiB beside acquiring 100 MiB, each in
  a freshly started requester process. Target: ≈ 1 (flat in the model's size).

For the plots: the bytes done at each poll of the large acquisition (throughput over time),
and the requester's peak RSS at three model sizes (a middle one between the two above).

``FICC_BENCH_TRANSFER_BYTES`` shrinks the large model for a quick trial run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import iroh

from benchmarks import row, series
from ficc.adapters.hypernet.writefix import apply_write_fix
from ficc.base.units import GiB, KiB, MiB

LARGE_BYTES = int(os.environ.get("FICC_BENCH_TRANSFER_BYTES", GiB))
SMALL_BYTES = min(100 * MiB, LARGE_BYTES)
MIDDLE_BYTES = (SMALL_BYTES + LARGE_BYTES) // 2
RAW_BYTES = 512 * MiB
RAW_ROUNDS = 2
RAW_ALPN = b"ficc.bench.raw/1"
API = "/api/v1/federation"
START_SECONDS = 30.0
TRANSFER_SECONDS = 600.0
POLL_SECONDS = 0.02

_SENDER = textwrap.dedent(
    """
    import asyncio, sys
    import iroh
    from ficc.adapters.hypernet.writefix import apply_write_fix

    apply_write_fix()
    ALPN, TOTAL, BLOCK = b"ficc.bench.raw/1", int(sys.argv[1]), 512 * 1024

    async def main():
        options = iroh.EndpointOptions(
            preset=iroh.preset_minimal(), bind_addr="127.0.0.1:0", alpns=[ALPN],
            relay_mode=iroh.RelayMode.disabled(),
        )
        endpoint = await iroh.Endpoint.bind(options)
        print(iroh.EndpointTicket.from_addr(endpoint.addr()), flush=True)
        incoming = await endpoint.accept_next()
        connection = await (await incoming.accept()).connect()
        block = bytes(BLOCK)
        while True:
            stream = await connection.accept_bi()
            if await stream.recv().read(1) != b"g":
                break
            send = stream.send()
            for _ in range(TOTAL // BLOCK):
                await send.write_all(block)
            await send.finish()
        await endpoint.close()

    asyncio.run(main())
    """
)


# --- raw iroh, two processes ------------------------------------------------------------------


async def _receive_raw(ticket: str) -> list[float]:
    """MB/s of ``RAW_ROUNDS`` single-stream bulk reads from the sender named by ``ticket``."""
    options = iroh.EndpointOptions(
        preset=iroh.preset_minimal(),
        bind_addr="127.0.0.1:0",
        alpns=[RAW_ALPN],
        relay_mode=iroh.RelayMode.disabled(),
    )
    endpoint = await iroh.Endpoint.bind(options)
    address = iroh.EndpointTicket.from_string(ticket).endpoint_addr()
    connection = await endpoint.connect(address, RAW_ALPN)
    rates = []
    for _ in range(RAW_ROUNDS):
        stream = await connection.open_bi()
        started = time.perf_counter()
        await stream.send().write_all(b"g")
        recv, received = stream.recv(), 0
        while data := await recv.read(2 * MiB):
            received += len(data)
        rates.append(received / (time.perf_counter() - started) / 1e6)
        assert received == RAW_BYTES
    stream = await connection.open_bi()
    await stream.send().write_all(b"x")  # tells the sender to stop
    await stream.send().finish()
    await endpoint.close()
    return rates


def _raw_throughputs() -> list[float]:
    """Raw iroh between two processes: a child sends, this process receives."""
    apply_write_fix()
    sender = subprocess.Popen(
        [sys.executable, "-c", _SENDER, str(RAW_BYTES)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert sender.stdout is not None
        ticket = sender.stdout.readline().strip()
        rates = asyncio.run(_receive_raw(ticket))
        sender.wait(timeout=30)
        return rates
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()


# --- two FICC clusters --------------------------------------------------------------------------


@dataclass
class _Server:
    state_dir: Path
    process: subprocess.Popen[bytes]
    client: httpx.Client

    def peak_rss_bytes(self) -> int:
        """The process's high-water mark of resident memory so far."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(item for item in status.splitlines() if item.startswith("VmHWM:"))
        return int(line.split()[1]) * KiB

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _serve(state_dir: Path, log_path: Path) -> _Server:
    """``ficc serve`` on free loopback ports; returns once it accepts requests."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ficc",
                "serve",
                "--state-dir",
                str(state_dir),
                "--listen",
                "127.0.0.1:0",
                "--hypernet-bind",
                "127.0.0.1:0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ficc serve exited early:\n{log_path.read_text()}")
        try:
            info = json.loads((state_dir / "server.json").read_text())
        except (FileNotFoundError, ValueError):
            info = None
        if isinstance(info, dict) and info.get("pid") == process.pid:
            token = (state_dir / "owner.token").read_text().strip()
            client = httpx.Client(
                base_url=info["url"], headers={"Authorization": f"Bearer {token}"}, timeout=60
            )
            return _Server(state_dir, process, client)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"ficc serve did not start in time:\n{log_path.read_text()}")


def _ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")
    body: dict[str, Any] = response.json()
    return body


def _random_file(path: Path, size: int) -> None:
    with path.open("wb") as out:
        left = size
        while left:
            piece = os.urandom(min(16 * MiB, left))
            out.write(piece)
            left -= len(piece)
        out.flush()
        os.fsync(out.fileno())


def _pair(requester: _Server, grantor: _Server, models: list[str], root: Path) -> str:
    """Companions, offer, approval with a grant for ``models``, finish; the requester's peer."""
    for server, label in ((requester, "requester"), (grantor, "grantor")):
        body = {"agent_directory": str(root / f"{label}-agent"), "label": label}
        _ok(server.client.put(f"{API}/configuration", json=body))
    identity = _ok(grantor.client.get(f"{API}/"))["identity"]
    scopes = ["models:read", "models:transfer"]
    offer = _ok(
        requester.client.post(
            f"{API}/offers",
            json={
                "service": identity["hypernet_id"],
                "scopes": scopes,
                "ticket": identity["ticket"],
            },
        ),
        201,
    )
    grant = {"scopes": scopes, "models": models, "transfer_bytes": 4 * LARGE_BYTES}
    approved = _ok(
        grantor.client.post(
            f"{API}/offers/{offer['id']}/approve", json={"revision": 1, "grant": grant}
        )
    )
    finished = _ok(
        requester.client.post(
            f"{API}/offers/{offer['id']}/finish", json={"receipt": approved["receipt"]["digest"]}
        )
    )
    return str(finished["peer"]["id"])


def _acquire(
    requester: _Server, peer: str, model: dict[str, Any]
) -> tuple[float, list[tuple[float, int]]]:
    """Acquire ``model``: seconds from the request to the registered local model, and the
    (seconds, bytes done) seen at each poll."""
    started = time.perf_counter()
    transfer = _ok(
        requester.client.post(f"{API}/peers/{peer}/models", json={"model": model["id"]}), 202
    )
    progress = [(0.0, 0)]
    deadline = time.monotonic() + TRANSFER_SECONDS
    while transfer["state"] not in ("complete", "failed", "paused"):
        if time.monotonic() >= deadline:
            raise RuntimeError(f"the transfer did not finish in time: {transfer}")
        time.sleep(POLL_SECONDS)
        transfer = _ok(requester.client.get(f"{API}/transfers/{transfer['id']}"))
        progress.append((time.perf_counter() - started, int(transfer["bytes_done"])))
    elapsed = time.perf_counter() - started
    if transfer["state"] != "complete":
        raise RuntimeError(f"the transfer did not complete: {transfer}")
    local = _ok(requester.client.get(f"/api/v1/models/{transfer['local_model']}"))
    if local["sha256"] != model["sha256"]:
        raise RuntimeError("the acquired model's canonical SHA-256 differs from the grantor's")
    return elapsed, progress


def _measure_clusters(root: Path) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds and the requester's peak RSS for each model size (a fresh requester each)."""
    files = root / "files"
    files.mkdir()
    grantor = _serve(root / "grantor", root / "grantor.log")
    requester = _serve(root / "requester", root / "requester.log")
    try:
        models = {}
        sizes = {"small": SMALL_BYTES, "middle": MIDDLE_BYTES, "large": LARGE_BYTES}
        for label, size in sizes.items():
            path = files / f"{label}.bin"
            _random_file(path, size)
            models[label] = _ok(
                grantor.client.post("/api/v1/models", json={"name": label, "paths": [str(path)]}),
                201,
            )
            path.unlink()
        peer = _pair(requester, grantor, [m["id"] for m in models.values()], root)
        seconds: dict[str, float] = {}
        peaks: dict[str, int] = {}
        for label in sizes:
            # A fresh requester process, so its high-water mark belongs to this model only.
            requester.stop()
            requester = _serve(root / "requester", root / "requester.log")
            seconds[label], progress = _acquire(requester, peer, models[label])
            peaks[label] = requester.peak_rss_bytes()
            if label == "large":
                series.record(
                    "transfers.progress",
                    {
                        "bytes": LARGE_BYTES,
                        "seconds": [t for t, _ in progress],
                        "bytes_done": [done for _, done in progress],
                    },
                )
        series.record(
            "transfers.peak_rss",
            {"model_bytes": list(sizes.values()), "peak_rss_bytes": [peaks[k] for k in sizes]},
        )
        return seconds, peaks
    finally:
        requester.stop()
        grantor.stop()


def run() -> list[dict[str, Any]]:
    """Acquisition throughput and memory beside raw iroh, in one run."""
    raw = _raw_throughputs()
    with tempfile.TemporaryDirectory(prefix="ficc-bench-transfers-") as directory:
        seconds, peaks = _measure_clusters(Path(directory))
    acquired = LARGE_BYTES / seconds["large"] / 1e6
    name = f"model acquisition, verified ({LARGE_BYTES // MiB} MiB, one peer)"
    memory = f"requester peak RSS, {LARGE_BYTES // MiB} MiB vs {SMALL_BYTES // MiB} MiB model"
    return [
        row(
            name,
            "throughput",
            "MB/s",
            round(acquired, 1),
            "raw iroh, one stream, two processes",
            round(statistics.median(raw), 1),
        ),
        row(
            memory,
            "peak RSS",
            "MiB",
            round(peaks["large"] / MiB, 1),
            f"same, {SMALL_BYTES // MiB} MiB model",
            round(peaks["small"] / MiB, 1),
        ),
    ]


if __name__ == "__main__":
    for item in run():
        print(item)

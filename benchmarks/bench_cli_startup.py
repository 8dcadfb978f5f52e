"""CLI start-up: the wall time of `ficc` commands beside `python -c pass` in the same run.

Completion and scripts start `ficc` again and again, so its start-up is a figure of its own:
``ficc --help`` should stay within 150 ms of wall time, and a command that talks to the
control socket should add only its request. Each figure is the median of several runs; the
baseline is the bare interpreter, so the ratio shows what FICC's imports add.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import row

REPETITIONS = 15


def median_seconds(argv: list[str]) -> float:
    """The median wall time of running ``argv`` to its end, output discarded."""
    times = []
    for _ in range(REPETITIONS):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run() -> list[dict[str, Any]]:
    python = sys.executable
    baseline = median_seconds([python, "-c", "pass"]) * 1000
    ficc = [python, "-m", "ficc"]
    with tempfile.TemporaryDirectory(prefix="ficc-bench-cli-") as work:
        state_dir = str(Path(work) / "state")
        commands = {
            "ficc --help": [*ficc, "--help"],
            "ficc services --help": [*ficc, "services", "--help"],
            # No server: the command starts, finds no socket and exits 3 (the client's path).
            "ficc services (no server)": [*ficc, "services", "--state-dir", state_dir],
            "ficc completion bash": [*ficc, "completion", "bash"],
        }
        return [
            row(
                name,
                "start-up wall time (median)",
                "ms",
                median_seconds(argv) * 1000,
                "python -c pass",
                baseline,
            )
            for name, argv in commands.items()
        ]

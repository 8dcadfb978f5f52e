"""Run the benchmarks: ``python -m benchmarks [NAME...]``, NAME as ``catalogue`` (or with bench_).

Every selected module runs even when another fails; a failure is reported on stderr and makes
the exit status 1. The rows of the modules that succeeded are written to
``benchmarks/results/latest.json`` beside a description of the machine, and shown as a table;
the samples behind them go to ``series.json`` and the plots (PNG) beside it
(``--plots-only`` draws them again from those two files).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import os
import pkgutil
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import benchmarks
from benchmarks import ROW_KEYS, series
from ficc.adapters.node_probe import probe_node

SETTLE_SECONDS = 1.0
RESULTS_PATH = Path(__file__).parent / "results" / "latest.json"
SERIES_NAME = "series.json"
PREFIX = "bench_"


def discover() -> list[str]:
    """Names of the ``bench_*`` modules of this package, sorted."""
    return sorted(
        info.name
        for info in pkgutil.iter_modules(benchmarks.__path__)
        if info.name.startswith(PREFIX)
    )


def select(available: Sequence[str], wanted: Sequence[str]) -> list[str]:
    """The modules named on the command line (with or without the prefix), or all of them."""
    if not wanted:
        return list(available)
    chosen: list[str] = []
    for name in wanted:
        module = name if name.startswith(PREFIX) else PREFIX + name
        if module not in available:
            known = ", ".join(item.removeprefix(PREFIX) for item in available)
            raise ValueError(f"no benchmark named {name!r}; known: {known}")
        if module not in chosen:
            chosen.append(module)
    return chosen


def check_rows(rows: object) -> list[dict[str, Any]]:
    """Refuse a result that does not follow the row shape, so the JSON file stays trustworthy."""
    if not isinstance(rows, list):
        raise TypeError(f"run() returned {type(rows).__name__}, not a list of rows")
    for index, item in enumerate(rows):
        if not isinstance(item, dict) or tuple(sorted(item)) != tuple(sorted(ROW_KEYS)):
            raise ValueError(f"row {index} must have exactly the keys {', '.join(ROW_KEYS)}")
        for key in ("value", "baseline_value"):
            number = item[key]
            if not isinstance(number, int | float) or not math.isfinite(number):
                raise ValueError(f"row {index}: {key} must be a finite number")
    return rows


def machine() -> dict[str, Any]:
    """What the results were measured on (the probe is the one FICC's nodes use)."""
    node = asyncio.run(probe_node())
    return {
        "cpu_count": node.cpu_count,
        "memory_bytes": node.memory_bytes,
        "gpus": [gpu.name for gpu in node.gpus],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def run_module(name: str, console: Console, series_path: Path) -> list[dict[str, Any]] | None:
    """Rows of one module, measured in a process of its own, or None after its failure; the
    samples it records for the plots are appended to ``series_path``.

    A process each: the HyperNet bindings bind one event loop per process, and one module's
    memory or threads must not colour the next module's figures.
    """
    console.print(f"[bold]running {name}…[/bold]")
    settle()
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--child", name],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
        env={**os.environ, series.SERIES_ENV: str(series_path)},
    )
    if child.returncode != 0:
        print(f"benchmark {name} failed (exit status {child.returncode})", file=sys.stderr)
        return None
    try:
        rows = check_rows(json.loads(child.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError) as exc:
        print(f"benchmark {name} gave no rows: {exc}", file=sys.stderr)
        return None
    console.print(f"  {name}: {len(rows)} rows in {time.perf_counter() - started:.1f} s")
    return rows


def settle() -> None:
    """Let the previous module's writes reach the disk before the next one measures.

    The catalogue and transfer benchmarks leave gigabytes of dirty pages; the kernel writing
    them back in the background costs CPU that would otherwise be charged to the next module.
    """
    os.sync()
    time.sleep(SETTLE_SECONDS)


def run_child(name: str) -> int:
    """Inside the module's own process: run it and print its rows as one JSON line."""
    try:
        module = importlib.import_module(f"benchmarks.{name}")
        rows = check_rows(module.run())
    except Exception:  # noqa: BLE001 - reported to the parent through the exit status
        print(f"benchmark {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
        return 1
    print(json.dumps(rows))
    return 0


def render(rows: Sequence[dict[str, Any]], console: Console) -> None:
    table = Table(title="FICC benchmarks")
    for column in ("name", "metric", "baseline"):
        table.add_column(column)
    for column in ("value", "baseline value", "ratio"):
        table.add_column(column, justify="right")
    for item in rows:
        unit = item["unit"]
        ratio = item["ratio"]
        table.add_row(
            item["name"],
            item["metric"],
            item["baseline"],
            f"{item['value']:,.1f} {unit}",
            f"{item['baseline_value']:,.1f} {unit}",
            "—" if ratio is None else f"{ratio:.2f}×",
        )
    console.print(table)


def draw(results: Path, series_path: Path, console: Console) -> int:
    """The plots beside ``results``; 1 when they cannot be drawn (matplotlib is missing)."""
    try:
        from benchmarks import plots  # matplotlib comes with the bench extra only
    except ImportError as exc:
        print(f"no plots: {exc} (install the bench extra: make setup-bench)", file=sys.stderr)
        return 1
    document = json.loads(results.read_text(encoding="utf-8"))
    recorded = json.loads(series_path.read_text(encoding="utf-8")) if series_path.exists() else {}
    for path in plots.draw_all(document, recorded, results.parent):
        console.print(f"plot written to {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument(
        "--output", type=Path, default=RESULTS_PATH, help=f"JSON file (default: {RESULTS_PATH})"
    )
    parser.add_argument(
        "--plots-only",
        action="store_true",
        help="draw the plots again from the JSON file and the series.json beside it",
    )
    parser.add_argument("--child", metavar="NAME", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child is not None:
        return run_child(arguments.child)
    # Wide enough for the table when the output is a file or a CI log, not a terminal.
    console = Console(width=None if sys.stdout.isatty() else 160)
    series_path = arguments.output.parent / SERIES_NAME
    if arguments.plots_only:
        return draw(arguments.output, series_path, console)
    try:
        chosen = select(discover(), arguments.names)
    except ValueError as exc:
        parser.error(str(exc))
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    recorded: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ficc-bench-series-") as temporary:
        for name in chosen:
            module_series = Path(temporary) / f"{name}.jsonl"
            result = run_module(name, console, module_series)
            if result is None:
                failed.append(name)
            else:
                rows.extend(result)
                recorded.update(series.read(module_series))
    document = {"machine": machine(), "benchmarks": rows}
    arguments.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    series_path.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
    render(rows, console)
    console.print(f"results written to {arguments.output}")
    if draw(arguments.output, series_path, console) != 0:
        failed.append("plots")
    if failed:
        print(f"failed benchmarks: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

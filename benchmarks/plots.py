"""The plots ``make bench`` writes beside ``latest.json``, drawn from its rows and the samples
in ``series.json`` (see :mod:`benchmarks.series`). Needs matplotlib (the ``bench`` extra).

Each function draws one PNG and returns its path, or None when its module did not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")  # files only: no display, no GUI toolkit

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

ENGINES: Final = (("mock", "instant mock engine"), ("llama_cpp", "llama.cpp (SmolLM2)"))
ROUTES: Final = (
    ("direct", "engine directly"),
    ("local", "FICC local URL (one hop)"),
    ("federated", "FICC federated URL (two clusters)"),
    ("gateway", "LiteLLM gateway (one hop)"),
)
MIB: Final = 1024 * 1024
DPI: Final = 110
LOG_SCALE_SPREAD: Final = 20
"""Rates further apart than this share a panel on a log axis."""


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def _ecdf(axes: Axes, samples: Sequence[float], label: str) -> None:
    ordered = sorted(samples)
    count = len(ordered)
    axes.step(ordered, [(index + 1) / count for index in range(count)], where="post", label=label)


def latency(recorded: dict[str, Any], folder: Path) -> Path | None:
    """Distribution of a streamed chat's total time by route, one panel per engine."""
    present = [(key, title) for key, title in ENGINES if f"federation.{key}.latency" in recorded]
    if not present:
        return None
    figure, panels = plt.subplots(1, len(present), figsize=(6 * len(present), 4.2), squeeze=False)
    for axes, (key, title) in zip(panels[0], present, strict=True):
        samples = recorded[f"federation.{key}.latency"]
        for route, label in ROUTES:
            if route in samples:
                _ecdf(axes, samples[route]["total"], label)
        axes.set_xscale("log")
        axes.set_xlabel("total time of a streamed chat (ms, log scale)")
        axes.set_ylabel("fraction of requests at most this long")
        axes.set_title(f"Latency, sequential: {title}")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize="small", loc="lower right")
    return _save(figure, folder / "latency.png")


def throughput(recorded: dict[str, Any], folder: Path) -> Path | None:
    """Streamed chats per second against the number of concurrent clients, by route."""
    present = [(key, title) for key, title in ENGINES if f"federation.{key}.throughput" in recorded]
    if not present:
        return None
    figure, panels = plt.subplots(1, len(present), figsize=(6 * len(present), 4.2), squeeze=False)
    for axes, (key, title) in zip(panels[0], present, strict=True):
        sweep = recorded[f"federation.{key}.throughput"]
        for route, label in ROUTES:
            if route in sweep:
                axes.plot(sweep["clients"], sweep[route], marker="o", label=label)
        axes.set_xticks(sweep["clients"])
        axes.set_xlabel("concurrent clients")
        rates = [rate for route, _ in ROUTES if route in sweep for rate in sweep[route]]
        if max(rates) > LOG_SCALE_SPREAD * min(rates):
            # The instant engine answers far faster than any proxy: a linear axis would
            # flatten every proxied route onto the floor.
            axes.set_yscale("log")
            axes.set_ylabel("streamed chats per second (log scale)")
        else:
            axes.set_ylabel("streamed chats per second")
            axes.set_ylim(bottom=0)
        axes.set_title(f"Throughput: {title}")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize="small")
    return _save(figure, folder / "throughput.png")


def _rate_per_step(
    seconds: Sequence[float], done: Sequence[int]
) -> tuple[list[float], list[float]]:
    """(step edges in s, MB/s of each step) between the polls where ``bytes_done`` grew.

    The requester reports progress a range (64 MiB by default) at a time, so a rate between
    two polls is zero or a spike; between two reports it is the range's own throughput.
    """
    edges = [0.0]
    rates: list[float] = []
    last_bytes = 0
    for when, value in zip(seconds, done, strict=True):
        if value > last_bytes and when > edges[-1]:
            rates.append((value - last_bytes) / (when - edges[-1]) / 1e6)
            edges.append(when)
            last_bytes = value
    return edges, rates


def acquisition(
    recorded: dict[str, Any], rows: Sequence[dict[str, Any]], folder: Path
) -> Path | None:
    """Bytes acquired over the time of one transfer and each range's rate, beside raw iroh."""
    progress = recorded.get("transfers.progress")
    if progress is None:
        return None
    seconds, done = progress["seconds"], progress["bytes_done"]
    raw = next(
        (
            item
            for item in rows
            if item["metric"] == "throughput" and item["name"].startswith("model acquisition")
        ),
        None,
    )
    total_seconds = seconds[-1]
    mean = progress["bytes"] / total_seconds / 1e6
    figure, (cumulative, per_range) = plt.subplots(1, 2, figsize=(12, 4.2))
    cumulative.plot(seconds, [value / 1e6 for value in done], label="FICC acquisition")
    if raw is not None:
        pace = raw["baseline_value"]
        cumulative.plot(
            [0, progress["bytes"] / 1e6 / pace],
            [0, progress["bytes"] / 1e6],
            linestyle=":",
            color="C3",
            label=f"{raw['baseline']} (its mean pace)",
        )
    cumulative.set_xlabel("seconds since the acquire request")
    cumulative.set_ylabel("MB verified and written")
    cumulative.set_title(f"Acquisition of {progress['bytes'] // MIB} MiB over time")
    cumulative.grid(True, alpha=0.3)
    cumulative.legend(fontsize="small")

    edges, rates = _rate_per_step(seconds, done)
    per_range.stairs(rates, edges, label="FICC, each reported range")
    per_range.axhline(mean, linestyle="--", color="C0", alpha=0.6, label="FICC mean, end to end")
    if raw is not None:
        per_range.axhline(raw["baseline_value"], linestyle=":", color="C3", label=raw["baseline"])
    per_range.set_xlabel("seconds since the acquire request")
    per_range.set_ylabel("MB/s")
    per_range.set_ylim(bottom=0)
    per_range.set_title("Acquisition throughput over time")
    per_range.grid(True, alpha=0.3)
    per_range.legend(fontsize="small")
    return _save(figure, folder / "acquisition.png")


def peak_rss(recorded: dict[str, Any], folder: Path) -> Path | None:
    """The requester's peak RSS against the size of the model it acquired."""
    measured = recorded.get("transfers.peak_rss")
    if measured is None:
        return None
    sizes = [size / MIB for size in measured["model_bytes"]]
    peaks = [peak / MIB for peak in measured["peak_rss_bytes"]]
    figure, axes = plt.subplots(figsize=(7, 4.2))
    axes.plot(sizes, peaks, marker="o", label="requester peak RSS (VmHWM)")
    axes.set_xlabel("model size (MiB)")
    axes.set_ylabel("peak RSS (MiB)")
    axes.set_ylim(bottom=0, top=max(max(peaks) * 1.3, max(sizes) * 0.25))
    axes.set_title("Acquisition memory against model size (a fresh requester each)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    return _save(figure, folder / "peak_rss.png")


STREAM_ROUTES: Final = (
    ("federated", "FICC federated URL (two clusters)"),
    ("local", "FICC local URL (one hop)"),
    ("gateway", "LiteLLM gateway (one hop)"),
)


def _case_label(case: str) -> str:
    """``128t.8k`` as ``128 tokens, 8 KiB``."""
    tokens, kib = case.split(".")
    return f"{tokens.rstrip('t')} tokens, {kib.rstrip('k')} KiB"


def stream_cpu(recorded: dict[str, Any], folder: Path) -> Path | None:
    """CPU ms per streamed chunk by route, for each answer length and body size: the bars of
    a route stack its processes (alpha over beta through both clusters)."""
    measured = recorded.get("federation.stream_cpu")
    if not measured:
        return None
    cases = sorted(
        {key.split(".", 1)[1] for key in measured},
        key=lambda case: tuple(int(part.rstrip("tk")) for part in case.split(".")),
    )
    routes = [(route, label) for route, label in STREAM_ROUTES if f"{route}.{cases[0]}" in measured]
    figure, axes = plt.subplots(figsize=(max(7, 1.6 * len(cases)), 4.4))
    width = 0.8 / max(len(routes), 1)
    for index, (route, label) in enumerate(routes):
        offsets = [
            position + (index - (len(routes) - 1) / 2) * width for position in range(len(cases))
        ]
        bottom = [0.0] * len(cases)
        for process in ("beta", "alpha", "gateway"):
            heights = [
                measured.get(f"{route}.{case}", {}).get("per_chunk_ms", {}).get(process, 0.0)
                for case in cases
            ]
            if not any(heights):
                continue
            axes.bar(
                offsets, heights, width, bottom=bottom, label=f"{label}: {process}", alpha=0.85
            )
            bottom = [low + high for low, high in zip(bottom, heights, strict=True)]
    axes.set_xticks(range(len(cases)))
    axes.set_xticklabels([_case_label(case) for case in cases])
    axes.set_ylabel("CPU ms per streamed chunk")
    axes.set_title(
        "CPU per chunk of a streamed chat, by route (mock engine, a token a millisecond)"
    )
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize="small")
    return _save(figure, folder / "stream_cpu.png")


def draw_all(document: dict[str, Any], recorded: dict[str, Any], folder: Path) -> list[Path]:
    """Every plot whose samples are present, written into ``folder``."""
    rows = document.get("benchmarks", [])
    drawn = [
        latency(recorded, folder),
        throughput(recorded, folder),
        acquisition(recorded, rows, folder),
        peak_rss(recorded, folder),
        stream_cpu(recorded, folder),
    ]
    return [path for path in drawn if path is not None]

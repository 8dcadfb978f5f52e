"""Engine log files: ``run/SERVICE/ATTEMPT.log`` in the state directory, one per attempt.

The layout is decided here once; the runtimes write where :func:`engine_log_path` says and
the operator's reads (:class:`EngineLogFiles`) find them there.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Final

from ficc.base.ids import parse_id
from ficc.services.ports.runtimes import LogChunk

_SAFE_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def engine_log_path(log_dir: Path, attempt_id: str, service: str | None = None) -> Path:
    """Where the engine of an attempt writes its output: one folder per service."""
    if service is None or not _SAFE_NAME.fullmatch(service):
        return log_dir / f"{attempt_id}.log"
    return log_dir / service / f"{attempt_id}.log"


class EngineLogFiles:
    """Reads the engines' log files, from their end or from an offset, within a byte bound."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir

    async def read(
        self, service_id: str, attempt_id: str, *, after: int | None, lines: int, max_bytes: int
    ) -> LogChunk:
        parse_id("service", service_id, field="service")
        parse_id("attempt", attempt_id, field="attempt")
        path = engine_log_path(self._log_dir, attempt_id, service_id)
        return await asyncio.to_thread(_read, path, after, lines, max_bytes)


def _read(path: Path, after: int | None, lines: int, max_bytes: int) -> LogChunk:
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes) if after is None else min(after, size)
            file.seek(start)
            data = file.read(min(max_bytes, size - start))
    except FileNotFoundError:
        return LogChunk(False, (), 0 if after is None else after, False)
    pieces = _pieces(data)
    if after is None:
        if start > 0 and pieces:  # the first line read is cut at its front: leave it out
            pieces = pieces[1:]
        return LogChunk(True, tuple(_text(p) for p in pieces[-lines:]), start + len(data), False)
    end = start + len(data)
    if end < size and len(pieces) > 1 and not pieces[-1].endswith(b"\n"):
        pieces = pieces[:-1]  # stopped at the bound mid-line: the rest of it comes next
    taken = pieces[:lines]
    end = start + sum(len(p) for p in taken)
    return LogChunk(True, tuple(_text(p) for p in taken), end, end < size)


def _pieces(data: bytes) -> list[bytes]:
    """``data`` cut after each newline; the last piece may be a line still being written."""
    pieces = data.split(b"\n")
    last = pieces.pop()
    whole = [piece + b"\n" for piece in pieces]
    return [*whole, last] if last else whole


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")

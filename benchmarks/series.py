"""The samples behind a module's rows, kept for the plots.

A row holds a percentile or a ratio; a plot needs the distribution or the curve it came from.
A module calls :func:`record` with plain numbers; the runner names a file for each module's
process (``FICC_BENCH_SERIES``) and gathers them into ``series.json`` beside ``latest.json``.
Without that variable (a module run on its own) nothing is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

SERIES_ENV: Final = "FICC_BENCH_SERIES"


def record(name: str, data: dict[str, Any]) -> None:
    """Append one named series (JSON-serialisable numbers and labels) for the plots."""
    target = os.environ.get(SERIES_ENV)
    if not target:
        return
    with Path(target).open("a", encoding="utf-8") as out:
        out.write(json.dumps({"name": name, "data": data}) + "\n")


def read(path: Path) -> dict[str, dict[str, Any]]:
    """The series a module's process recorded, by name (a later one of a name wins)."""
    if not path.exists():
        return {}
    found: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        found[str(item["name"])] = item["data"]
    return found

"""No module of ``src/`` grows past 400 lines: a module that needs more holds more than one
concept, and is split by concept (as the storage ports were: metering's in a module of their
own)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

SOURCE: Final = Path(__file__).parents[3] / "src"
MAX_MODULE_LINES: Final = 400


def test_no_module_of_the_source_is_longer_than_400_lines() -> None:
    long = {
        str(path.relative_to(SOURCE)): lines
        for path in sorted(SOURCE.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long

"""The adversarial suite: each test records what it tried and what held, and the suite prints
those figures at the end (tries, refused, requests served after revocation, slots leaked, peak
memory under the floods)."""

from __future__ import annotations

import pytest

_FIGURES: dict[str, dict[str, int | float | str]] = {}


class Figures:
    """The figures of one test, printed in the suite's summary."""

    def __init__(self, name: str) -> None:
        self._row = _FIGURES.setdefault(name, {})

    def record(self, **values: int | float | str) -> None:
        self._row.update(values)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    return Figures(request.node.nodeid.split("tests/security/", 1)[-1])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("security figures")
    for name, row in sorted(_FIGURES.items()):
        shown = ", ".join(f"{key}={value}" for key, value in row.items())
        terminalreporter.write_line(f"{name}: {shown}")

"""The benchmark harness records the machine it measured on (``make bench`` writes it first)."""

from __future__ import annotations

from benchmarks.__main__ import machine


def test_the_results_name_the_machine_they_were_measured_on() -> None:
    described = machine()
    assert described["cpu_count"] >= 1
    assert described["memory_bytes"] > 0
    assert isinstance(described["gpus"], list)
    assert described["python"].count(".") == 2

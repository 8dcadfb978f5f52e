"""FICC benchmarks: each ``bench_*.py`` module measures FICC beside a baseline in the same run.

A module exposes ``run() -> list[dict]``; each row is a :data:`ROW_KEYS` dict, best made with
:func:`row` so the ratio is computed one way everywhere. ``python -m benchmarks`` runs them and
writes ``benchmarks/results/latest.json``.
"""

from __future__ import annotations

from typing import Any, Final

ROW_KEYS: Final = ("name", "metric", "unit", "value", "baseline", "baseline_value", "ratio")


def row(
    name: str,
    metric: str,
    unit: str,
    value: float,
    baseline: str,
    baseline_value: float,
) -> dict[str, Any]:
    """One result: FICC's ``value`` and the ``baseline`` measured in the same run.

    ``ratio`` is value / baseline_value (null when the baseline is zero); whether higher is
    better depends on the metric, which the name and unit make plain.
    """
    ratio = None if baseline_value == 0 else round(value / baseline_value, 3)
    return {
        "name": name,
        "metric": metric,
        "unit": unit,
        "value": round(value, 3),
        "baseline": baseline,
        "baseline_value": round(baseline_value, 3),
        "ratio": ratio,
    }

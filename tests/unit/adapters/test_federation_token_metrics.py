"""``ficc_federation_tokens_total``: settled tokens by direction, operation and kind, with no
grant label (G12: one exposition serves every scraper)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ficc.adapters import metrics


def _samples() -> dict[tuple[str, str, str], float]:
    found: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        if family.name == "ficc_federation_tokens":
            for sample in family.samples:
                if sample.name == "ficc_federation_tokens_total":
                    labels = sample.labels
                    assert set(labels) == {"direction", "operation", "kind"}
                    key = (labels["direction"], labels["operation"], labels["kind"])
                    found[key] = sample.value
    return found


def test_settled_tokens_are_counted_by_direction_operation_and_kind_without_a_grant() -> None:
    before = _samples()
    metrics.count_federation_tokens("in", "inference.invoke", 12, 30)
    metrics.count_federation_tokens("out", "inference.invoke", 5, 0)
    metrics.count_federation_tokens("in", "made-up.operation", 1, 1)
    after = _samples()

    def added(key: tuple[str, str, str]) -> float:
        return after.get(key, 0) - before.get(key, 0)

    assert added(("in", "inference.invoke", "prompt")) == 12
    assert added(("in", "inference.invoke", "completion")) == 30
    assert added(("out", "inference.invoke", "prompt")) == 5
    assert added(("out", "inference.invoke", "completion")) == 0
    # A peer's made-up operation name takes no series of its own.
    assert added(("in", "other", "prompt")) == 1

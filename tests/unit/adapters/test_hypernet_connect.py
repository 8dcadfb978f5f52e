"""How an endpoint tries a refused connect again."""

from __future__ import annotations

from ficc.adapters.hypernet.endpoint import connect_backoff_seconds


def test_a_refused_connect_is_tried_again_after_a_doubling_pause() -> None:
    pauses = [connect_backoff_seconds(attempt) for attempt in range(7)]
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.6, 1.6, 1.6]

"""What a grantor's last word says is spent: the rule a route skips a target for."""

from __future__ import annotations

from ficc.domain.rate_limit_headers import spent_limit


def _told(remaining: dict[str, object], windows: dict[str, object]) -> dict[str, object]:
    return {"prompt_tokens": 1, "completion_tokens": 1, "remaining": remaining, "windows": windows}


def test_a_budget_at_zero_is_spent_and_one_left_or_unlimited_is_not() -> None:
    free = {"requests_per_minute": None, "tokens_per_minute": None}
    assert spent_limit(_told({"requests": 5, "tokens": 0}, free), 0.0) == "tokens"
    assert spent_limit(_told({"requests": 0, "tokens": None}, free), 0.0) == "requests"
    assert spent_limit(_told({"requests": 5, "tokens": 1}, free), 0.0) is None
    assert spent_limit(_told({"requests": 5, "tokens": None}, free), 0.0) is None


def test_a_window_at_zero_is_spent_until_it_resets() -> None:
    full = {"used": 50, "remaining": 0, "reset_seconds": 20.0}
    windows = {"requests_per_minute": None, "tokens_per_minute": full}
    told = _told({"requests": 5, "tokens": None}, windows)
    assert spent_limit(told, 19.9) == "tokens_per_minute"
    assert spent_limit(told, 20.0) is None
    assert spent_limit(_told({}, {"requests_per_minute": {**full, "remaining": 3}}), 0.0) is None


def test_a_word_without_the_known_fields_says_nothing_is_spent() -> None:
    assert spent_limit({}, 0.0) is None
    assert spent_limit({"remaining": "x", "windows": [1]}, 0.0) is None
    assert spent_limit({"remaining": {"tokens": False}}, 0.0) is None

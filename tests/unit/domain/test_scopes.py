"""Scopes: a non-empty list of known names without repeats; remote scopes are a subset."""

from __future__ import annotations

import pytest

from ficc.base.errors import InvalidInput
from ficc.domain.scopes import LOCAL_SCOPES, REMOTE_SCOPES, parse_scopes


def test_remote_scopes_are_local_scopes_too() -> None:
    assert set(REMOTE_SCOPES) <= set(LOCAL_SCOPES)


def test_known_scopes_parse_into_a_set() -> None:
    assert parse_scopes(["discover", "inference:read"]) == {"discover", "inference:read"}


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ([], "scopes"),
        ("discover", "scopes"),
        (None, "scopes"),
        (["discover", "discover"], "scopes[1]"),
        (["*"], "scopes[0]"),
        (["discover", 3], "scopes[1]"),
    ],
)
def test_malformed_scopes_are_refused_naming_the_entry(values: object, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_scopes(values)
    assert refused.value.details["field"] == field


def test_a_local_only_scope_is_refused_where_remote_scopes_are_asked_for() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_scopes(["tokens:manage"], field="grant.scopes", allowed=REMOTE_SCOPES)
    assert refused.value.details["field"] == "grant.scopes[0]"

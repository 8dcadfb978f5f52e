"""A peer's models.range body: the model ID and the span are checked before anything is read."""

from __future__ import annotations

from typing import Any

import pytest

from ficc.base.errors import InvalidInput
from ficc.domain.transfers import MAX_RANGE_BYTES, RangeRequest, parse_range_request

MODEL = "mdl_" + "a" * 26
GOOD: dict[str, Any] = {"model": MODEL, "file": "m.gguf", "offset": 0, "length": 1, "digest": "d"}


def test_a_good_range_body_is_read_as_is() -> None:
    assert parse_range_request(GOOD) == RangeRequest(MODEL, "m.gguf", 0, 1, "d")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": "mdl_x"}, "body.model"),
        ({"offset": -1}, "body.offset"),
        ({"offset": True}, "body.offset"),
        ({"length": 1.5}, "body.length"),
        ({"length": 0}, "body.length"),
        ({"length": MAX_RANGE_BYTES + 1}, "body.length"),
    ],
)
def test_a_bad_range_body_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_range_request({**GOOD, **change})
    assert refused.value.details["field"] == field

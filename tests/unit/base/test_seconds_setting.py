"""Duration settings from the environment: one reading for every ``FICC_*_SECONDS`` variable."""

from __future__ import annotations

import pytest

from ficc.base.errors import InvalidInput
from ficc.base.units import seconds_setting

VARIABLE = "FICC_SOMETHING_SECONDS"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 5.0), ("", 5.0), (" ", 5.0), ("0.1", 0.1), ("2", 2.0), (" 3600 ", 3600.0)],
)
def test_unset_or_empty_keeps_the_default_and_a_number_in_range_is_taken(
    raw: str | None, expected: float
) -> None:
    env = {} if raw is None else {VARIABLE: raw}
    assert seconds_setting(env, VARIABLE, 5.0) == expected


@pytest.mark.parametrize("raw", ["0", "0.09", "3600.5", "-1", "soon", "nan", "inf"])
def test_anything_else_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(InvalidInput, match=r"from 0\.1 to 3600") as refused:
        seconds_setting({VARIABLE: raw}, VARIABLE, 5.0)
    assert refused.value.details["field"] == VARIABLE

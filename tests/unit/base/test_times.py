"""Stored times have one width, so that their text order is their time order; the API's
form is unchanged (no fraction when there is none)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from ficc.base.times import format_stored_time, format_time, parse_time

moments = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


@given(moments, moments)
def test_stored_times_sort_as_text_in_time_order(a: datetime, b: datetime) -> None:
    assert (format_stored_time(a) < format_stored_time(b)) == (a < b)
    assert len(format_stored_time(a)) == len("2026-11-30T12:00:00.000000Z")


@given(moments)
def test_either_form_reads_back_as_the_same_moment(moment: datetime) -> None:
    assert parse_time(format_stored_time(moment)) == moment
    assert parse_time(format_time(moment)) == moment


def test_the_api_form_keeps_no_fraction_on_a_whole_second_and_the_stored_form_always_does() -> None:
    whole = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    assert format_time(whole) == "2026-11-30T12:00:00Z"
    assert format_stored_time(whole) == "2026-11-30T12:00:00.000000Z"
    assert format_stored_time(whole + timedelta(microseconds=5)) == "2026-11-30T12:00:00.000005Z"
    east = whole.astimezone(timezone(timedelta(hours=2)))
    assert format_stored_time(east) == format_stored_time(whole)
    assert format_stored_time(whole.replace(tzinfo=None)) == format_stored_time(whole)

"""The log configuration itself: the record's fields, the request ID, libraries kept quiet."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from ficc.adapters.logs import configure_logging, current_request_id


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Put the root logger and the libraries' levels back as pytest had them."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in ("httpx", "httpcore")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, saved in levels.items():
        logging.getLogger(name).setLevel(saved)


@pytest.mark.usefixtures("restored_logging")
def test_json_records_carry_the_request_id_and_extra_fields() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream)
    token = current_request_id.set("req-77")
    try:
        logging.getLogger("ficc.test").info("hello %s", "world", extra={"peer": "p1"})
    finally:
        current_request_id.reset(token)
    logging.getLogger("ficc.test").debug("below the level")
    logging.getLogger("httpx").info("HTTP Request: GET http://engine/health")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["message"] == "hello world"
    assert (record["level"], record["logger"]) == ("info", "ficc.test")
    assert (record["request_id"], record["peer"]) == ("req-77", "p1")
    assert record["time"].endswith("Z")


@pytest.mark.usefixtures("restored_logging")
def test_text_records_are_one_line_and_debug_lets_libraries_speak() -> None:
    stream = io.StringIO()
    configure_logging("text", "debug", stream)
    logging.getLogger("httpx").debug("HTTP Request: GET http://engine/health")
    logging.getLogger("ficc.test").warning("careful", extra={"limit": 3})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert " WARNING ficc.test careful limit=3" in lines[1]
    with pytest.raises(ValueError, match="log format"):
        configure_logging("xml", "info", stream)


def test_private_attributes_a_library_stamps_on_records_are_not_logged() -> None:
    stream = io.StringIO()
    configure_logging("text", "info", stream)
    previous = logging.getLogRecordFactory()

    def stamped(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record._library_timestamp_ns = 1  # as Ray's factory does once it is imported
        return record

    logging.setLogRecordFactory(stamped)
    try:
        logging.getLogger("ficc.test").warning("careful", extra={"limit": 3})
    finally:
        logging.setLogRecordFactory(previous)
    assert stream.getvalue().rstrip().endswith(" WARNING ficc.test careful limit=3")

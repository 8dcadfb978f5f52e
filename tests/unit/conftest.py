"""The fast tier's settings of its own: what is alive once the tests are collected is kept out
of the garbage collector's rounds while they run, and ``make unit`` explores each property with
fewer examples (the Hypothesis profile ``fast-tier``) than ``make test`` does.

Importing FastAPI, SQLAlchemy, Pydantic and Hypothesis and collecting the tests leaves about
200,000 objects that live as long as the session. Every full collection during the tier, the
collections pytest makes at the end to surface unraisable exceptions, and the one at exit walked
them all again: about a seventh of the tier's time on two cores. What the tests create is
collected as before; the garbage of the collection phase itself is collected first, so only an
object that was still alive then and later becomes a cycle is left to the process's end.

The properties were about half of the tier's time. ``make unit`` is the loop a change is made
in; ``make test`` runs the same properties with Hypothesis's default of 100 examples each.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from hypothesis import settings

UNIT = Path(__file__).parent

settings.register_profile("fast-tier", max_examples=25)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Only when the session is the fast tier alone (``make unit``), not the whole suite."""
    if all(item.path.is_relative_to(UNIT) for item in session.items):
        gc.collect()
        gc.freeze()

"""The clock services read the time from: injected, so that tests can move it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

Clock = Callable[[], datetime]

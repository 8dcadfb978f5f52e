"""The bytes of unfinished frames one connection may hold, summed over its streams."""

from __future__ import annotations

from ficc.base.errors import LimitExceeded


class ReadBudget:
    """A stream that takes the sum past the limit is refused (its caller resets it), which
    frees its bytes; so a connection holds at most the limit plus one read."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.held_bytes = 0
        self._by_stream: dict[int, int] = {}

    def hold(self, stream_id: int, held_bytes: int) -> None:
        """Record what ``stream_id`` holds now; LimitExceeded when the sum passes the limit."""
        self.held_bytes += held_bytes - self._by_stream.get(stream_id, 0)
        if held_bytes:
            self._by_stream[stream_id] = held_bytes
        else:
            self._by_stream.pop(stream_id, None)
        if self.held_bytes > self.limit_bytes:
            raise LimitExceeded(
                f"unfinished frames on this connection exceed {self.limit_bytes} bytes",
                details={"limit": "buffered_bytes", "max": self.limit_bytes},
            )

    def release(self, stream_id: int) -> None:
        """``stream_id`` holds nothing any more (it ended or was reset)."""
        self.held_bytes -= self._by_stream.pop(stream_id, 0)

"""The caps and deadlines of one connection: what a peer may hold, and for how long.

Before a pairing (generation 0) a peer may hold little; afterwards what its grants need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ficc.base.json_text import GRADUAL_JSON_BYTES
from ficc.base.units import KiB, MiB
from ficc.protocol.frames import LENGTH_BYTES, MAX_FRAME_BYTES

MAX_PEER_STREAMS: Final = 128
"""Incoming bi-streams a paired peer may hold open at once (QUIC's default is 100)."""
MAX_UNPAIRED_STREAMS: Final = 4
"""Incoming request streams at once before a pairing: its operations go one at a time."""
STREAM_CREDIT_MARGIN: Final = 8
"""QUIC stream credit granted past the cap (and past the peer's control stream): a request
stream opened past the cap is reset at once with code 1 rather than the peer's ``open_bi``
waiting for credit."""
MAX_IDLE_STREAMS: Final = 8
"""Answered outgoing streams kept for the next request."""
MAX_REQUESTS_IN_FLIGHT: Final = MAX_PEER_STREAMS - MAX_IDLE_STREAMS - 1
MAX_BUFFERED_BYTES: Final = 32 * MiB
"""Bytes of unfinished frames a paired connection may hold over all its streams."""
MAX_UNPAIRED_BUFFERED_BYTES: Final = 2 * MiB
"""The same before a pairing: two frames of the largest size."""
READ_DEADLINE_SECONDS: Final = 10.0
"""A frame must complete this long after its first bytes, and a request stream must carry its
next request this long after it was opened or last answered; else the stream is reset."""
UNPAIRED_IDLE_SECONDS: Final = 30.0
"""A session without a pairing that carries no request this long is closed."""
SILENT_CONNECTION_SECONDS: Final = 1.0
"""An incoming connection must finish its TLS handshake, and then send the whole first
handshake message, each within this long; else it is dropped and its place freed (G3)."""
MIN_READ_BYTES: Final = 64 * KiB
FRAME_OVERHEAD: Final = 64
"""Read a little past a frame, so a read that completes one also takes the next header."""


@dataclass(frozen=True)
class SessionLimits:
    """The deadlines of a session (the caps are constants; tests shorten only the clocks)."""

    read_deadline_seconds: float = READ_DEADLINE_SECONDS
    unpaired_idle_seconds: float = UNPAIRED_IDLE_SECONDS
    silent_seconds: float = SILENT_CONNECTION_SECONDS

    @property
    def idle_stream_reuse_seconds(self) -> float:
        """An idle stream is reused only this long, well before the peer would reset it."""
        return self.read_deadline_seconds / 2


WRITE_STALL_SECONDS: Final = 30.0
"""A frame the peer does not take within this long resets the stream (the peer stopped
reading: QUIC flow control would block the write for ever while heartbeats keep the
connection up). A peer must so read at least a largest frame, 1 MiB, every 30 s."""
WRITE_PIECE_BYTES: Final = MAX_FRAME_BYTES + LENGTH_BYTES
"""Write progress is counted per piece, each at most a whole frame: every write call into
iroh costs a round of the event loop and of iroh's runtime (about a quarter of a millisecond
measured), so a frame cut into smaller pieces, with its few last bytes alone, slowed a bulk
stream to 0.69x raw iroh; whole frames keep it at about raw iroh's rate."""
OFF_LOOP_JSON_BYTES: Final = GRADUAL_JSON_BYTES
"""JSON larger than this (a request body that followed its request, a gathered answer) is
decoded by the transport in a worker thread, gradually
(:func:`ficc.protocol.canonical.parse_json_object`), so the event loop goes on meanwhile."""
MAX_UNPAIRED_ANSWER_BYTES: Final = 64 * KiB
"""The largest JSON answer a requester takes on a session of no pairing: the pairing
operations answer a few hundred bytes (a receipt about 2 KiB)."""

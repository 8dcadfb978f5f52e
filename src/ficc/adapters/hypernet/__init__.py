"""The HyperNet companion endpoint: thin asyncio glue between iroh and ficc.federation/1.

Nothing above the adapters touches iroh. :class:`HyperNetEndpoint` binds, accepts, runs the
handshake, keeps the registry of peer sessions and implements the ``PeerChannel`` port; each
session moves bytes between iroh streams and a sans-IO
:class:`~ficc.protocol.connection.PeerConnection`, which holds every rule.
"""

from ficc.adapters.hypernet.binding import (
    READ_DEADLINE_VARIABLE,
    UNPAIRED_IDLE_VARIABLE,
    bind_addresses,
    limits_from_environment,
    relay_mode,
)
from ficc.adapters.hypernet.endpoint import HyperNetEndpoint
from ficc.adapters.hypernet.shovel import PeerSession
from ficc.adapters.hypernet.streams import WRITE_STALL_VARIABLE, FrameStream
from ficc.protocol.limits import SessionLimits
from ficc.protocol.sessions import (
    MAX_CONNECTIONS_PER_HYPERNET_ID,
    MAX_HANDSHAKES_IN_PROGRESS,
    MAX_UNPAIRED_SESSIONS,
)

__all__ = [
    "MAX_CONNECTIONS_PER_HYPERNET_ID",
    "MAX_HANDSHAKES_IN_PROGRESS",
    "MAX_UNPAIRED_SESSIONS",
    "READ_DEADLINE_VARIABLE",
    "UNPAIRED_IDLE_VARIABLE",
    "WRITE_STALL_VARIABLE",
    "FrameStream",
    "HyperNetEndpoint",
    "PeerSession",
    "SessionLimits",
    "bind_addresses",
    "limits_from_environment",
    "relay_mode",
]

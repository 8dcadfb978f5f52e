"""What each side is told when a request does not end in its answer, sans-IO.

The serving side tells the requester every refusal and failure of the handler (an engine down
included) by an ``ERROR`` frame; a request its serving side ended (the grant was revoked or
expired) by a frame too, or, when no frame can go out (a write cut off mid-frame, a requester
that stopped reading), by a reset code that names the reason; a failure of the stream's own
reads and writes by a plain reset. The requesting side calls a request that went out but was
not answered unknown, and one that never went out unavailable: certainly nothing happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from ficc.base.errors import FiccError, OutcomeUnknown, PeerUnreachable
from ficc.protocol.messages import Error
from ficc.protocol.stream_states import reset_code

INTERNAL: Error = Error("internal", "the peer failed to handle the request", {})
"""What the requester is told of a handler's bug (the details stay in the serving log)."""


def refusal(exc: Exception) -> Error:
    """The ``ERROR`` frame telling the requester that the handler raised ``exc``."""
    return Error.from_exception(exc) if isinstance(exc, FiccError) else INTERNAL


@dataclass(frozen=True)
class Ending:
    """How to tell the requester its request was ended: ``frame`` if it can still go out
    (empty: none can), else a reset of the sending half with ``code``."""

    frame: Error | None
    code: int


def ending(reason: FiccError, *, torn: bool) -> Ending:
    """The serving side ended a request for ``reason``; ``torn``: a write stopped mid-frame,
    so only a reset may follow."""
    return Ending(None if torn else Error.from_exception(reason), reset_code(reason.code))


def unanswered(operation: str, why: str, *, sent: bool) -> FiccError:
    """A request of ``operation`` that got no answer because of ``why``: unknown once sent
    (the service that built the request names what is in doubt), else unavailable."""
    if not sent:
        return PeerUnreachable(f"the request was not sent: {why}")
    return OutcomeUnknown(f"the outcome of {operation} is unknown: {why}")

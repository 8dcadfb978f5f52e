"""IrohError translated once into FICC's tree (``str(IrohError)`` is empty in iroh 1.2.0)."""

from __future__ import annotations

import re

from iroh import IrohError, IrohErrorKind

from ficc.base.errors import FiccError, PeerUnreachable, ProtocolError


def describe(exc: IrohError) -> str:
    """``KIND: message`` — what to log, since ``str(exc)`` says nothing."""
    try:
        return f"{exc.kind().name}: {exc.message()}"
    except Exception:  # noqa: BLE001 - describing an error must never raise another
        return type(exc).__name__


def translate(exc: IrohError, doing: str) -> FiccError:
    """The FICC error for ``exc`` raised while ``doing`` something; raise it ``from exc``."""
    detail = describe(exc)
    try:
        kind = exc.kind()
    except Exception:  # noqa: BLE001 - an unreadable kind is treated as a transport failure
        kind = None
    if kind is IrohErrorKind.ALPN:
        return ProtocolError(f"{doing}: the peer does not speak ficc.federation/1 ({detail})")
    return PeerUnreachable(f"{doing}: {detail}", details={"transport": detail})


_CLOSED_BY_PEER = re.compile(
    r'ApplicationClosed\(ApplicationClose \{ error_code: (\d+), reason: b"(.*)" \}\)'
)


def peer_close(failure: FiccError) -> tuple[int, str] | None:
    """The code and reason the peer closed the connection with, if ``failure`` (a translated
    transport error) was that close: what a refusal leaves when its error frame lost the race
    with a write of ours."""
    detail = failure.details.get("transport") if isinstance(failure, PeerUnreachable) else None
    found = _CLOSED_BY_PEER.search(detail) if isinstance(detail, str) else None
    if found is None:
        return None
    return int(found.group(1)), found.group(2)

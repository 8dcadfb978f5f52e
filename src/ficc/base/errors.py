"""The one exception tree of FICC.

Every error a caller can see is a :class:`FiccError`; its class tells the caller what to do and
its ``code`` is stable. Foreign errors are translated once, at the boundary that meets them
(``raise ... from exc``). The web layer maps classes to HTTP statuses, the CLI to exit codes::

    FiccError                         internal         (a bug: logged, never shown in detail)
    ├── InvalidInput                  invalid_request  fix the request; the message names the field
    │   └── TooLarge                  too_large        send less
    ├── Unauthenticated               unauthenticated  present a valid credential
    ├── PermissionDenied              forbidden        ask for the scope named in details
    │   ├── CsrfFailed                csrf_failed      send the session's X-CSRF-Token
    │   ├── GrantRevoked              grant_revoked    the grantor withdrew access
    │   └── GrantExpired              grant_expired    the grant's lifetime ended
    ├── NotFound                      not_found        check the ID
    ├── Conflict                      conflict         inspect the current state first
    │   ├── RevisionMismatch          revision_mismatch  re-read, then retry with the new revision
    │   ├── MutationConflict          mutation_conflict  a mutation_id reused with other arguments
    │   └── UnacknowledgedOutcome     unknown_outcome  inspect; start with acknowledge_unknown
    ├── LimitExceeded                 limit_exceeded   wait or ask for more; details name the limit
    ├── Unavailable                   peer_unreachable the other side cannot be reached; try later
    ├── OutcomeUnknown                peer_timeout     inspect, or retry with the same mutation_id
    └── ProtocolError                 protocol_error   the peer broke ficc.federation/1; terminal
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class FiccError(Exception):
    """Base of every error FICC reports to a caller."""

    code: ClassVar[str] = "internal"

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return self.message


class InvalidInput(FiccError):
    """The request is malformed or a value is out of range; the message names the field."""

    code = "invalid_request"

    def __init__(
        self, message: str, *, field: str | None = None, details: Mapping[str, Any] | None = None
    ) -> None:
        merged = dict(details or {})
        if field is not None:
            merged.setdefault("field", field)
        super().__init__(message, details=merged)


class TooLarge(InvalidInput):
    """A body or value is larger than the limit it is checked against."""

    code = "too_large"


class Unauthenticated(FiccError):
    """No credential, or one that is unknown, expired or revoked."""

    code = "unauthenticated"


class PermissionDenied(FiccError):
    """The credential lacks a scope or project admission; details name what is missing."""

    code = "forbidden"


class CsrfFailed(PermissionDenied):
    """A cookie-authenticated unsafe request without the session's CSRF token."""

    code = "csrf_failed"


class GrantRevoked(PermissionDenied):
    """The grant the request travels under was revoked by its grantor."""

    code = "grant_revoked"


class GrantExpired(PermissionDenied):
    """The grant the request travels under reached the end of its lifetime."""

    code = "grant_expired"


class NotFound(FiccError):
    """No such resource, or none visible to this credential."""

    code = "not_found"


class Conflict(FiccError):
    """The resource's current state does not allow the request."""

    code = "conflict"


class RevisionMismatch(Conflict):
    """The request named a revision that is not the current one."""

    code = "revision_mismatch"


class MutationConflict(Conflict):
    """A mutation_id was reused with different arguments."""

    code = "mutation_conflict"


class UnacknowledgedOutcome(Conflict):
    """A start was refused because an earlier attempt's outcome is unknown."""

    code = "unknown_outcome"


class LimitExceeded(FiccError):
    """A limit was reached; ``details["limit"]`` names it."""

    code = "limit_exceeded"


class Unavailable(FiccError):
    """The peer or engine cannot be reached; nothing was done."""

    code = "peer_unreachable"


class OutcomeUnknown(FiccError):
    """The request may or may not have taken effect: inspect, or retry with the same mutation_id.

    Never read this as "failed".
    """

    code = "peer_timeout"

    def __init__(
        self,
        message: str,
        *,
        mutation_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        merged = dict(details or {})
        merged["outcome"] = "unknown"
        if mutation_id is not None:
            merged["mutation_id"] = mutation_id
        super().__init__(message, details=merged)
        self.mutation_id = mutation_id


class ProtocolError(FiccError):
    """The peer broke the wire protocol; the connection is closed."""

    code = "protocol_error"


ERROR_CLASSES: tuple[type[FiccError], ...] = (
    FiccError,
    InvalidInput,
    TooLarge,
    Unauthenticated,
    PermissionDenied,
    CsrfFailed,
    GrantRevoked,
    GrantExpired,
    NotFound,
    Conflict,
    RevisionMismatch,
    MutationConflict,
    UnacknowledgedOutcome,
    LimitExceeded,
    Unavailable,
    OutcomeUnknown,
    ProtocolError,
)

_BY_CODE = {cls.code: cls for cls in ERROR_CLASSES}


def error_from_code(code: str, message: str, details: Mapping[str, Any] | None = None) -> FiccError:
    """Rebuild an error received from another FICC (over the wire or the control socket)."""
    cls = _BY_CODE.get(code, FiccError)
    if cls is OutcomeUnknown:
        mutation_id = (details or {}).get("mutation_id")
        return OutcomeUnknown(
            message,
            mutation_id=mutation_id if isinstance(mutation_id, str) else None,
            details=details,
        )
    return cls(message, details=details)

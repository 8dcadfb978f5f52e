"""The one exception tree of FICC.

Every error a caller can see is a :class:`FiccError`; its class tells the caller what to do, its
``code`` is stable and its ``status`` is the HTTP status it is answered with. Foreign errors are
translated once, at the boundary that meets them (``raise ... from exc``). :func:`render` gives
the error's one body in each shape a caller reads (FICC's envelope, OpenAI's, a stream's error
event); the CLI maps classes to exit codes::

    FiccError                    500 internal          a bug: logged, never shown in detail
    ├── InvalidInput             400 invalid_request   fix the request; the message names the field
    │   ├── TooLarge             413 too_large         send less
    │   ├── ContextLengthExceeded  400 context_length_exceeded  shorten the prompt
    │   └── RuntimeNotInstalled  400 runtime_not_installed  pick a runtime this cluster has
    ├── Unauthenticated          401 unauthenticated   present a valid credential
    ├── PermissionDenied         403 forbidden         ask for the scope named in details
    │   ├── CsrfFailed           403 csrf_failed       send the session's X-CSRF-Token
    │   ├── GrantRevoked         403 grant_revoked     the grantor withdrew access
    │   └── GrantExpired         403 grant_expired     the grant's lifetime ended
    ├── NotFound                 404 not_found         check the ID
    ├── Conflict                 409 conflict          inspect the current state first
    │   ├── RevisionMismatch     409 revision_mismatch  re-read, retry with the new revision
    │   ├── MutationConflict     409 mutation_conflict  a mutation_id reused with other arguments
    │   └── UnacknowledgedOutcome  409 unknown_outcome  inspect; start with acknowledge_unknown
    ├── LimitExceeded            429 limit_exceeded    wait or ask for more; details name the limit
    ├── PeerUnreachable          502 peer_unreachable  the peer cannot be reached; try later
    ├── EngineUnavailable        503 engine_unavailable  the service's engine failed; try later
    ├── NotActive                503 standby           this process is the standby: ask the active
    ├── OutcomeUnknown           504 peer_timeout      inspect, or retry with the same mutation_id
    └── ProtocolError            502 protocol_error    the peer broke ficc.federation/1; terminal

    LocalProtocolError (a RuntimeError, outside the tree)  we tried a move ficc.federation/1 does
                                      not allow: a bug of ours or a stream that already ended,
                                      never the peer's fault and never shown to a caller.

A peer's engine failing behind a reachable peer is ``engine_unavailable`` on both sides of the
wire; ``peer_unreachable`` says only that the peer itself could not be reached.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar


class FiccError(Exception):
    """Base of every error FICC reports to a caller."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return self.message


class InvalidInput(FiccError):
    """The request is malformed or a value is out of range; the message names the field."""

    code = "invalid_request"
    status = 400

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
    status = 413


class ContextLengthExceeded(InvalidInput):
    """The prompt does not fit the model's context (OpenAI's code for it)."""

    code = "context_length_exceeded"


class RuntimeNotInstalled(InvalidInput):
    """The spec names a runtime this cluster has not installed."""

    code = "runtime_not_installed"

    @classmethod
    def of(cls, runtime: str) -> RuntimeNotInstalled:
        """The refusal of a spec naming ``runtime``."""
        return cls(
            f"runtime {runtime} is not installed on this cluster",
            field="spec.runtime",
            details={"runtime": runtime},
        )


class Unauthenticated(FiccError):
    """No credential, or one that is unknown, expired or revoked."""

    code = "unauthenticated"
    status = 401


class PermissionDenied(FiccError):
    """The credential lacks a scope or project admission; details name what is missing."""

    code = "forbidden"
    status = 403


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
    status = 404


class Conflict(FiccError):
    """The resource's current state does not allow the request."""

    code = "conflict"
    status = 409


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
    status = 429


class PeerUnreachable(FiccError):
    """The peer cannot be reached (no connection, no session, no answer before sending); nothing
    was done there. Never raised for an engine behind a reachable peer."""

    code = "peer_unreachable"
    status = 502


class EngineUnavailable(FiccError):
    """A service's engine failed or cannot be reached, on this cluster or a peer's; nothing of
    the request is kept, and asking again later may work."""

    code = "engine_unavailable"
    status = 503


class NotActive(FiccError):
    """This ``ficc serve`` does not hold the active lease (a standby, or a former active that
    lost it): it does nothing, and the active process serves the request."""

    code = "standby"
    status = 503


class OutcomeUnknown(FiccError):
    """The request may or may not have taken effect: inspect, or retry with the same mutation_id.

    Never read this as "failed".
    """

    code = "peer_timeout"
    status = 504

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
    status = 502


ERROR_CLASSES: tuple[type[FiccError], ...] = (
    FiccError,
    InvalidInput,
    TooLarge,
    ContextLengthExceeded,
    RuntimeNotInstalled,
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
    PeerUnreachable,
    EngineUnavailable,
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


class LocalProtocolError(RuntimeError):
    """We tried a move the stream's state does not allow (the peer did nothing wrong).

    Outside :class:`FiccError` on purpose, as h11 keeps its local and remote protocol errors
    apart: the caller of a stream that already ended has nothing to tell anyone.
    """


class ErrorShape(enum.StrEnum):
    """Where an error is shown, each with its one body (see :func:`render`)."""

    FICC = "ficc"
    """FICC's envelope ``{"error": {"code", "message", "details"}}``: the HTTP API, the CLI's
    stderr, a refused mutation's receipt."""
    OPENAI = "openai"
    """OpenAI's ``{"error": {"message", "type", "param", "code"}}``: the compatible URLs."""
    EVENT = "event"
    """A stream's closing error event: OpenAI's shape plus FICC's ``details`` (the limit a
    stream passed, the grant that was revoked), which OpenAI's clients ignore."""


def ficc_envelope(code: str, message: str, details: Mapping[str, Any] | None) -> dict[str, Any]:
    """FICC's envelope, also for the CLI's own codes (``usage_error``, ``no_server``)."""
    return {"error": {"code": code, "message": message, "details": dict(details or {})}}


def openai_type(error: FiccError) -> str:
    """OpenAI's ``type`` for the error's status."""
    if error.status == 401:
        return "authentication_error"
    if error.status == 403:
        return "permission_error"
    return "invalid_request_error" if error.status < 500 else "server_error"


def render(
    error: FiccError, shape: ErrorShape, *, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The error's body in ``shape``; ``details`` adds to the error's own (a request ID)."""
    shown = {**error.details, **(details or {})}
    if shape is ErrorShape.FICC:
        return ficc_envelope(error.code, error.message, shown)
    body: dict[str, Any] = {
        "message": error.message,
        "type": openai_type(error),
        "param": error.details.get("field"),
        "code": error.code,
    }
    if shape is ErrorShape.EVENT:
        body["details"] = shown
    return {"error": body}

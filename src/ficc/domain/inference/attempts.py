"""Replica attempts: one try at running one replica, recorded before it is launched.

The attempt table is what recovery after FICC's own restart reads: an attempt with a recorded
process is fenced and over, a pending one has an unknown outcome a user must acknowledge.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from ficc.base.errors import Conflict, UnacknowledgedOutcome
from ficc.domain.inference.states import ControlAction, ServiceState, Transition, plan_action


class AttemptState(StrEnum):
    """One try at running one replica, recorded before its process is launched (write-ahead).

    ``unknown``: recorded, but FICC stopped before it recorded a launch or a failure, so whether
    a process was started cannot be proved; a user must acknowledge it before the next start.
    """

    PENDING = "pending"
    LAUNCHED = "launched"
    HEALTHY = "healthy"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    ACKNOWLEDGED = "acknowledged"


class AttemptEvent(StrEnum):
    """What happens to an attempt: engine reports, a stop, and FICC's recovery after a restart."""

    LAUNCHED = "launched"  # the process exists; its pid and start time are recorded
    LAUNCH_FAILED = "launch_failed"  # nothing runs: the launch was refused or the process ended
    HEALTHY = "healthy"  # the engine answered its health check
    STOP = "stop"  # FICC asked the process to end
    EXITED = "exited"  # the process ended after FICC asked it to
    CRASHED = "crashed"  # the process ended without being asked to
    RECOVERED = "recovered"  # after a FICC restart: the earlier process was fenced and killed
    LOST = "lost"  # after a FICC restart: the attempt's fate cannot be proved
    ACKNOWLEDGE = "acknowledge"  # a user accepted an unknown outcome


_A = AttemptState

ATTEMPT_TABLE: Final[Mapping[AttemptEvent, Mapping[AttemptState, AttemptState]]] = {
    AttemptEvent.LAUNCHED: {_A.PENDING: _A.LAUNCHED},
    AttemptEvent.LAUNCH_FAILED: {_A.PENDING: _A.FAILED, _A.LAUNCHED: _A.FAILED},
    AttemptEvent.HEALTHY: {_A.LAUNCHED: _A.HEALTHY},
    AttemptEvent.STOP: {_A.LAUNCHED: _A.STOPPING, _A.HEALTHY: _A.STOPPING},
    AttemptEvent.EXITED: {_A.STOPPING: _A.STOPPED},
    AttemptEvent.CRASHED: {
        _A.LAUNCHED: _A.CRASHED,
        _A.HEALTHY: _A.CRASHED,
        _A.STOPPING: _A.STOPPED,
    },
    AttemptEvent.RECOVERED: {
        _A.LAUNCHED: _A.STOPPED,
        _A.HEALTHY: _A.STOPPED,
        _A.STOPPING: _A.STOPPED,
    },
    # Pending: a process may have been started. Launched but not fenced (the runtime could not
    # be reached, or is not installed any more): the process may still run.
    AttemptEvent.LOST: {
        _A.PENDING: _A.UNKNOWN,
        _A.LAUNCHED: _A.UNKNOWN,
        _A.HEALTHY: _A.UNKNOWN,
        _A.STOPPING: _A.UNKNOWN,
    },
    AttemptEvent.ACKNOWLEDGE: {_A.UNKNOWN: _A.ACKNOWLEDGED},
}

ATTEMPT_FINAL_STATES: Final = frozenset(
    {_A.STOPPED, _A.CRASHED, _A.FAILED, _A.UNKNOWN, _A.ACKNOWLEDGED}
)
"""States no engine event leaves; ``unknown`` leaves only by a user's acknowledgement."""


def next_attempt_state(state: AttemptState, event: AttemptEvent) -> AttemptState:
    """The attempt's state after ``event``, or Conflict: a wrong event here is a broken record."""
    table = ATTEMPT_TABLE[event]
    if state not in table:
        raise Conflict(
            f"an attempt in state {state.value} cannot take event {event.value}",
            details={"state": state.value, "event": event.value},
        )
    return table[state]


def recovery_event(state: AttemptState) -> AttemptEvent | None:
    """After a FICC restart: what to record for an attempt found in ``state``.

    An attempt with a recorded process is fenced (killed by pid and start time) and so is
    provably over; a pending one may or may not have started a process: its outcome is unknown.
    """
    if state is _A.PENDING:
        return AttemptEvent.LOST
    if state in {_A.LAUNCHED, _A.HEALTHY, _A.STOPPING}:
        return AttemptEvent.RECOVERED
    return None


def check_start(
    state: ServiceState, attempts: list[AttemptState], *, acknowledge_unknown: bool
) -> Transition:
    """A start is refused while an earlier attempt's outcome is unknown and not acknowledged."""
    transition = plan_action(state, ControlAction.START)
    unknown = sum(1 for attempt in attempts if attempt is _A.UNKNOWN)
    if unknown and not acknowledge_unknown:
        raise UnacknowledgedOutcome(
            f"{unknown} earlier replica attempt(s) of this service have an unknown outcome; "
            "inspect the node, then start with acknowledge_unknown set to true",
            details={"unknown_attempts": unknown},
        )
    return transition

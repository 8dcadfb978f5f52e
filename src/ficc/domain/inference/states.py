"""The service state machine, as two tables: what users ask (control actions) and what engines
report (events), and the desired state an action records.

Every target state comes from these tables: no use case names the state it moves a service to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from ficc.base.errors import Conflict, InvalidInput


class ServiceState(StrEnum):
    """Where a service is; ``failed`` keeps its replicas' exit and log lines for the operator."""

    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    FAILED = "failed"


class ControlAction(StrEnum):
    """What a user (or a peer) asks of a service: the actions of ``control`` and ``replace``.

    Not an operation: that word names a remote operation (``"inference.control"``); an action
    travels in its body's ``operation`` field."""

    START = "start"
    DRAIN = "drain"
    STOP = "stop"
    REMOVE = "remove"
    REPLACE = "replace"


_S = ServiceState

REMOVED: Final = None
"""The target of ``remove``: the record is deleted (its ID is never reused)."""

ACTION_TABLE: Final[Mapping[ControlAction, Mapping[ServiceState, ServiceState | None]]] = {
    # A failed service starts again without an explicit stop: its replicas are gone already.
    ControlAction.START: {_S.STOPPED: _S.STARTING, _S.FAILED: _S.STARTING},
    # Draining lets requests in flight finish and admits no new ones.
    ControlAction.DRAIN: {_S.RUNNING: _S.DRAINING},
    # Stop is immediate from every state and changes nothing when already stopped.
    ControlAction.STOP: {
        _S.STOPPED: _S.STOPPED,
        _S.STARTING: _S.STOPPED,
        _S.RUNNING: _S.STOPPED,
        _S.DRAINING: _S.STOPPED,
        _S.FAILED: _S.STOPPED,
    },
    ControlAction.REMOVE: {_S.STOPPED: REMOVED},
    ControlAction.REPLACE: {_S.STOPPED: _S.STOPPED},
}


@dataclass(frozen=True)
class Transition:
    """An allowed action; ``to_state`` is ``None`` when the service record is deleted."""

    action: ControlAction
    from_state: ServiceState
    to_state: ServiceState | None


def parse_control_action(value: object, *, field: str = "operation") -> ControlAction:
    """Only the actions of the table; ``replace`` travels as its own request, not here."""
    allowed = [op.value for op in ControlAction if op is not ControlAction.REPLACE]
    if value not in allowed:
        raise InvalidInput(
            f"{field} must be one of {', '.join(allowed)}",
            field=field,
            details={"allowed": allowed},
        )
    return ControlAction(value)


def allowed_states(action: ControlAction) -> list[ServiceState]:
    """The states in which ``action`` is allowed, in the order of :class:`ServiceState`."""
    table = ACTION_TABLE[action]
    return [state for state in ServiceState if state in table]


def plan_action(state: ServiceState, action: ControlAction) -> Transition:
    """The transition ``action`` makes from ``state``, or Conflict naming the allowed states."""
    table = ACTION_TABLE[action]
    if state not in table:
        allowed = [s.value for s in allowed_states(action)]
        raise Conflict(
            f"{action.value} is allowed only when the service is {' or '.join(allowed)}; "
            f"it is {state.value}",
            details={"state": state.value, "operation": action.value, "allowed": allowed},
        )
    return Transition(action, state, table[state])


class ServiceEvent(StrEnum):
    """What the engines report about a service's replicas."""

    READY = "ready"  # every replica answers its health check
    LAUNCH_FAILED = "launch_failed"  # a replica could not be launched or never became healthy
    CRASHED = "crashed"  # a replica's process ended without being asked to
    DRAINED = "drained"  # the last request in flight of a draining service ended
    INTERRUPTED = "interrupted"  # FICC restarted under the replicas; they were stopped
    RESTARTING = "restarting"  # a replica ended by itself; its restart policy starts it again


EVENT_TABLE: Final[Mapping[ServiceEvent, Mapping[ServiceState, ServiceState]]] = {
    ServiceEvent.READY: {_S.STARTING: _S.RUNNING},
    ServiceEvent.LAUNCH_FAILED: {_S.STARTING: _S.FAILED},
    ServiceEvent.CRASHED: {_S.STARTING: _S.FAILED, _S.RUNNING: _S.FAILED, _S.DRAINING: _S.FAILED},
    ServiceEvent.DRAINED: {_S.DRAINING: _S.STOPPED},
    # Fenced replicas are provably over: the service is stopped, and started again by its
    # desired state when that is running and no earlier attempt's outcome is unknown.
    ServiceEvent.INTERRUPTED: {
        _S.STARTING: _S.STOPPED,
        _S.RUNNING: _S.STOPPED,
        _S.DRAINING: _S.STOPPED,
    },
    # Starting again holds the service's resources through the backoff: it is still active.
    ServiceEvent.RESTARTING: {_S.STARTING: _S.STARTING, _S.RUNNING: _S.STARTING},
}


def apply_event(state: ServiceState, event: ServiceEvent) -> ServiceState:
    """The state after ``event``; an event the state does not expect is stale and changes nothing.

    Stale events are normal: a health check that ends after the user stopped the service, or a
    crash noticed after the stop that caused it.
    """
    return EVENT_TABLE[event].get(state, state)


def admits_requests(state: ServiceState) -> bool:
    """Only a running service takes new inference requests; draining finishes the old ones."""
    return state is ServiceState.RUNNING


class DesiredState(StrEnum):
    """What the service's owner (or the grant that created it) last asked for, apart from what
    it is: FICC brings a service whose desired state is ``running`` back after its own restart.
    """

    RUNNING = "running"
    STOPPED = "stopped"


DESIRED_AFTER: Final[Mapping[ControlAction, DesiredState]] = {
    ControlAction.START: DesiredState.RUNNING,
    ControlAction.DRAIN: DesiredState.STOPPED,
    ControlAction.STOP: DesiredState.STOPPED,
}
"""The desired state a control action records; ``replace`` and ``remove`` keep it."""


def desired_after(action: ControlAction, desired: DesiredState) -> DesiredState:
    """The desired state once ``action`` is accepted."""
    return DESIRED_AFTER.get(action, desired)

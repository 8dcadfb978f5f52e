"""Heartbeat bookkeeping with a fake clock."""

from __future__ import annotations

import pytest

from ficc.base.errors import ProtocolError
from ficc.protocol.liveness import Liveness
from ficc.protocol.messages import Heartbeat


def test_a_heartbeat_is_due_once_per_interval() -> None:
    live = Liveness(100.0, interval_seconds=1.0, silence_limit_seconds=3.5)
    assert live.due(100.5) is None
    assert live.due(101.0) == Heartbeat(1)
    assert live.due(101.2) is None
    assert live.due(102.0) == Heartbeat(2)


def test_a_silent_peer_is_dead_after_the_limit_and_not_before() -> None:
    live = Liveness(0.0, interval_seconds=1.0, silence_limit_seconds=3.5)
    live.heard(1.0, Heartbeat(1))
    assert not live.is_dead(4.5)
    assert live.is_dead(4.6)


def test_the_next_deadline_is_the_earlier_of_sending_and_giving_up() -> None:
    live = Liveness(0.0, interval_seconds=1.0, silence_limit_seconds=3.5)
    assert live.next_deadline() == 1.0
    live.due(1.0)
    live.due(2.0)
    live.due(3.0)
    assert live.next_deadline() == 3.5


def test_a_heartbeat_out_of_order_is_a_protocol_error() -> None:
    live = Liveness(0.0)
    live.heard(0.5, Heartbeat(1))
    with pytest.raises(ProtocolError):
        live.heard(0.6, Heartbeat(1))

"""The handshake: a golden transcript, every state × event, and every refusal."""

from __future__ import annotations

import itertools

import pytest
from tests.unit.protocol.protocol_support import (
    INITIATOR_ID,
    INITIATOR_KEY,
    INITIATOR_NONCE,
    RESPONDER_ID,
    RESPONDER_KEY,
    RESPONDER_NONCE,
    STRANGER_KEY,
    initiator,
    responder,
    run_handshake,
)

from ficc.base.errors import ProtocolError
from ficc.protocol.handshake import (
    INITIATOR_TABLE,
    RESPONDER_TABLE,
    Event,
    Handshake,
    KnownPeer,
    Role,
    State,
)
from ficc.protocol.messages import (
    Challenge,
    Error,
    Heartbeat,
    Hello,
    Message,
    Proof,
    Request,
    decode_message,
    encode_message,
)

HELLO_I = "017b2268797065726e65745f6964223a22" + "6131" * 32 + "222c2276657273696f6e73223a5b315d7d"
HELLO_R = "017b2268797065726e65745f6964223a22" + "6232" * 32 + "222c2276657273696f6e73223a5b315d7d"
PROOF_I = (
    "030000000000000000"
    "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
    "c391ef618280da13836d02d20e63ff81b0669e14dcae41d2eaef5e0d6ac50975"
    "867ec94c8c94c9c020959fd6e06498b3de7606be637a4c59f4e7cd03fa200e09"
)
PROOF_R = (
    "030000000000000000"
    "29acbae141bccaf0b22e1a94d34d0bc7361e526d0bfe12c89794bc9322966dd7"
    "0ae4cbcd7acf6cef5a688479f5b099b3b8d9486de190ff0eba56b5d0e4878f1e"
    "69a6d7d96807b9b65417fb68962555e84975e10e334477e67a3322369051c903"
)
SESSION_ID = "3d248799be70fac96b144197950158e57f670de55c6611716bc69a5d48b0ea37"


def flight(messages: list[Message]) -> list[str]:
    return [encode_message(m).hex() for m in messages]


def test_a_full_handshake_transcript_matches_its_golden_vector() -> None:
    left, right = initiator(), responder()
    first = left.begin()
    assert flight(first) == [HELLO_I, "02" + "11" * 32]
    second = right.receive(first[0]) + right.receive(first[1])
    assert flight(second) == [HELLO_R, "02" + "22" * 32]
    third = left.receive(second[0]) + left.receive(second[1])
    assert flight(third) == [PROOF_I]
    fourth = right.receive(third[0])
    assert flight(fourth) == [PROOF_R]
    assert left.receive(fourth[0]) == []
    assert left.state is State.ESTABLISHED
    assert right.state is State.ESTABLISHED
    assert left.session.session_id.hex() == SESSION_ID
    assert right.session.session_id.hex() == SESSION_ID


def test_both_sides_learn_the_proven_cluster_keys_and_generation() -> None:
    known_by_i = KnownPeer(RESPONDER_KEY.public_key, 3)
    known_by_r = KnownPeer(INITIATOR_KEY.public_key, 3)
    left, right = initiator(known_by_i), responder(known_by_r)
    run_handshake(left, right)
    assert left.session.remote_cluster_key == RESPONDER_KEY.public_key
    assert right.session.remote_cluster_key == INITIATOR_KEY.public_key
    assert left.session.generation == right.session.generation == 3
    assert left.session.role is Role.INITIATOR
    assert right.session.role is Role.RESPONDER


def test_the_generation_changes_the_session_id() -> None:
    left, right = (
        initiator(KnownPeer(RESPONDER_KEY.public_key, 1)),
        responder(KnownPeer(INITIATOR_KEY.public_key, 1)),
    )
    run_handshake(left, right)
    assert left.session.session_id.hex() != SESSION_ID


def test_a_different_cluster_key_for_a_known_hypernet_id_is_refused() -> None:
    right = responder(KnownPeer(STRANGER_KEY.public_key, 0))
    with pytest.raises(ProtocolError, match="another cluster key"):
        run_handshake(initiator(), right)
    assert right.state is State.FAILED


def test_the_initiator_refuses_a_responder_with_another_cluster_key() -> None:
    left = initiator(KnownPeer(STRANGER_KEY.public_key, 0))
    with pytest.raises(ProtocolError, match="another cluster key"):
        run_handshake(left, responder())
    assert left.state is State.FAILED


def test_a_generation_mismatch_is_refused() -> None:
    left = initiator(KnownPeer(RESPONDER_KEY.public_key, 2))
    right = responder(KnownPeer(INITIATOR_KEY.public_key, 1))
    with pytest.raises(ProtocolError, match="generation"):
        run_handshake(left, right)


def _sessions_of_two_pairings(generation: int) -> tuple[Handshake, Handshake]:
    """Both sides recorded two pairings (two projects of one cluster with another); the
    initiator binds its session to ``generation``."""
    mine = (KnownPeer(RESPONDER_KEY.public_key, 5), KnownPeer(RESPONDER_KEY.public_key, 9))
    theirs = (KnownPeer(INITIATOR_KEY.public_key, 5), KnownPeer(INITIATOR_KEY.public_key, 9))
    left = initiator(known_peers=mine, generation=generation)
    right = responder(known_peers=theirs)
    pending = [(right, m) for m in left.begin()]
    while pending:
        target, message = pending.pop(0)
        other = left if target is right else right
        pending.extend((other, m) for m in target.receive(message))
    return left, right


@pytest.mark.parametrize("generation", [5, 9, 0])
def test_with_several_pairings_the_initiator_chooses_which_one_its_session_is_for(
    generation: int,
) -> None:
    left, right = _sessions_of_two_pairings(generation)
    assert left.session.generation == right.session.generation == generation
    assert left.session.session_id == right.session.session_id


def test_the_generation_an_initiator_names_must_be_one_it_recorded() -> None:
    with pytest.raises(ValueError, match="generation 7"):
        initiator(known_peers=(KnownPeer(RESPONDER_KEY.public_key, 5),), generation=7)


def test_a_responder_refuses_a_generation_it_did_not_record_among_several() -> None:
    left = initiator(KnownPeer(RESPONDER_KEY.public_key, 7))
    right = responder(
        known_peers=(KnownPeer(INITIATOR_KEY.public_key, 5), KnownPeer(INITIATOR_KEY.public_key, 9))
    )
    with pytest.raises(ProtocolError, match="generation mismatch"):
        run_handshake(left, right)
    assert right.state is State.FAILED


def test_generation_zero_from_a_paired_hypernet_id_must_prove_the_recorded_key() -> None:
    right = responder(known_peers=(KnownPeer(STRANGER_KEY.public_key, 5),))
    with pytest.raises(ProtocolError, match="another cluster key"):
        run_handshake(initiator(), right)
    left = initiator(known_peers=(KnownPeer(STRANGER_KEY.public_key, 5),))
    with pytest.raises(ProtocolError, match="another cluster key"):
        run_handshake(left, responder())


def test_a_proof_of_one_pairings_generation_with_another_key_is_refused() -> None:
    """Two pairings recorded under one HyperNet ID with different keys: each generation
    admits only its own key."""
    left = initiator(KnownPeer(RESPONDER_KEY.public_key, 5))
    right = responder(
        known_peers=(KnownPeer(STRANGER_KEY.public_key, 5), KnownPeer(INITIATOR_KEY.public_key, 9))
    )
    with pytest.raises(ProtocolError, match="another cluster key"):
        run_handshake(left, right)


def test_an_unknown_protocol_version_is_refused_with_a_clear_message() -> None:
    right = responder()
    with pytest.raises(ProtocolError, match="unsupported protocol version") as caught:
        right.receive(Hello(INITIATOR_ID, (2, 3)))
    assert caught.value.details == {"supported": [1]}
    error = Error.from_exception(caught.value)
    assert decode_message(encode_message(error)) == error


def test_the_initiator_reports_the_responders_refusal() -> None:
    left = initiator()
    left.begin()
    with pytest.raises(ProtocolError, match="refused the handshake: no"):
        left.receive(Error("protocol_error", "no", {}))


def test_a_responder_choosing_a_version_not_offered_is_refused() -> None:
    left = initiator()
    left.begin()
    with pytest.raises(ProtocolError, match="chose version"):
        left.receive(Hello(RESPONDER_ID, (9,)))


def test_a_hello_claiming_another_hypernet_id_is_refused() -> None:
    with pytest.raises(ProtocolError, match="another HyperNet ID"):
        responder().receive(Hello(RESPONDER_ID, (1,)))


def test_a_reflected_challenge_nonce_is_refused() -> None:
    right = responder()
    right.receive(Hello(INITIATOR_ID, (1,)))
    with pytest.raises(ProtocolError, match="reflected"):
        right.receive(Challenge(RESPONDER_NONCE))


def test_a_replayed_challenge_nonce_is_refused() -> None:
    seen: set[bytes] = set()

    def fresh(nonce: bytes) -> bool:
        if nonce in seen:
            return False
        seen.add(nonce)
        return True

    run_handshake(initiator(), responder(nonce_is_fresh=fresh))
    second = responder(nonce=bytes([0x33] * 32), nonce_is_fresh=fresh)
    with pytest.raises(ProtocolError, match="seen before"):
        run_handshake(initiator(), second)


def test_a_proof_replayed_from_an_earlier_session_is_refused() -> None:
    right = responder(nonce=bytes([0x44] * 32))
    right.receive(Hello(INITIATOR_ID, (1,)))
    right.receive(Challenge(INITIATOR_NONCE))
    with pytest.raises(ProtocolError, match="signature does not verify"):
        right.receive(decode_message(bytes.fromhex(PROOF_I)))


def test_a_proof_signed_by_another_key_is_refused() -> None:
    right = responder()
    right.receive(Hello(INITIATOR_ID, (1,)))
    right.receive(Challenge(INITIATOR_NONCE))
    proof = decode_message(bytes.fromhex(PROOF_I))
    assert isinstance(proof, Proof)
    forged = Proof(proof.generation, STRANGER_KEY.public_key, proof.signature)
    with pytest.raises(ProtocolError, match="signature does not verify"):
        right.receive(forged)


def test_a_responder_proof_reflected_back_as_the_initiators_is_refused() -> None:
    right = responder()
    right.receive(Hello(INITIATOR_ID, (1,)))
    right.receive(Challenge(INITIATOR_NONCE))
    reflected = decode_message(bytes.fromhex(PROOF_R))
    with pytest.raises(ProtocolError, match="signature does not verify"):
        right.receive(reflected)


SAMPLE: dict[Event, Message | None] = {
    Event.BEGIN: None,
    Event.HELLO: Hello(INITIATOR_ID, (1,)),
    Event.CHALLENGE: Challenge(INITIATOR_NONCE),
    Event.PROOF: decode_message(bytes.fromhex(PROOF_I)),
    Event.ERROR: Error("protocol_error", "refused", {}),
    Event.OTHER: Heartbeat(1),
}
RESPONDER_SAMPLE: dict[Event, Message | None] = {
    **SAMPLE,
    Event.HELLO: Hello(RESPONDER_ID, (1,)),
    Event.CHALLENGE: Challenge(RESPONDER_NONCE),
    Event.PROOF: decode_message(bytes.fromhex(PROOF_R)),
}


def machine_in(role: Role, state: State) -> Handshake:
    """A machine driven along the valid transcript to ``state``."""
    left, right = initiator(), responder()
    if role is Role.INITIATOR:
        steps = [
            lambda: None,
            lambda: left.begin(),
            lambda: left.receive(Hello(RESPONDER_ID, (1,))),
            lambda: left.receive(Challenge(RESPONDER_NONCE)),
            lambda: left.receive(decode_message(bytes.fromhex(PROOF_R))),
        ]
        order = [State.START, State.AWAIT_HELLO, State.AWAIT_CHALLENGE, State.AWAIT_PROOF]
        machine = left
    else:
        steps = [
            lambda: None,
            lambda: right.receive(Hello(INITIATOR_ID, (1,))),
            lambda: right.receive(Challenge(INITIATOR_NONCE)),
            lambda: right.receive(decode_message(bytes.fromhex(PROOF_I))),
        ]
        order = [State.AWAIT_HELLO, State.AWAIT_CHALLENGE, State.AWAIT_PROOF]
        machine = right
    if state is State.FAILED:
        with pytest.raises(ProtocolError):
            machine.receive(Heartbeat(1))
        return machine
    target = [*order, State.ESTABLISHED].index(state)
    for step in steps[: target + 1]:
        step()
    assert machine.state is state
    return machine


@pytest.mark.parametrize(
    ("role", "state", "event"),
    [
        combo
        for combo in itertools.product(Role, State, Event)
        if not (combo[0] is Role.RESPONDER and combo[1] is State.START)
    ],
    ids=lambda v: getattr(v, "name", str(v)),
)
def test_every_state_and_event_follows_the_table_or_fails_terminally(
    role: Role, state: State, event: Event
) -> None:
    table = INITIATOR_TABLE if role is Role.INITIATOR else RESPONDER_TABLE
    machine = machine_in(role, state)
    message = (SAMPLE if role is Role.RESPONDER else RESPONDER_SAMPLE)[event]
    entry = table.get((state, event))

    def act() -> list[Message]:
        if event is Event.BEGIN:
            return machine.begin()
        assert message is not None
        return machine.receive(message)

    if entry is None or entry[0] is State.FAILED:
        with pytest.raises(ProtocolError):
            act()
        assert machine.state is State.FAILED
        with pytest.raises(ProtocolError):
            machine.receive(Heartbeat(1))
    else:
        act()
        assert machine.state is entry[0]


def test_the_tables_name_only_known_states_and_events() -> None:
    for table in (INITIATOR_TABLE, RESPONDER_TABLE):
        for (state, event), (next_state, _) in table.items():
            assert state not in (State.ESTABLISHED, State.FAILED)
            assert isinstance(event, Event)
            assert isinstance(next_state, State)


def test_requests_before_the_handshake_ends_are_refused() -> None:
    right = responder()
    with pytest.raises(ProtocolError, match="unexpected other message"):
        right.receive(Request(1, bytes(64), "discover", {}))

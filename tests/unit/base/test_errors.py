"""The error tree: each class's code and status, its one body per shape, the CLI's exit status.

``Unavailable`` meant both a dead peer and a dead engine, the envelope was spelled in seven
places, and the CLI read every error, ``peer_timeout`` included, as "refused".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ficc.base import errors as e
from ficc.cli.exits import EXIT_OUTCOME_UNKNOWN, EXIT_REFUSED, exit_status


def test_a_dead_engine_and_an_unreachable_peer_are_two_classes_with_their_own_codes() -> None:
    engine = e.EngineUnavailable("the engine cannot be reached")
    peer = e.PeerUnreachable("the peer cannot be reached")
    assert (engine.code, engine.status) == ("engine_unavailable", 503)
    assert (peer.code, peer.status) == ("peer_unreachable", 502)
    assert not isinstance(engine, e.PeerUnreachable)
    assert not isinstance(peer, e.EngineUnavailable)


@pytest.mark.parametrize("cls", e.ERROR_CLASSES)
def test_every_code_crosses_the_wire_as_its_own_class(cls: type[e.FiccError]) -> None:
    """A grantor's engine failure is rebuilt by the requester as an engine failure (503), not
    as an unreachable peer."""
    rebuilt = e.error_from_code(cls.code, "said the peer", {"k": 1})
    assert type(rebuilt) is cls
    assert rebuilt.status == cls.status
    assert rebuilt.details["k"] == 1


def test_a_runtime_this_cluster_lacks_is_invalid_input_naming_the_runtime() -> None:
    error = e.RuntimeNotInstalled("runtime vllm is not installed", field="spec.runtime")
    assert isinstance(error, e.InvalidInput)
    assert (error.code, error.status, error.details["field"]) == (
        "runtime_not_installed",
        400,
        "spec.runtime",
    )


def test_one_renderer_gives_each_shape() -> None:
    error = e.ContextLengthExceeded("too long", field="messages", details={"engine_status": 400})
    assert e.render(error, e.ErrorShape.FICC, details={"request_id": "r"}) == {
        "error": {
            "code": "context_length_exceeded",
            "message": "too long",
            "details": {"field": "messages", "engine_status": 400, "request_id": "r"},
        }
    }
    assert e.render(error, e.ErrorShape.OPENAI) == {
        "error": {
            "message": "too long",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    engine = e.render(e.EngineUnavailable("down"), e.ErrorShape.EVENT)["error"]
    assert (engine["type"], engine["code"], engine["param"]) == (
        "server_error",
        "engine_unavailable",
        None,
    )
    assert engine["details"] == {}
    assert e.render(e.GrantRevoked("revoked"), e.ErrorShape.OPENAI)["error"]["type"] == (
        "permission_error"
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (e.OutcomeUnknown("lost", mutation_id="0" * 32), EXIT_OUTCOME_UNKNOWN),
        (e.PeerUnreachable("gone"), EXIT_REFUSED),
        (e.EngineUnavailable("down"), EXIT_REFUSED),
        (e.ProtocolError("broken"), EXIT_REFUSED),
        (e.GrantRevoked("revoked"), EXIT_REFUSED),
        (e.InvalidInput("bad"), EXIT_REFUSED),
        (e.FiccError("bug"), EXIT_REFUSED),
    ],
)
def test_the_cli_exit_status_follows_the_errors_class(error: e.FiccError, status: int) -> None:
    """``peer_timeout`` (outcome unknown) is never read as refused (nothing happened)."""
    assert exit_status(error) == status
    assert exit_status(e.error_from_code(error.code, error.message, error.details)) == status


def test_local_protocol_errors_are_outside_the_tree() -> None:
    """Our own misuse of a stream is a bug, never an error a caller is shown."""
    assert not issubclass(e.LocalProtocolError, e.FiccError)
    assert "LocalProtocolError" in (e.__doc__ or "")


def test_a_command_whose_outcome_is_unknown_exits_5_with_the_envelope_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ficc.cli.exits import handles_errors

    @handles_errors
    def command() -> None:
        raise e.OutcomeUnknown("no answer within 30 s", mutation_id="a" * 32)

    with pytest.raises(SystemExit) as exited:
        command()
    assert exited.value.code == EXIT_OUTCOME_UNKNOWN
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "peer_timeout"
    assert error["details"] == {"outcome": "unknown", "mutation_id": "a" * 32}


@pytest.mark.parametrize(
    "error",
    [
        e.LimitExceeded("too many requests", details={"limit": "requests"}),
        e.InvalidInput("name is required", field="name"),
        e.OutcomeUnknown("no answer", mutation_id="b" * 32),
    ],
)
def test_a_commands_error_and_an_interactive_refusal_print_the_renderers_envelope(
    error: e.FiccError, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI prints what :func:`~ficc.base.errors.render` gives, byte for byte: one body."""
    from ficc.cli.chat import show_refusal
    from ficc.cli.exits import fail

    rendered = json.dumps(e.render(error, e.ErrorShape.FICC)) + "\n"
    with pytest.raises(SystemExit) as exited:
        fail(error)
    assert exited.value.code == exit_status(error)
    assert capsys.readouterr().err == rendered
    show_refusal(error)
    assert capsys.readouterr().err == rendered


NEVER_ON_THE_WIRE = {"unauthenticated", "csrf_failed"}
"""HTTP-only refusals: a peer is authenticated by its session, never by a credential."""


def test_every_code_a_peer_can_be_sent_is_in_the_protocol_document() -> None:
    """A requester written from ``docs/protocol.md`` alone must know ``engine_unavailable``."""
    text = (Path(__file__).parents[3] / "docs" / "protocol.md").read_text()
    section = text[text.index("- Request refusals use FICC's error codes") :]
    section = section[: section.index("\n- ", 3)]
    listed = set(re.findall(r"`([a-z_]+)`", section))
    sent = {cls.code for cls in e.ERROR_CLASSES} - NEVER_ON_THE_WIRE - {"protocol_error"}
    assert sent - listed == set()

"""The README's tours, run exactly as written, so the README cannot drift from the product.

"Serve and call a model" and the federation tour are one shell session: a fresh cluster
serves the example model and answers through `ficc chat` and the openai client; a second
cluster pairs with it and gets answers through `ficc chat --peer` and the federated URL; the
grant is revoked and the next question refused; both servers stop and leave nothing behind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.support.cli import ok
from tests.support.cluster import RunningCluster, ficc
from tests.support.readme import (
    README,
    REPOSITORY,
    chat_replies,
    marked_blocks,
    processes_mentioning,
    run_session,
    session_script,
    unmarked_fences,
)

from ficc.cli.worktree import warn_if_not_ignored

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SECTIONS = ["serve-and-call", "federation", "revoke", "stop"]
SESSION_SECONDS = 240.0


def test_every_shell_block_of_the_tours_is_tested() -> None:
    readme = README.read_text()
    assert [block.section for block in marked_blocks(readme)] == [
        "serve-and-call",
        "serve-and-call",
        "serve-and-call",
        "serve-and-call",
        "federation",
        "federation",
        "federation",
        "revoke",
        "stop",
    ]
    assert unmarked_fences(readme, "## Serve and call a model", "## Around the cluster") == 0


def test_the_make_run_state_directory_is_git_ignored() -> None:
    """`make run` keeps the cluster key and owner token in its state directory, in the checkout."""
    makefile = (REPOSITORY / "Makefile").read_text()
    (default_state_dir,) = re.findall(r"^STATE_DIR \?= (\S+)$", makefile, re.M)
    ignored = (REPOSITORY / ".gitignore").read_text().splitlines()
    assert f"{default_state_dir.rstrip('/')}/" in ignored
    assert not warn_if_not_ignored(REPOSITORY / default_state_dir)


@pytest.mark.parametrize(
    "peer", ["per x", '{\n  "id": "per_x"\n}', "..", "per_x\n"], ids=["space", "json", "dots", "nl"]
)
def test_a_mistyped_peer_is_refused_as_input_not_reported_as_no_server(
    cluster: RunningCluster, peer: str
) -> None:
    """A tour variable captured wrong (a JSON object where an ID belongs, a stray space) is
    the reader's mistake to fix: exit status 1 naming the value, not 3 ("no server") as it was."""
    result = ficc("chat", "--peer", peer, "svc_x", "hi", state_dir=cluster.state_dir)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "invalid_request"
    assert error["details"]["value"] in peer


def test_a_dot_segment_id_reaches_no_other_route(cluster: RunningCluster) -> None:
    """``federation-revoke ../../tokens/ID`` is refused; the token it would reach stays valid."""
    token = ok(cluster.state_dir, "token-create", "--scope", "models:read")
    result = ficc("federation-revoke", f"../../tokens/{token['id']}", state_dir=cluster.state_dir)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stderr)["error"]["code"] == "invalid_request"
    listed = ok(cluster.state_dir, "tokens")["tokens"]
    (still,) = [shown for shown in listed if shown["id"] == token["id"]]
    assert still["revoked_at"] is None
    response = cluster.client(token["token"]).get("/api/v1/models")
    assert response.status_code == 200


def _answer(lines: list[str]) -> str:
    """The last line a section printed: the answer of the OpenAI client that ends it (a JSON
    line there would be some other command's output, not an answer)."""
    assert lines, "the section printed nothing"
    last = lines[-1].strip()
    return "" if last.startswith(("{", "}")) else last


def test_readme_tours_run_as_written_to_a_local_and_a_federated_answer(tmp_path: Path) -> None:
    blocks = marked_blocks(README.read_text())
    assert sorted({block.section for block in blocks}) == sorted(SECTIONS)

    session = run_session(session_script(blocks), tmp_path, SESSION_SECONDS)

    assert session.status == 0, session.report()
    local = session.section("serve-and-call")
    assert [reply.strip() != "" for reply in chat_replies(local)] == [True], session.report()
    # The openai client's answer, then the streamed call's pieces joined on one line.
    (streamed,) = [i for i, line in enumerate(local) if line.startswith("streamed: ")]
    assert local[streamed].removeprefix("streamed: ").strip() != "", session.report()
    assert _answer(local[:streamed]) != "", session.report()

    federated = session.section("federation")
    assert [reply.strip() != "" for reply in chat_replies(federated)] == [True], session.report()
    assert _answer(federated) not in ("", "null"), session.report()
    # Each side names the pairing with its own peer ID, as the README says.
    (peers,) = [line for line in federated if line.startswith("alpha knows beta as ")]
    alpha_names_beta, beta_names_alpha = peers.removeprefix("alpha knows beta as ").split(
        "; beta knows alpha as "
    )
    assert alpha_names_beta.startswith("per_")
    assert beta_names_alpha.startswith("per_")
    assert alpha_names_beta != beta_names_alpha

    # After the revocation the next question is refused, with the code the README names.
    revoke = session.section("revoke")
    assert revoke[-1] == "refused (1)", session.report()
    # Before it, the grant's usage on each side: beta's records, alpha's totals.
    assert revoke[0].startswith("request,operation,service,"), session.report()
    (totals,) = [line for line in revoke if line.startswith('{"')]
    assert json.loads(totals)["requests"] >= 2, session.report()
    assert '"code": "grant_revoked"' in session.stderr, session.report()

    # The stop block stopped both servers and their engines and removed the tour's state.
    assert not session.left_running, session.report()
    assert processes_mentioning(str(tmp_path)) == [], session.report()
    assert not (tmp_path / "tmp" / "ficc-tour").exists()

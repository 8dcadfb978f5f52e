"""A service's engine log, for its operator: the newest attempt's last lines, read on from an
offset to follow it, bounded; only local credentials holding ``inference:read`` read it, in the
contract's error shapes; the console escapes it; a peer is never shown it."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from tests.support.fakes.cluster import fake_cluster
from tests.unit.contracts.test_inference_repositories import CLOCK, a_service
from tests.unit.web.test_console_pages import _render

from ficc.adapters.engine_logs import EngineLogFiles, engine_log_path
from ficc.base.ids import new_id
from ficc.bootstrap import Cluster
from ficc.cli.service_logs import follow_log, printable
from ficc.domain.inference import AttemptState
from ficc.domain.service_records import AttemptRecord
from ficc.services import accounts
from ficc.services.remote.views import peer_view
from ficc.web.app import create_app


@dataclass
class Setup:
    cluster: Cluster
    app: FastAPI
    """One app for every client of a test: building FastAPI's routes is most of a request's
    cost the first time an app answers."""
    api: httpx.AsyncClient
    service: str

    def token_client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),
            base_url="http://127.0.0.1:8470",
            headers={"Authorization": f"Bearer {token}"},
        )

    async def attempt(self, replica: int = 0, text: bytes | None = None) -> str:
        """A new attempt of the service, and its log file as an engine leaves it."""
        attempt_id = new_id("attempt", secrets.token_bytes(16))
        CLOCK.advance(1)
        async with self.cluster.uow_factory() as uow:
            await uow.attempts.add(
                AttemptRecord(
                    attempt_id, self.service, replica, AttemptState.HEALTHY, "serve", CLOCK()
                )
            )
            await uow.commit()
        if text is not None:
            self.log(attempt_id).parent.mkdir(parents=True, exist_ok=True)
            self.log(attempt_id).write_bytes(text)
        return attempt_id

    def log(self, attempt_id: str) -> Path:
        return engine_log_path(self.cluster.state.runtime, attempt_id, self.service)

    async def token(self, *scopes: str) -> str:
        async with self.cluster.uow_factory() as uow:
            owner = await uow.users.owner()
            assert owner is not None
            issued = await accounts.mint_token(
                uow,
                self.cluster.clock,
                user=owner,
                scopes=frozenset(scopes),
                projects=frozenset({"default"}),
                lifetime_seconds=None,
                actor="test",
            )
            await uow.commit()
        return issued.token


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    cluster = await fake_cluster(tmp_path / "state")
    service = await a_service(cluster.uow_factory)
    token = cluster.state.read_owner_token()
    app = create_app(cluster)
    api = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {token}"},
    )
    yield Setup(cluster, app, api, service.id)
    await api.aclose()


def lines(first: int, last: int) -> bytes:
    return b"".join(b"line %d\n" % i for i in range(first, last + 1))


async def test_the_log_gives_the_newest_attempts_last_lines_and_then_what_follows_next(
    setup: Setup,
) -> None:
    path = f"/api/v1/inference/services/{setup.service}/log"
    empty = (await setup.api.get(path)).json()
    assert empty == {
        "service": setup.service,
        "replica": None,
        "attempt": None,
        "latest": None,
        "found": False,
        "lines": [],
        "next": 0,
        "more": False,
    }
    older = await setup.attempt(text=b"old\n")
    newest = await setup.attempt(text=lines(1, 5))
    answer = (await setup.api.get(path, params={"lines": 2})).json()
    assert (answer["attempt"], answer["latest"], answer["replica"]) == (newest, newest, 0)
    assert (answer["lines"], answer["found"], answer["more"]) == (["line 4", "line 5"], True, False)
    assert answer["next"] == len(lines(1, 5))

    with setup.log(newest).open("ab") as log:
        log.write(lines(6, 7) + b"half a li")
    after = {"attempt": newest, "after": answer["next"]}
    followed = (await setup.api.get(path, params={**after, "lines": 1})).json()
    assert (followed["lines"], followed["more"]) == (["line 6"], True)
    rest = (await setup.api.get(path, params={**after, "after": followed["next"]})).json()
    # A line still being written comes as it is; the follower reads on from the file's end.
    assert (rest["lines"], rest["more"]) == (["line 7", "half a li"], False)
    assert rest["next"] == setup.log(newest).stat().st_size

    named = (await setup.api.get(path, params={"attempt": older})).json()
    assert (named["attempt"], named["latest"], named["lines"]) == (older, newest, ["old"])


async def test_a_replica_is_read_apart_and_a_lost_log_reads_as_not_found(setup: Setup) -> None:
    path = f"/api/v1/inference/services/{setup.service}/log"
    first = await setup.attempt(replica=0, text=b"zero\n")
    second = await setup.attempt(replica=1)  # its log is on another machine, or pruned
    zero = (await setup.api.get(path, params={"replica": 0})).json()
    assert (zero["attempt"], zero["latest"], zero["lines"]) == (first, first, ["zero"])
    one = (await setup.api.get(path, params={"replica": 1})).json()
    assert (one["attempt"], one["found"], one["lines"]) == (second, False, [])
    none = (await setup.api.get(path, params={"replica": 2})).json()
    assert (none["attempt"], none["found"]) == (None, False)


async def test_reads_are_bounded_and_end_on_whole_lines(tmp_path: Path) -> None:
    service = new_id("service", secrets.token_bytes(16))
    attempt = new_id("attempt", secrets.token_bytes(16))
    log = engine_log_path(tmp_path, attempt, service)
    log.parent.mkdir()
    log.write_bytes(b"a" * 30 + b"\n" + lines(1, 3))
    files = EngineLogFiles(tmp_path)
    tail = await files.read(service, attempt, after=None, lines=10, max_bytes=16)
    # The bound cuts the first line read at its front: it is left out.
    assert (tail.lines, tail.next) == (("line 2", "line 3"), log.stat().st_size)
    head = await files.read(service, attempt, after=0, lines=10, max_bytes=40)
    assert (head.lines, head.next, head.more) == (("a" * 30, "line 1"), 38, True)
    long_line = await files.read(service, attempt, after=0, lines=10, max_bytes=8)
    assert (long_line.lines, long_line.next, long_line.more) == (("a" * 8,), 8, True)


async def test_only_local_credentials_with_inference_read_read_a_log_in_the_contracts_shapes(
    setup: Setup,
) -> None:
    await setup.attempt(text=b"secret engine text\n")
    path = f"/api/v1/inference/services/{setup.service}/log"
    async with setup.token_client(await setup.token("inference:invoke")) as invoker:
        refused = await invoker.get(path)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert "inference:read" in refused.text
    assert "secret" not in refused.text
    async with setup.token_client("ficc_not_a_token") as stranger:
        assert (await stranger.get(path)).status_code == 401
    async with setup.token_client(await setup.token("inference:read")) as reader:
        assert (await reader.get(path)).json()["lines"] == ["secret engine text"]

    elsewhere = await a_service(setup.cluster.uow_factory, project="other")
    absent = await setup.api.get(f"/api/v1/inference/services/{elsewhere.id}/log")
    assert (absent.status_code, absent.json()["error"]["code"]) == (404, "not_found")
    for query, field in (
        ({"lines": 0}, "lines"),
        ({"lines": 1001}, "lines"),
        ({"after": -1}, "after"),
        ({"replica": -1}, "replica"),
        ({"attempt": "mdl_x"}, "attempt"),
    ):
        bad = await setup.api.get(path, params=query)
        assert bad.status_code == 400, query
        error = bad.json()["error"]
        assert error["code"] == "invalid_request"
        assert field in error["message"], (query, error)
    unknown = new_id("attempt", secrets.token_bytes(16))
    missing = await setup.api.get(path, params={"attempt": unknown})
    assert (missing.status_code, missing.json()["error"]["details"]["attempt"]) == (404, unknown)


def test_the_console_shows_the_log_escaped_and_read_only() -> None:
    service = {
        "id": "svc_1",
        "spec": {"name": "chat", "runtime": "llama.cpp", "model": "mdl_1"},
        "state": "running",
        "error": None,
        "revision": 3,
        "replicas": [{"replica": 0, "state": "running", "attempt": "att_1"}],
    }
    log = {
        "attempt": "att_1",
        "replica": 0,
        "found": True,
        "lines": ["loaded", "<script>alert(1)</script> & more"],
    }
    page = _render("_service.html", path="/ui/p/default/services/svc_1", service=service, log=log)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<script>alert" not in page
    assert "<form" not in page.split('id="log-heading"')[1]


async def test_the_console_service_page_shows_its_newest_log(setup: Setup) -> None:
    await setup.attempt(text=b"loading <model> & co\n")
    page = await setup.api.get(f"/ui/p/default/services/{setup.service}")
    assert page.status_code == 200, page.text
    assert "loading &lt;model&gt; &amp; co" in page.text
    listing = await setup.api.get("/ui/p/default/services")
    assert f'href="/ui/p/default/services/{setup.service}"' in listing.text


async def test_a_peer_is_never_shown_an_engines_log_lines(setup: Setup) -> None:
    attempt = await setup.attempt(text=b"secret engine text\n")
    async with setup.cluster.uow_factory() as uow:
        record = await uow.attempts.get(attempt)
        assert record is not None
        await uow.attempts.update(replace(record, log_tail="secret engine text"))
        await uow.commit()
    owners = await setup.cluster.inference.commands.get_service("default", setup.service)
    assert owners.replicas[0].log_tail == "secret engine text"
    assert "secret" not in json.dumps(peer_view(owners.to_json()))


def test_following_moves_to_a_newer_attempt_and_waits_only_when_nothing_is_left() -> None:
    answers: list[dict[str, Any]] = [
        {"attempt": None, "latest": None, "replica": None, "lines": [], "next": 0, "more": False},
        {
            "attempt": "att_a",
            "latest": "att_a",
            "replica": 0,
            "lines": ["a1"],
            "next": 3,
            "more": True,
        },
        {
            "attempt": "att_a",
            "latest": "att_b",
            "replica": 0,
            "lines": ["a2"],
            "next": 6,
            "more": False,
        },
        {
            "attempt": "att_b",
            "latest": "att_b",
            "replica": 0,
            "lines": ["b1"],
            "next": 3,
            "more": False,
        },
    ]
    asked: list[dict[str, Any]] = []
    shown: list[tuple[str | None, str]] = []
    pauses: list[int] = []

    class Done(Exception):
        pass

    def read(where: dict[str, Any]) -> dict[str, Any]:
        asked.append(dict(where))
        if not answers:
            raise Done
        return answers.pop(0)

    with pytest.raises(Done):
        follow_log(
            read,
            lambda a, line: shown.append((a, line)),
            lambda: pauses.append(1),
            lines=5,
            replica=None,
        )
    assert shown == [("att_a", "a1"), ("att_a", "a2"), ("att_b", "b1")]
    assert asked == [
        {"lines": 5},
        {"lines": 1000},
        {"lines": 1000, "replica": 0, "attempt": "att_a", "after": 3},
        {"lines": 1000, "replica": 0, "attempt": "att_b", "after": 0},
        {"lines": 1000, "replica": 0, "attempt": "att_b", "after": 3},
    ]
    assert len(pauses) == 2  # before asking again with nothing ran, and after att_b's end


def test_lines_are_made_safe_for_a_terminal() -> None:
    assert printable("ok\tfine\x1b[2Jgone\x07") == "ok\tfine\ufffd[2Jgone\ufffd"

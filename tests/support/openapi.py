"""Real answers checked against the OpenAPI document: against its response models (the
pydantic models it is made from), and by a fuzzer that the document drives (Schemathesis)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from tests.support.fakes.inference import OWNER
from tests.support.fakes.peer_channel import open_pair, paired
from tests.support.isolation import add_node, record_model

from ficc.bootstrap import Cluster
from ficc.web import schemas_federation, schemas_responses
from ficc.web.app import create_app
from ficc.web.errors import OPENAI_PATH

API_PREFIX = "/api/v1"


def documented_model(document: dict[str, Any], method: str, path: str, status: int) -> type[Any]:
    """The response model the document names for ``method path`` answering ``status``."""
    operation = document["paths"][path][method.lower()]
    schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
    name = schema["$ref"].rsplit("/", 1)[-1]
    module = schemas_responses if hasattr(schemas_responses, name) else schemas_federation
    model: type[Any] = getattr(module, name)
    return model


def check_answer(document: dict[str, Any], path: str, response: httpx.Response) -> dict[str, Any]:
    """Validate a 2xx answer of the route template ``path`` against its documented model."""
    assert 200 <= response.status_code < 300, response.text
    model = documented_model(document, response.request.method, path, response.status_code)
    body: dict[str, Any] = response.json()
    model.model_validate(body)
    return body


# --- the document driving a fuzzer ------------------------------------------------------------

FUZZ_BASE_URL = "http://127.0.0.1:8470"
"""Where the in-process app is reached: the Host a cluster listening on its default accepts."""

FUZZ_CHECKS: Final = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
"""Schemathesis' checks the fuzzer runs on every answer."""


def api_document() -> dict[str, Any]:
    """The OpenAPI document: it depends on the routes alone, not on a cluster's state."""
    return create_app(cast(Cluster, None)).openapi()


@dataclass(frozen=True)
class FuzzTarget:
    """A requester paired with a grantor, in process, each running one service, and the
    requester's app: every generated request is sent to it as the owner, on its own loop."""

    portal: BlockingPortal
    client: httpx.AsyncClient
    document: dict[str, Any]
    peer: str
    """The requester's peer: the grantor."""
    local_service: str
    remote_service: str
    """The grantor's service, published to the requester by the grant."""

    def aim(self, case: Any) -> None:
        """Point ``case`` at the real service and peer, so that generated bodies reach engines.

        A string ``model`` becomes the service's ID (the grantor's under the federated URL), and
        the federated URL's ``peer_id`` the peer's; any other string is as valid there, so a
        case stays as valid or invalid as it was made. Elsewhere IDs stay as generated: a real
        ID could remove the peer or the service in the middle of the run.
        """
        if OPENAI_PATH.match(case.path) is None:
            return
        remote = "peer_id" in case.path_parameters
        if remote:
            case.path_parameters["peer_id"] = self.peer
        if isinstance(case.body, dict) and isinstance(case.body.get("model"), str):
            case.body["model"] = self.remote_service if remote else self.local_service

    def send(self, case: Any) -> httpx.Response:
        """``case`` (a Schemathesis case), aimed, as one request from the owner."""
        self.aim(case)
        sent = case.as_transport_kwargs(base_url=FUZZ_BASE_URL)
        content = sent.get("data")
        if "json" in sent:
            content = json.dumps(sent["json"]).encode()
        request = self.client.build_request(
            sent["method"],
            sent["url"],
            params=sent.get("params"),
            headers=sent.get("headers"),
            cookies=sent.get("cookies"),
            content=content,
        )
        response: httpx.Response = self.portal.call(self.client.send, request)
        return response


async def _running_service(cluster: Cluster, name: str) -> str:
    """A service of the fake runtime on a node of ``cluster``, started and running."""
    node = await add_node(cluster)
    model = await record_model(cluster, "default", [1024], owned=True)
    spec = {"name": name, "model": model.id, "runtime": "llama.cpp", "node": node.id}
    commands = cluster.inference.commands
    view, _ = await commands.create_service(OWNER, "default", spec)
    view, _ = await commands.control_service(
        OWNER, "default", view["id"], revision=view["revision"], operation="start"
    )
    for _ in range(10_000):
        if await cluster.inference.router.running_services("default"):
            return str(view["id"])
        await asyncio.sleep(0)
    raise AssertionError(f"the service {name} never ran")


@contextlib.asynccontextmanager
async def _fuzzed_pair(root: Path, portal: BlockingPortal) -> AsyncIterator[FuzzTarget]:
    async with open_pair(root) as pair:
        local_service = await _running_service(pair.requester, "local")
        remote_service = await _running_service(pair.grantor, "remote")
        finished = await paired(
            pair,
            {"scopes": ["inference:invoke", "discover"], "services": [remote_service]},
        )
        token = pair.requester.settings.state.read_owner_token()
        app = create_app(pair.requester)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url=FUZZ_BASE_URL,
            headers={"Authorization": f"Bearer {token}"},
        ) as client:
            yield FuzzTarget(
                portal,
                client,
                app.openapi(),
                finished.peer.id,
                local_service,
                remote_service,
            )


@contextlib.contextmanager
def fuzz_target(root: Path) -> Iterator[FuzzTarget]:
    """A :class:`FuzzTarget` served on a loop of its own, for a synchronous fuzzer."""
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(_fuzzed_pair(root, portal)) as target,
    ):
        yield target

"""What a peer may do with the grantor's inference services under a grant.

Each method is a row's handler in the operation table: reads answer a result, mutations check
the body and give back the effect the table runs exactly once, streams yield bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from functools import partial
from typing import Protocol

from ficc.base.canonical import canonical_json
from ficc.base.errors import InvalidInput, LimitExceeded, PermissionDenied
from ficc.base.ids import parse_id
from ficc.base.json_types import JSONObject
from ficc.domain import metering as m
from ficc.domain.grants import MAX_CREATED_SERVICES
from ficc.domain.inference import ServiceSpec, parse_service_spec, uses_local_model
from ficc.domain.operations import invoke_path
from ficc.domain.service_records import PreviewView
from ficc.services import mutations
from ficc.services.inference import Actor, InferenceServices
from ficc.services.metering import Meter, Tab, usage_event
from ficc.services.mutations import MutationKey
from ficc.services.ports import UnitOfWork, UnitOfWorkFactory
from ficc.services.ports.peers import EncodedAnswer
from ficc.services.remote.call import Call, Effect
from ficc.services.remote.views import peer_view, upstream_in_spec


class InferenceOperations:
    """The grantor's inference services as a peer reaches them: its own view, granted IDs."""

    def __init__(
        self, uow_factory: UnitOfWorkFactory, inference: InferenceServices, meter: Meter
    ) -> None:
        self._uow_factory = uow_factory
        self._inference = inference
        self._meter = meter

    async def discover(self, call: Call) -> JSONObject:
        project = call.grant.project
        services = []
        async with self._uow_factory() as uow:
            for service_id in sorted(call.grant.terms.services | call.grant.created_services):
                service = await uow.services.get(service_id)
                if service is not None and service.project == project:
                    services.append(
                        {
                            "id": service.id,
                            "alias": service.spec.name,
                            "state": service.state.value,
                            "capabilities": (
                                ["embeddings"]
                                if service.spec.options.get("embeddings") is True
                                else ["chat.completions", "completions"]
                            ),
                            "model": service.spec.model,
                        }
                    )
        return {
            "services": services,
            "models": sorted(call.grant.terms.models | call.grant.created_models),
            "nodes": sorted(call.grant.terms.nodes),
        }

    async def prepare(self, call: Call) -> JSONObject:
        return await self._inference.admission.prepare(
            call.grant.project,
            model_ids=frozenset(call.grant.terms.models | call.grant.created_models),
            node_ids=frozenset(call.grant.terms.nodes),
        )

    async def preview(self, call: Call) -> PreviewView:
        await self._check_spec(call, call.body["spec"])
        return await self._inference.admission.preview(call.grant.project, call.body["spec"])

    async def get(self, call: Call) -> JSONObject:
        service_id = _service(call)
        found = await self._inference.commands.get_service(call.grant.project, service_id)
        return peer_view(found.to_json())

    async def create(self, call: Call) -> Effect:
        await self._check_spec(call, call.body["spec"])
        grant = call.grant

        async def within_cap(uow: UnitOfWork, _: object) -> None:
            # Every record the grant ever created counts (removing one makes no room), and
            # every creation still uncertain, this request's own among them.
            held = await mutations.count_held(uow, grant.id, "inference.create")
            if held - 1 >= MAX_CREATED_SERVICES:
                raise LimitExceeded(
                    f"a grant can create at most {MAX_CREATED_SERVICES} services",
                    details={"limit": "created_services", "allowed": MAX_CREATED_SERVICES},
                )

        async def effect(key: MutationKey) -> tuple[JSONObject, bool]:
            # The key shows the peer its own view: the answer is the one its receipt keeps.
            return await self._inference.commands.create_service(
                call.actor, grant.project, call.body["spec"], key=key, check=within_cap
            )

        return effect

    async def replace(self, call: Call) -> Effect:
        service_id = _service(call)
        _require_created(call, service_id, "replace")
        spec_data = call.body["spec"]
        spec = await self._check_spec(call, spec_data)
        current = await self._inference.commands.get_service(call.grant.project, service_id)
        if current.spec.runtime is not spec.runtime:
            raise PermissionDenied(
                "body.spec.runtime must stay the service's runtime "
                f"{current.spec.runtime.value}: a peer cannot change it",
                details={"field": "body.spec.runtime", "reason": "runtime_change_refused"},
            )

        change = partial(self._inference.commands.replace_service, spec_data=spec_data)
        return _at_revision(call, service_id, change)

    async def control(self, call: Call) -> Effect:
        service_id = _service(call)
        if call.body["operation"] == "remove":
            _require_created(call, service_id, "remove")

        change = partial(
            self._inference.commands.control_service,
            operation=call.body["operation"],
            acknowledge_unknown=call.body.get("acknowledge_unknown", False),
        )
        return _at_revision(call, service_id, change)

    def _tab(self, call: Call) -> Tab:
        return self._meter.request_tab(
            call.grant, call.operation, call.body, call.body_bytes, call.hold
        )

    async def invoke(self, call: Call) -> EncodedAnswer:
        tab = self._tab(call)
        async with self._meter.metered(tab, lambda: call.slot.reason):
            content = await self._inference.invocations.encoded(
                *_invocation(call), max_bytes=call.grant.terms.response_bytes, tab=tab
            )
            tab.response_bytes = len(content)
            told = await self._meter.settle(tab, m.COMPLETED)
        return EncodedAnswer(content, canonical_json(told))

    async def invoke_stream(self, call: Call) -> AsyncIterator[bytes]:
        tab = self._tab(call)
        async with self._meter.metered(tab, lambda: call.slot.reason):
            async with self._inference.invocations.stream(
                *_invocation(call), max_bytes=call.grant.terms.response_bytes, tab=tab
            ) as chunks:
                async for chunk in chunks:
                    tab.response_bytes += len(chunk)
                    yield chunk
            told = await self._meter.settle(tab, m.COMPLETED)
        # The grantor's counts, the stream's last event (a requester takes it off).
        yield usage_event(told)

    async def _check_spec(self, call: Call, spec_data: object) -> ServiceSpec:
        """The spec a peer sends: granted model and node, and never an upstream URL.

        An ``openai`` service makes this cluster send requests, and its users' prompts, to a
        URL: a peer choosing it would reach the grantor's network (SSRF) or capture prompts.
        """
        refused = upstream_in_spec(spec_data)
        if refused is not None:
            raise PermissionDenied(
                f"{refused} is refused: a peer cannot point a service at a URL",
                details={"field": refused, "reason": "upstream_refused"},
            )
        spec = parse_service_spec(spec_data)
        if uses_local_model(spec.runtime):
            call.require("models", spec.model, "body.spec.model")
        node = spec.node
        if node is None:
            async with self._uow_factory() as uow:
                local = [n.id for n in await uow.nodes.list() if n.is_local]
            node = local[0] if local else None
        if node is None or not call.grant.covers("nodes", node):
            raise PermissionDenied(
                "body.spec.node must be a node the grant includes",
                details={"field": "body.spec.node", "reason": "resource_not_granted"},
            )
        return spec


def _invocation(call: Call) -> tuple[str, str, str, JSONObject]:
    """What an ``inference.invoke`` invokes: the grant's project, the granted service, the
    engine path and the OpenAI body."""
    service_id = _service(call)
    path = invoke_path(call.body["path"])
    inner = call.body["body"]
    if not isinstance(inner, dict):
        raise InvalidInput("body.body must be a JSON object", field="body.body")
    return call.grant.project, service_id, path, inner


class _ServiceChange(Protocol):
    """A command that changes one service at the revision its caller read."""

    def __call__(
        self, actor: Actor, project: str, service_id: str, *, revision: object, key: MutationKey
    ) -> Awaitable[tuple[JSONObject, bool]]: ...


def _at_revision(call: Call, service_id: str, change: _ServiceChange) -> Effect:
    """The effect of a peer's change to one of the grant's services, at the revision its
    body names, as the peer acting under the grant."""

    async def effect(key: MutationKey) -> tuple[JSONObject, bool]:
        return await change(
            call.actor, call.grant.project, service_id, revision=call.body["revision"], key=key
        )

    return effect


def _service(call: Call) -> str:
    service_id = parse_id("service", call.body.get("service"), field="body.service")
    call.require("services", service_id, "body.service")
    return service_id


def _require_created(call: Call, service_id: str, operation: str) -> None:
    """Replace and remove only what the grant created: a granted service is the grantor's own,
    used by its local users; a peer re-specifying it could take their requests."""
    if service_id not in call.grant.created_services:
        raise PermissionDenied(
            f"{operation} is allowed only on services this grant created; "
            f"{service_id} was granted, not created",
            details={"field": "body.service", "reason": "service_not_created_by_grant"},
        )

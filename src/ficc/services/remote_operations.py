"""Remote operations under a grant: the requester's side and the grantor's side.

The grantor checks every request, in this order, before any effect: the session's proven
identity is the grant's peer at the pairing's generation; the grant is active and not expired;
the operation's scope is in the grant; the mutation_id rule; ``request_bytes``; a
``concurrent`` slot (held until the answer or stream ends, on every exit path); the
``requests`` allowance (charged at admission); then every resource ID named in the body.

Mutations are exactly-once: an *uncertain* receipt is committed before the effect; the effect
and the completed receipt commit together. A retry with the same mutation_id and arguments
replays the result; other arguments are a conflict. IDs of created records derive from the
mutation, so a retry after a crash finds what the first try made instead of making another.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from ficc.base.errors import (
    Conflict,
    FiccError,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    TooLarge,
    error_from_code,
)
from ficc.base.ids import parse_id
from ficc.base.times import with_times_formatted
from ficc.domain import grants as g
from ficc.domain import peers as p
from ficc.domain.inference import RuntimeName, ServiceSpec, parse_service_spec, uses_local_model
from ficc.domain.manifests import parse_manifest
from ficc.domain.openai_requests import check_capabilities, engine_body, shape_answer
from ficc.domain.openai_requests import check_request as check_openai_request
from ficc.domain.operations import (
    check_mutation_id,
    check_scope,
    invoke_path,
    only_fields,
    parse_body,
    parse_operation_name,
)
from ficc.domain.principals import Principal
from ficc.domain.receipts import b64
from ficc.protocol.frames import MAX_FRAME_BYTES
from ficc.services import mutations
from ficc.services.catalogue import create_model_record, remove_model_record
from ficc.services.federation import Federation, grant_scope
from ficc.services.grant_slots import Slot
from ficc.services.inference import Actor, InferenceServices
from ficc.services.mutations import MutationKey
from ficc.services.peer_channel import PeerIdentity, RequestResult
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory

log = logging.getLogger("ficc.remote")

WIRE_OPERATION: Final = "grant.request"
REQUEST_TIMEOUT_SECONDS: Final = 30.0
INVOKE_TIMEOUT_SECONDS: Final = 300.0
MAX_WIRE_REQUEST_BYTES: Final = MAX_FRAME_BYTES - 64 * 1024
"""A request, its signature and framing fit in one frame of ficc.federation/1."""
REFUSED: Final = "refused"
"""A mutation receipt whose effect was refused: certain that nothing happened."""
DEFINITE_REFUSALS: Final = (InvalidInput, PermissionDenied, NotFound, Conflict, LimitExceeded)
"""Errors an effect raises before it commits anything (never a lost peer or an unknown)."""


@dataclass(frozen=True)
class Call:
    """One admitted request: who, under which grant, what, and the slot it holds."""

    identity: PeerIdentity
    peer: p.Peer
    grant: g.Grant
    operation: str
    body: dict[str, Any]
    mutation_id: str | None
    slot: Slot

    @property
    def actor(self) -> Actor:
        return Actor(
            name=f"peer:{self.peer.id}",
            grant_id=self.grant.id,
            peer_hypernet_id=self.identity.hypernet_id,
            peer_cluster_key=b64(self.identity.cluster_key),
        )

    def key(self) -> MutationKey:
        assert self.mutation_id is not None
        return MutationKey.of(
            grant_scope(self.grant.id), self.mutation_id, self.operation, self.body
        )

    def require(self, kind: str, resource_id: str, field: str) -> None:
        """Every resource ID named in the body must be in the grant (or created by it)."""
        if not self.grant.covers(kind, resource_id):
            raise PermissionDenied(
                f"{field} names {resource_id}, which the grant does not include",
                details={"field": field, "reason": "resource_not_granted"},
            )


Handler = Callable[[Call], Awaitable[dict[str, Any]]]


def is_streaming(operation: str, body: dict[str, Any]) -> bool:
    """Operations answered with a stream: ranges, and invocations that ask to stream."""
    if operation == "models.range":
        return True
    inner = body.get("body")
    return (
        operation == "inference.invoke" and isinstance(inner, dict) and inner.get("stream") is True
    )


class RemoteOperations:
    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        federation: Federation,
        inference: InferenceServices,
    ) -> None:
        self._uow_factory = uow_factory
        self._clock = clock
        self._federation = federation
        self._inference = inference
        self._fixed: dict[str, tuple[g.Grant, str]] = {}
        self._handlers: dict[str, Handler] = {
            "discover": self._discover,
            "inference.prepare": self._prepare,
            "inference.preview": self._preview,
            "inference.get": self._get,
            "inference.create": self._create,
            "inference.replace": self._replace,
            "inference.control": self._control,
            "inference.invoke": self._invoke,
            "models.manifest": self._manifest,
            "models.create": self._model_create,
            "models.remove": self._model_remove,
            "resources": self._resources,
            "operation.status": self._status,
        }
        self._streams: dict[str, Callable[[Call], AsyncIterator[bytes]]] = {
            "inference.invoke": self._invoke_stream,
        }
        federation.register(WIRE_OPERATION, self.serve)

    def add_handler(self, operation: str, handler: Handler) -> None:
        self._handlers[operation] = handler

    def add_stream(self, operation: str, handler: Callable[[Call], AsyncIterator[bytes]]) -> None:
        self._streams[operation] = handler

    # --- the grantor's side -------------------------------------------------------------------

    async def serve(self, identity: PeerIdentity, wire: dict[str, Any]) -> RequestResult:
        operation = parse_operation_name(wire.get("operation"))
        body = parse_body(wire.get("body", {}))
        streaming = operation in self._streams and is_streaming(operation, body)
        if streaming:
            return self._serve_stream(identity, wire, operation, body)
        async with self._admitted(identity, wire, operation, body) as call:
            handler = self._handlers.get(operation)
            if handler is None:
                raise InvalidInput(f"{operation} is not served here", field="operation")
            if call.mutation_id is not None:
                # A retry is answered from its receipt before the body's IDs are checked: a
                # service or model the first try removed is no longer in the grant.
                async with self._uow_factory() as uow:
                    done = await self._retained(uow, call.key())
                if done is not None:
                    return {"replayed": True, "result": done}
            return await call.slot.race(handler(call))

    async def _serve_stream(
        self, identity: PeerIdentity, wire: dict[str, Any], operation: str, body: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        async with (
            self._admitted(identity, wire, operation, body) as call,
            contextlib.aclosing(call.slot.guard(self._streams[operation](call))) as chunks,
        ):
            # Closed on every exit (``async for`` alone leaves an abandoned iterator open).
            async for chunk in chunks:
                yield chunk

    @contextlib.asynccontextmanager
    async def _admitted(
        self, identity: PeerIdentity, wire: dict[str, Any], operation: str, body: dict[str, Any]
    ) -> AsyncIterator[Call]:
        grant_id = parse_id("grant", wire.get("grant"), field="grant")
        now = self._clock()
        if await self._federation.lookup(identity.hypernet_id) is None:
            # Not paired at all: refuse before saying anything about the grant.
            raise PermissionDenied(
                "this cluster has no pairing with the requesting peer at this generation",
                details={"reason": "not_paired"},
            )
        # Ownership first: another peer's grant is answered like one that does not exist,
        # before its scopes, sizes or slots are looked at.
        fixed = await self._fixed_terms(grant_id, identity)
        check_scope(operation, fixed.terms.scopes)
        mutation_id = check_mutation_id(operation, wire.get("mutation_id"))
        size = len(json.dumps(body, separators=(",", ":")).encode())
        if size > fixed.terms.request_bytes:
            raise TooLarge(
                f"the request body is {size} bytes; the grant allows {fixed.terms.request_bytes}",
                details={"limit": "request_bytes", "allowed": fixed.terms.request_bytes},
            )
        async with self._federation.slots.slot(
            grant_id, fixed.terms.concurrent, fixed.expires_at, now
        ) as slot:
            # One transaction proves the peer, charges the request and reads the grant's state.
            # The charge is one conditional UPDATE (the check and the charge at once); made
            # first, it holds the grant's row until commit, so concurrent admissions (at once
            # on PostgreSQL) each see the others' charges; a refusal rolls it back.
            async with self._uow_factory() as uow:
                peer = await self._federation.paired_peer(uow, identity)
                charged = await uow.grants.charge_request(grant_id, requests=fixed.terms.requests)
                current = await uow.grants.get(grant_id)
                if current is None or current.peer_id != peer.id:
                    raise _no_grant(grant_id)
                state = current.state_at(now)
                if state in (g.REVOKED, g.RETIRED):
                    raise GrantRevoked("the grant was revoked", details={"grant": grant_id})
                if state == g.EXPIRED:
                    raise GrantExpired("the grant expired", details={"grant": grant_id})
                if not charged:
                    raise LimitExceeded(
                        f"the grant's {current.terms.requests} requests are used up",
                        details={"limit": "requests", "allowed": current.terms.requests},
                    )
                await uow.commit()
            yield Call(identity, peer, current, operation, body, mutation_id, slot)

    async def _fixed_terms(self, grant_id: str, identity: PeerIdentity) -> g.Grant:
        """The grant's terms, if the grant is the calling peer's; else not found.

        A grant's terms, peer and expiry never change: they are read once and kept, with the
        HyperNet ID of the peer it was given to.
        """
        known = self._fixed.get(grant_id)
        if known is None:
            async with self._uow_factory() as uow:
                grant = await uow.grants.get(grant_id)
                holder = None if grant is None else await uow.peers.get(grant.peer_id)
            if grant is None or holder is None:
                raise _no_grant(grant_id)
            known = (grant, holder.hypernet_id)
            self._fixed[grant_id] = known
        grant, holder_hypernet_id = known
        if holder_hypernet_id != identity.hypernet_id:
            raise _no_grant(grant_id)
        return grant

    async def _once(
        self, call: Call, effect: Callable[[MutationKey], Awaitable[tuple[dict[str, Any], bool]]]
    ) -> dict[str, Any]:
        """Record uncertainty, then run the effect (which completes the receipt with itself)."""
        key = call.key()
        async with self._uow_factory() as uow:
            done = await self._retained(uow, key)
            if done is not None:
                return {"replayed": True, "result": done}
            await mutations.record(uow, self._clock, key, state=mutations.UNCERTAIN, result=None)
            await uow.commit()
        try:
            result, replayed = await effect(key)
        except DEFINITE_REFUSALS as exc:
            # The effect's transaction rolled back: nothing happened, and that is certain.
            await self._record_refusal(key, exc)
            raise
        return {"replayed": replayed, "result": result}

    @staticmethod
    async def _retained(uow: UnitOfWork, key: MutationKey) -> dict[str, Any] | None:
        """The result an earlier try retained; its refusal again; or a conflict."""
        earlier = await uow.receipts.get(key.scope, key.mutation_id)
        if (
            earlier is not None
            and earlier.state == REFUSED
            and (earlier.operation, earlier.arguments_sha256)
            == (key.operation, key.arguments_sha256)
        ):
            raise _refusal(earlier.result)
        done = await mutations.replay(uow, key)
        # A service's receipt holds the owner's view; a replay shows the peer's, like the first.
        return peer_view(done) if done is not None and "spec" in done else done

    async def _record_refusal(self, key: MutationKey, error: FiccError) -> None:
        """Complete an uncertain receipt as refused, so it keeps no capacity and no doubt."""
        async with self._uow_factory() as uow:
            receipt = await uow.receipts.get(key.scope, key.mutation_id)
            if receipt is None or receipt.state != mutations.UNCERTAIN:
                return
            refusal = {
                "error": {"code": error.code, "message": error.message, "details": error.details}
            }
            await mutations.record(uow, self._clock, key, state=REFUSED, result=refusal)
            await uow.commit()

    # --- operations -------------------------------------------------------------------------

    async def _discover(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, set(), set())
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
            "replayed": False,
            "result": {
                "services": services,
                "models": sorted(call.grant.terms.models | call.grant.created_models),
                "nodes": sorted(call.grant.terms.nodes),
            },
        }

    async def _prepare(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, set(), set())
        result = await self._inference.prepare(
            call.grant.project,
            model_ids=frozenset(call.grant.terms.models | call.grant.created_models),
            node_ids=frozenset(call.grant.terms.nodes),
        )
        return {"replayed": False, "result": result}

    async def _check_spec(self, call: Call, spec_data: object) -> ServiceSpec:
        """The spec a peer sends: granted model and node, and never an upstream URL.

        An ``openai`` service makes this cluster send requests, and its users' prompts, to a
        URL: a peer choosing it would reach the grantor's network (SSRF) or capture prompts.
        """
        refused = _upstream_in_spec(spec_data)
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

    async def _preview(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"spec"}, {"spec"})
        await self._check_spec(call, call.body["spec"])
        result = await self._inference.preview(call.grant.project, call.body["spec"])
        return {"replayed": False, "result": result}

    async def _service(self, call: Call) -> str:
        service_id = parse_id("service", call.body.get("service"), field="body.service")
        call.require("services", service_id, "body.service")
        return service_id

    async def _get(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"service"}, {"service"})
        service_id = await self._service(call)
        view = await self._inference.get_service(call.grant.project, service_id)
        return {"replayed": False, "result": peer_view(view)}

    async def _create(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"spec"}, {"spec"})
        await self._check_spec(call, call.body["spec"])
        grant = call.grant

        async def within_cap(uow: UnitOfWork, _: object) -> None:
            created = await uow.services.count_created_by(grant.id)
            uncertain = await uow.receipts.count(
                grant_scope(grant.id), "inference.create", mutations.UNCERTAIN
            )
            # This request's own uncertain receipt is among them.
            if created + uncertain - 1 >= g.MAX_CREATED_SERVICES:
                raise LimitExceeded(
                    f"a grant can create at most {g.MAX_CREATED_SERVICES} services",
                    details={"limit": "created_services", "allowed": g.MAX_CREATED_SERVICES},
                )

        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            view, replayed = await self._inference.create_service(
                call.actor, grant.project, call.body["spec"], key=key, check=within_cap
            )
            return peer_view(view), replayed

        return await self._once(call, effect)

    async def _replace(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"service", "revision", "spec"}, {"service", "revision", "spec"})
        service_id = await self._service(call)
        _require_created(call, service_id, "replace")
        spec = await self._check_spec(call, call.body["spec"])
        current = await self._inference.get_service(call.grant.project, service_id)
        if current["spec"]["runtime"] != spec.runtime.value:
            raise PermissionDenied(
                "body.spec.runtime must stay the service's runtime "
                f"{current['spec']['runtime']}: a peer cannot change it",
                details={"field": "body.spec.runtime", "reason": "runtime_change_refused"},
            )

        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            view, replayed = await self._inference.replace_service(
                call.actor,
                call.grant.project,
                service_id,
                revision=call.body["revision"],
                spec_data=call.body["spec"],
                key=key,
            )
            return peer_view(view), replayed

        return await self._once(call, effect)

    async def _control(self, call: Call) -> dict[str, Any]:
        only_fields(
            call.body,
            {"service", "revision", "operation", "acknowledge_unknown"},
            {"service", "revision", "operation"},
        )
        service_id = await self._service(call)
        if call.body["operation"] == "remove":
            _require_created(call, service_id, "remove")

        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            view, replayed = await self._inference.control_service(
                call.actor,
                call.grant.project,
                service_id,
                revision=call.body["revision"],
                operation=call.body["operation"],
                acknowledge_unknown=call.body.get("acknowledge_unknown", False),
                key=key,
            )
            return (peer_view(view) if "spec" in view else view), replayed

        return await self._once(call, effect)

    async def _invoke_args(self, call: Call) -> tuple[str, str, dict[str, Any], RuntimeName]:
        only_fields(call.body, {"service", "path", "body"}, {"service", "path", "body"})
        service_id = parse_id("service", call.body.get("service"), field="body.service")
        call.require("services", service_id, "body.service")
        path = invoke_path(call.body["path"])
        inner = call.body["body"]
        if not isinstance(inner, dict):
            raise InvalidInput("body.body must be a JSON object", field="body.body")
        # A hostile peer's body is checked as the compatible URLs check their callers'.
        check_openai_request(path, inner)
        spec = (await self._inference.get_service(call.grant.project, service_id))["spec"]
        runtime = RuntimeName(spec["runtime"])
        check_capabilities(runtime, spec.get("options") or {}, path, inner)
        return service_id, path, inner, runtime

    async def _invoke(self, call: Call) -> dict[str, Any]:
        service_id, path, inner, runtime = await self._invoke_args(call)
        # The text is counted while it arrives: an answer whose text alone passes
        # response_bytes stops the engine at once instead of being held whole, then refused.
        answer = await self._inference.complete(
            call.grant.project,
            service_id,
            path,
            engine_body(runtime, path, inner),
            max_bytes=call.grant.terms.response_bytes,
        )
        answer = shape_answer(runtime, path, inner, answer)
        # Encoded as the caller's compatible URL will send it, so the limit counts those bytes.
        size = len(json.dumps(answer, separators=(",", ":")).encode())
        if size > call.grant.terms.response_bytes:
            raise LimitExceeded(
                f"the response is {size} bytes; the grant allows {call.grant.terms.response_bytes}",
                details={"limit": "response_bytes", "allowed": call.grant.terms.response_bytes},
            )
        return {"replayed": False, "result": answer}

    async def _invoke_stream(self, call: Call) -> AsyncIterator[bytes]:
        service_id, path, inner, runtime = await self._invoke_args(call)
        limit = call.grant.terms.response_bytes
        sent = 0
        inner = engine_body(runtime, path, inner)
        async with self._inference.stream(call.grant.project, service_id, path, inner) as events:
            async for event in events:
                chunk = b"data: " + event.data.encode() + b"\n\n"
                if sent + len(chunk) > limit:
                    yield error_event(
                        LimitExceeded(
                            f"the response would pass the grant's {limit} response bytes",
                            details={"limit": "response_bytes", "allowed": limit},
                        )
                    )
                    return
                sent += len(chunk)
                yield chunk

    async def _manifest(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"model"}, {"model"})
        model_id = parse_id("model", call.body.get("model"), field="body.model")
        call.require("models", model_id, "body.model")
        async with self._uow_factory() as uow:
            model = await uow.models.get(model_id)
        if model is None or model.project != call.grant.project:
            raise NotFound(f"no model {model_id}", details={"model": model_id})
        return {
            "replayed": False,
            "result": {"model": model.id, "manifest": model.manifest, "sha256": model.sha256},
        }

    async def _model_create(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"manifest"}, {"manifest"})
        manifest = parse_manifest(call.body["manifest"], field="body.manifest")
        grant = call.grant

        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            return await create_model_record(
                self._uow_factory,
                self._clock,
                grant.project,
                manifest,
                key=key,
                created_by_grant=grant.id,
                actor=call.actor.name,
                peer=(call.identity.hypernet_id, b64(call.identity.cluster_key)),
                max_created=g.MAX_CREATED_MODELS,
            )

        return await self._once(call, effect)

    async def _model_remove(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"model"}, {"model"})
        model_id = parse_id("model", call.body.get("model"), field="body.model")
        call.require("models", model_id, "body.model")

        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            return await remove_model_record(
                self._uow_factory,
                self._clock,
                call.grant.project,
                model_id,
                key=key,
                actor=call.actor.name,
                peer=(call.identity.hypernet_id, b64(call.identity.cluster_key)),
            )

        return await self._once(call, effect)

    async def _resources(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, set(), set())
        async with self._uow_factory() as uow:
            nodes = [n for n in await uow.nodes.list() if n.id in call.grant.terms.nodes]
        return {
            "replayed": False,
            "result": {"nodes": [with_times_formatted(node.as_json()) for node in nodes]},
        }

    async def _status(self, call: Call) -> dict[str, Any]:
        only_fields(call.body, {"id"}, {"id"})
        mutation_id = check_mutation_id("inference.create", call.body.get("id"))
        assert mutation_id is not None
        async with self._uow_factory() as uow:
            receipt = await uow.receipts.get(grant_scope(call.grant.id), mutation_id)
        if receipt is None:
            raise NotFound(
                f"no operation {mutation_id} under this grant", details={"id": mutation_id}
            )
        return {
            "replayed": False,
            "result": {
                "id": receipt.mutation_id,
                "operation": receipt.operation,
                "state": receipt.state,
                "result": receipt.result,
                "advice": (
                    "retry with the same mutation_id and arguments; it is applied once"
                    if receipt.state == mutations.UNCERTAIN
                    else None
                ),
            },
        }

    # --- the requester's side -----------------------------------------------------------------

    async def published_services(
        self, principal: Principal, project: str, peer_id: str
    ) -> list[str]:
        """The remote service IDs the peer's selected grant publishes (given and created)."""
        principal.require_scope("federation:invoke")
        async with self._uow_factory() as uow:
            peer = await uow.peers.get(peer_id)
            remote = [] if peer is None else await uow.remote_grants.of_peer(peer_id)
        if peer is None or peer.project != project:
            raise NotFound(f"no peer {peer_id} in project {project}", details={"peer": peer_id})
        return _published(peer.selected_grant, remote)

    async def _route(
        self, principal: Principal, project: str, peer_id: str, service: str | None = None
    ) -> tuple[p.Peer, str]:
        """The peer and its selected grant; with ``service``, one that grant must publish."""
        principal.require_scope("federation:invoke")
        async with self._uow_factory() as uow:
            peer = await uow.peers.get(peer_id)
            checked = service is not None and peer is not None
            remote = await uow.remote_grants.of_peer(peer_id) if checked else []
        if peer is None or peer.project != project:
            raise NotFound(f"no peer {peer_id} in project {project}", details={"peer": peer_id})
        if service is not None and service not in _published(peer.selected_grant, remote):
            raise unpublished(service)
        if peer.state != p.PAIRED:
            raise Conflict(f"peer {peer_id} is {peer.state}", details={"state": peer.state})
        if peer.selected_grant is None:
            raise Conflict(
                "no grant of this peer is selected; refresh and select one",
                details={"peer": peer_id},
            )
        return peer, peer.selected_grant

    def _wire(
        self, grant_id: str, operation: object, body: object, mutation_id: object
    ) -> tuple[str, dict[str, Any]]:
        name = parse_operation_name(operation)
        checked_id = check_mutation_id(name, mutation_id)
        wire: dict[str, Any] = {"grant": grant_id, "operation": name, "body": parse_body(body)}
        if checked_id is not None:
            wire["mutation_id"] = checked_id
        size = len(json.dumps(wire, separators=(",", ":")).encode())
        if size > MAX_WIRE_REQUEST_BYTES:
            raise TooLarge(
                f"the request is {size} bytes; one request travels in one frame of at most "
                f"{MAX_WIRE_REQUEST_BYTES} bytes",
                details={"limit": "frame_bytes", "allowed": MAX_WIRE_REQUEST_BYTES},
            )
        return name, wire

    async def request(
        self,
        principal: Principal,
        project: str,
        peer_id: str,
        *,
        operation: object,
        body: object,
        mutation_id: object = None,
        service: str | None = None,
    ) -> dict[str, Any]:
        """Send one operation through the selected grant; nothing is retried.

        ``service``: a remote service the selected grant must publish (checked before sending).
        """
        peer, grant_id = await self._route(principal, project, peer_id, service)
        name, wire = self._wire(grant_id, operation, body, mutation_id)
        timeout = INVOKE_TIMEOUT_SECONDS if name == "inference.invoke" else REQUEST_TIMEOUT_SECONDS
        answer = await self._federation.companion.transport.request(
            peer.hypernet_id, WIRE_OPERATION, wire, ticket=peer.ticket, timeout_seconds=timeout
        )
        return {
            "operation": name,
            "mutation_id": wire.get("mutation_id"),
            "replayed": bool(answer.get("replayed", False)),
            "result": answer.get("result"),
        }

    @contextlib.asynccontextmanager
    async def open_stream(
        self,
        principal: Principal,
        project: str,
        peer_id: str,
        *,
        operation: object,
        body: object,
        mutation_id: object = None,
        service: str | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A streamed operation; leaving the block cancels it on the peer.

        ``mutation_id`` is checked like any other request's (no streamed operation takes one),
        so a caller who sends one is told, not silently ignored.
        """
        peer, grant_id = await self._route(principal, project, peer_id, service)
        _, wire = self._wire(grant_id, operation, body, mutation_id)
        async with self._federation.companion.transport.stream(
            peer.hypernet_id,
            WIRE_OPERATION,
            wire,
            ticket=peer.ticket,
            timeout_seconds=INVOKE_TIMEOUT_SECONDS,
        ) as chunks:
            named = _naming_grant(chunks, grant_id)
            async with contextlib.aclosing(named):
                yield named


async def _naming_grant(chunks: AsyncIterator[bytes], grant_id: str) -> AsyncGenerator[bytes, None]:
    """The chunks; a grant ending says which grant (a stream reset cannot carry its ID)."""
    try:
        async for chunk in chunks:
            yield chunk
    except (GrantRevoked, GrantExpired) as exc:
        if "grant" in exc.details:
            raise
        raise type(exc)(exc.message, details={**exc.details, "grant": grant_id}) from exc


def _published(selected: str | None, remote_grants: list[dict[str, Any]]) -> list[str]:
    for grant in remote_grants:
        if grant.get("id") == selected:
            return sorted(set(grant.get("services", [])) | set(grant.get("created_services", [])))
    return []


def _no_grant(grant_id: str) -> NotFound:
    """The one answer for a grant that does not exist and for another peer's grant."""
    return NotFound("this peer holds no such grant", details={"grant": grant_id})


def unpublished(service: object) -> NotFound:
    """The refusal of a model that is not a service the selected grant publishes."""
    return NotFound(
        f"the model {service} is not a service published by this peer's selected grant",
        details={"field": "model"},
    )


def _refusal(result: dict[str, Any] | None) -> FiccError:
    """The refusal a receipt retained, raised again for a retry of the same mutation."""
    error = (result or {}).get("error") or {}
    return error_from_code(
        str(error.get("code", "conflict")),
        str(error.get("message", "this mutation was refused")),
        error.get("details") if isinstance(error.get("details"), dict) else None,
    )


def error_event(error: FiccError) -> bytes:
    body = {
        "error": {
            "message": error.message,
            "type": "server_error",
            "code": error.code,
            "details": error.details,
        }
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


PEER_SPEC_FIELDS: Final = ("name", "model", "runtime", "node", "replicas")
"""What a peer sees of a spec: ``options`` may hold upstream URLs and internal names."""
PEER_SERVICE_ERROR: Final = "the service failed; the grantor's operator can see why"
"""A failed service's reason holds engine text, addresses and paths; a peer sees only this."""


def peer_view(view: dict[str, Any]) -> dict[str, Any]:
    """A service as a peer sees it: no options, engine error text, log lines, PIDs or ports."""
    shown = {k: v for k, v in view.items() if k not in {"replicas", "spec", "error"}}
    if "spec" in view:
        shown["spec"] = {k: view["spec"][k] for k in PEER_SPEC_FIELDS if k in view["spec"]}
    if "error" in view:
        shown["error"] = None if view["error"] is None else PEER_SERVICE_ERROR
    shown["replicas"] = [
        {"replica": r["replica"], "state": r["state"], "exit_code": r["exit_code"]}
        for r in view.get("replicas", [])
    ]
    plain: dict[str, Any] = with_times_formatted(shown)
    return plain


MAX_SPEC_DEPTH: Final = 16


def _upstream_in_spec(spec_data: object) -> str | None:
    """The field of a peer's spec that names an upstream: ``runtime: openai``, a ``base_url``
    key or a URL value anywhere in ``options``; None when there is none."""
    if not isinstance(spec_data, dict):
        return None
    if spec_data.get("runtime") == "openai":
        return "body.spec.runtime"

    def search(value: object, where: str, depth: int) -> str | None:
        if depth > MAX_SPEC_DEPTH:
            return where
        if isinstance(value, str):
            return where if "://" in value else None
        items: list[tuple[str, object]] = []
        if isinstance(value, dict):
            for key, item in value.items():
                if str(key).lower() == "base_url":
                    return f"{where}.{key}"
                items.append((f"{where}.{key}", item))
        elif isinstance(value, list):
            items = [(f"{where}[{index}]", item) for index, item in enumerate(value)]
        for path, item in items:
            found = search(item, path, depth + 1)
            if found is not None:
                return found
        return None

    return search(spec_data.get("options"), "body.spec.options", 0)


def _require_created(call: Call, service_id: str, operation: str) -> None:
    """Replace and remove only what the grant created: a granted service is the grantor's own,
    used by its local users; a peer re-specifying it could take their requests."""
    if service_id not in call.grant.created_services:
        raise PermissionDenied(
            f"{operation} is allowed only on services this grant created; "
            f"{service_id} was granted, not created",
            details={"field": "body.service", "reason": "service_not_created_by_grant"},
        )

"""Repositories: SQL behind the ports of ``ficc.services.ports``; rows become domain records."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import (
    Select,
    Table,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    union_all,
    update,
)

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.database import SqlConnection
from ficc.base.times import format_time, parse_time
from ficc.domain.accounts import ApiToken, LoginLink, User, WebSession
from ficc.domain.audit import AuditEntry
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.grants import Grant, parse_grant
from ficc.domain.inference import (
    AttemptState,
    DesiredState,
    ServiceState,
    parse_service_spec,
)
from ficc.domain.nodes import Gpu, Node
from ficc.domain.offers import INCOMING, PURGEABLE_STATES, RECEIVED, Offer
from ficc.domain.peers import Peer
from ficc.domain.service_records import AttemptRecord, MutationReceipt, ServiceRecord
from ficc.domain.transfers import Transfer, TransferFile


def _time(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value)


def _req_time(value: str) -> datetime:
    return parse_time(value)


def _opt(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


@functools.cache
def _select_where(table: Table, column: str) -> Select[Any]:
    """``SELECT * FROM table WHERE column = :value``, built once.

    A statement object built anew on every call is compiled from its cache key, which
    SQLAlchemy derives by walking the whole expression (about 0.1 ms); a kept one skips that.
    """
    return select(table).where(table.c[column] == bindparam("value"))


_CREATED_BY_GRANT: Final = union_all(
    select(t.services.c.id, literal("service").label("kind")).where(
        t.services.c.created_by_grant == bindparam("grant")
    ),
    select(t.models.c.id, literal("model").label("kind")).where(
        t.models.c.created_by_grant == bindparam("grant")
    ),
)
"""The service and model records a grant created (kept built, like ``_select_where``)."""

_CHARGE_GRANT: Final = (
    update(t.grants)
    .where(t.grants.c.id == bindparam("grant"))
    .values(
        requests_used=t.grants.c.requests_used + bindparam("requests"),
        transfer_bytes_used=t.grants.c.transfer_bytes_used + bindparam("transfer_bytes"),
    )
)

_CHARGE_ONE_REQUEST: Final = (
    update(t.grants)
    .where(t.grants.c.id == bindparam("grant"))
    .where(t.grants.c.requests_used < bindparam("requests"))
    .values(requests_used=t.grants.c.requests_used + 1)
)
"""Charge one request only while one is left: the check and the charge in one statement."""


class _Repository:
    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

    async def _first_where(self, table: Table, column: str, value: object) -> Any:
        """The first row whose ``column`` equals ``value``, or None."""
        return (await self._c.execute(_select_where(table, column), {"value": value})).first()

    async def _rows_where(self, table: Table, column: str, value: object) -> Sequence[Any]:
        """Every row whose ``column`` equals ``value``."""
        return (await self._c.execute(_select_where(table, column), {"value": value})).all()


class SqlUsers(_Repository):
    @staticmethod
    def _user(row: Any) -> User:
        return User(
            id=row.id,
            username=row.username,
            password_hash=row.password_hash,
            is_owner=row.is_owner,
            scopes=frozenset(row.scopes),
            projects=frozenset(row.projects),
            created_at=_req_time(row.created_at),
        )

    async def add(self, user: User) -> None:
        await self._c.execute(
            insert(t.users).values(
                id=user.id,
                username=user.username,
                password_hash=user.password_hash,
                is_owner=user.is_owner,
                scopes=sorted(user.scopes),
                projects=sorted(user.projects),
                created_at=format_time(user.created_at),
            )
        )

    async def get(self, user_id: str) -> User | None:
        row = await self._first_where(t.users, "id", user_id)
        return None if row is None else self._user(row)

    async def by_username(self, username: str) -> User | None:
        row = await self._first_where(t.users, "username", username)
        return None if row is None else self._user(row)

    async def owner(self) -> User | None:
        query = select(t.users).where(t.users.c.is_owner.is_(True)).limit(1)
        row = (await self._c.execute(query)).first()
        return None if row is None else self._user(row)

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        await self._c.execute(
            update(t.users).where(t.users.c.id == user_id).values(password_hash=password_hash)
        )


class SqlTokens(_Repository):
    @staticmethod
    def _token(row: Any) -> ApiToken:
        return ApiToken(
            id=row.id,
            user_id=row.user_id,
            secret_hash=row.secret_hash,
            scopes=frozenset(row.scopes),
            projects=frozenset(row.projects),
            created_at=_req_time(row.created_at),
            expires_at=_time(row.expires_at),
            revoked_at=_time(row.revoked_at),
            owner=bool(row.owner),
            created_by=row.created_by,
        )

    async def add(self, token: ApiToken) -> None:
        await self._c.execute(
            insert(t.api_tokens).values(
                id=token.id,
                user_id=token.user_id,
                secret_hash=token.secret_hash,
                scopes=sorted(token.scopes),
                projects=sorted(token.projects),
                created_at=format_time(token.created_at),
                expires_at=_opt(token.expires_at),
                revoked_at=_opt(token.revoked_at),
                owner=token.owner,
                created_by=token.created_by,
            )
        )

    async def get(self, token_id: str) -> ApiToken | None:
        row = await self._first_where(t.api_tokens, "id", token_id)
        return None if row is None else self._token(row)

    async def by_secret_hash(self, secret_hash: str) -> ApiToken | None:
        row = await self._first_where(t.api_tokens, "secret_hash", secret_hash)
        return None if row is None else self._token(row)

    async def list(self) -> list[ApiToken]:
        rows = await self._c.execute(select(t.api_tokens).order_by(t.api_tokens.c.created_at))
        return [self._token(row) for row in rows]

    async def revoke(self, token_id: str, at: datetime) -> None:
        await self._c.execute(
            update(t.api_tokens)
            .where(t.api_tokens.c.id == token_id, t.api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=format_time(at))
        )

    async def revoke_minted_by(self, token_id: str, at: datetime) -> Sequence[str]:
        """Revoke every token minted by ``token_id``, and theirs, down the ``created_by`` chain;
        the IDs just revoked, nearest first.

        One level per statement, so on PostgreSQL each level reads what committed before it:
        a token minted meanwhile under a child (whose row the mint locks) is found at the next
        level. A child revoked earlier is still walked through to its own children.
        """
        tokens = t.api_tokens.c
        revoked: list[str] = []
        seen = {token_id}
        level = [token_id]
        while level:
            rows = await self._c.execute(
                select(tokens.id, tokens.revoked_at)
                .where(tokens.created_by.in_(level))
                .order_by(tokens.created_at, tokens.id)
            )
            children = [row for row in rows if row.id not in seen]
            live = [row.id for row in children if row.revoked_at is None]
            if live:
                await self._c.execute(
                    update(t.api_tokens)
                    .where(tokens.id.in_(live), tokens.revoked_at.is_(None))
                    .values(revoked_at=format_time(at))
                )
            revoked += live
            level = [row.id for row in children]
            seen.update(level)
        return revoked

    async def lock(self, token_id: str) -> None:
        # SELECT ... FOR UPDATE on PostgreSQL; SQLite has no row locks (and one writer).
        await self._c.execute(
            select(t.api_tokens.c.id).where(t.api_tokens.c.id == token_id).with_for_update()
        )

    async def mark_owner(self, secret_hash: str) -> bool:
        """Mark the unrevoked token with this digest as the owner token; True if just marked."""
        result = await self._c.execute(
            update(t.api_tokens)
            .where(
                t.api_tokens.c.secret_hash == secret_hash,
                t.api_tokens.c.revoked_at.is_(None),
                t.api_tokens.c.owner.is_(False),
            )
            .values(owner=True)
        )
        return result.rowcount == 1


class SqlSessions(_Repository):
    async def add(self, session: WebSession) -> None:
        await self._c.execute(
            insert(t.web_sessions).values(
                id=session.id,
                user_id=session.user_id,
                secret_hash=session.secret_hash,
                csrf_token=session.csrf_token,
                created_at=format_time(session.created_at),
                expires_at=format_time(session.expires_at),
            )
        )

    async def by_secret_hash(self, secret_hash: str) -> WebSession | None:
        row = await self._first_where(t.web_sessions, "secret_hash", secret_hash)
        if row is None:
            return None
        return WebSession(
            id=row.id,
            user_id=row.user_id,
            secret_hash=row.secret_hash,
            csrf_token=row.csrf_token,
            created_at=_req_time(row.created_at),
            expires_at=_req_time(row.expires_at),
        )

    async def delete(self, session_id: str) -> None:
        await self._c.execute(delete(t.web_sessions).where(t.web_sessions.c.id == session_id))

    async def delete_for_user(self, user_id: str, *, keep: str | None) -> int:
        """End every session of ``user_id`` but ``keep``; the number ended."""
        query = delete(t.web_sessions).where(t.web_sessions.c.user_id == user_id)
        if keep is not None:
            query = query.where(t.web_sessions.c.id != keep)
        return int((await self._c.execute(query)).rowcount)

    async def purge(self, *, now: datetime) -> int:
        """Delete the sessions that have expired; the number deleted."""
        query = delete(t.web_sessions).where(t.web_sessions.c.expires_at <= format_time(now))
        return int((await self._c.execute(query)).rowcount or 0)


class SqlLoginLinks(_Repository):
    async def add(self, link: LoginLink) -> None:
        await self._c.execute(
            insert(t.login_links).values(
                id=link.id,
                user_id=link.user_id,
                secret_hash=link.secret_hash,
                created_at=format_time(link.created_at),
                expires_at=format_time(link.expires_at),
                used_at=_opt(link.used_at),
            )
        )

    async def by_secret_hash(self, secret_hash: str) -> LoginLink | None:
        row = await self._first_where(t.login_links, "secret_hash", secret_hash)
        if row is None:
            return None
        return LoginLink(
            id=row.id,
            user_id=row.user_id,
            secret_hash=row.secret_hash,
            created_at=_req_time(row.created_at),
            expires_at=_req_time(row.expires_at),
            used_at=_time(row.used_at),
        )

    async def mark_used(self, link_id: str, at: datetime) -> bool:
        result = await self._c.execute(
            update(t.login_links)
            .where(t.login_links.c.id == link_id, t.login_links.c.used_at.is_(None))
            .values(used_at=format_time(at))
        )
        return result.rowcount == 1

    async def purge(self, *, now: datetime) -> int:
        """Delete the links that were used or have expired; the number deleted."""
        links = t.login_links.c
        query = delete(t.login_links).where(
            links.used_at.is_not(None) | (links.expires_at <= format_time(now))
        )
        return int((await self._c.execute(query)).rowcount or 0)


class SqlProjects(_Repository):
    async def add(self, name: str, at: datetime) -> None:
        await self._c.execute(insert(t.projects).values(name=name, created_at=format_time(at)))

    async def exists(self, name: str) -> bool:
        query = select(func.count()).select_from(t.projects).where(t.projects.c.name == name)
        return bool((await self._c.execute(query)).scalar_one())

    async def list(self) -> list[tuple[str, datetime]]:
        rows = await self._c.execute(select(t.projects).order_by(t.projects.c.name))
        return [(row.name, _req_time(row.created_at)) for row in rows]


class SqlAudit(_Repository):
    async def append(self, entry: AuditEntry) -> int:
        result = await self._c.execute(
            insert(t.audit_log).values(
                at=format_time(entry.at),
                project=entry.project,
                actor=entry.actor,
                action=entry.action,
                target=entry.target,
                peer_hypernet_id=entry.peer_hypernet_id,
                peer_cluster_key=entry.peer_cluster_key,
                details=entry.details,
            )
        )
        key = result.inserted_primary_key
        return int(key[0]) if key is not None else 0

    async def list(
        self,
        *,
        project: str | None,
        after_seq: int,
        limit: int,
        cluster_wide: bool = True,
    ) -> list[AuditEntry]:
        query = select(t.audit_log).where(t.audit_log.c.seq > after_seq)
        if project is not None and cluster_wide:
            query = query.where(
                (t.audit_log.c.project == project) | t.audit_log.c.project.is_(None)
            )
        elif project is not None:
            query = query.where(t.audit_log.c.project == project)
        rows = await self._c.execute(query.order_by(t.audit_log.c.seq).limit(limit))
        return [
            AuditEntry(
                seq=row.seq,
                at=_req_time(row.at),
                project=row.project,
                actor=row.actor,
                action=row.action,
                target=row.target,
                peer_hypernet_id=row.peer_hypernet_id,
                peer_cluster_key=row.peer_cluster_key,
                details=dict(row.details),
            )
            for row in rows
        ]


class SqlSettings(_Repository):
    async def get(self, key: str) -> Any | None:
        query = select(t.cluster_settings.c.value).where(t.cluster_settings.c.key == key)
        row = (await self._c.execute(query)).first()
        return None if row is None else row.value

    async def put(self, key: str, value: Any) -> None:
        changed = await self._c.execute(
            update(t.cluster_settings).where(t.cluster_settings.c.key == key).values(value=value)
        )
        if changed.rowcount == 0:
            await self._c.execute(insert(t.cluster_settings).values(key=key, value=value))

    async def lock(self, key: str) -> None:
        # SELECT ... FOR UPDATE on PostgreSQL; SQLite has no row locks (and one writer).
        await self._c.execute(
            select(t.cluster_settings.c.key)
            .where(t.cluster_settings.c.key == key)
            .with_for_update()
        )


class SqlNodes(_Repository):
    @staticmethod
    def _node(row: Any) -> Node:
        return Node(
            id=row.id,
            name=row.name,
            cpu_count=row.cpu_count,
            memory_bytes=row.memory_bytes,
            memory_available_bytes=row.memory_available_bytes,
            gpus=tuple(Gpu(**gpu) for gpu in row.gpus),
            is_local=row.is_local,
            updated_at=_req_time(row.updated_at),
            ray_node_id=row.ray_node_id,
            labels=tuple(sorted((row.labels or {}).items())),
            available=row.available,
            unavailable_reason=row.unavailable_reason,
        )

    async def upsert(self, node: Node) -> None:
        values = {
            "name": node.name,
            "is_local": node.is_local,
            "cpu_count": node.cpu_count,
            "memory_bytes": node.memory_bytes,
            "memory_available_bytes": node.memory_available_bytes,
            "gpus": [gpu.__dict__ for gpu in node.gpus],
            "updated_at": format_time(node.updated_at),
            "ray_node_id": node.ray_node_id,
            "labels": dict(node.labels),
            "available": node.available,
            "unavailable_reason": node.unavailable_reason,
        }
        changed = await self._c.execute(
            update(t.nodes).where(t.nodes.c.id == node.id).values(**values)
        )
        if changed.rowcount == 0:
            await self._c.execute(insert(t.nodes).values(id=node.id, **values))

    async def get(self, node_id: str) -> Node | None:
        row = await self._first_where(t.nodes, "id", node_id)
        return None if row is None else self._node(row)

    async def list(self) -> list[Node]:
        rows = await self._c.execute(select(t.nodes).order_by(t.nodes.c.name))
        return [self._node(row) for row in rows]


class SqlModels(_Repository):
    @staticmethod
    def _model(row: Any) -> CatalogueModel:
        return CatalogueModel(
            id=row.id,
            project=row.project,
            name=row.name,
            format=row.format,
            manifest=dict(row.manifest),
            sha256=row.sha256,
            created_at=_req_time(row.created_at),
            provenance=None if row.provenance is None else dict(row.provenance),
            created_by_grant=row.created_by_grant,
        )

    async def add(self, model: CatalogueModel) -> None:
        await self._c.execute(
            insert(t.models).values(
                id=model.id,
                project=model.project,
                name=model.name,
                format=model.format,
                manifest=model.manifest,
                sha256=model.sha256,
                provenance=model.provenance,
                created_at=format_time(model.created_at),
                created_by_grant=model.created_by_grant,
            )
        )

    async def get(self, model_id: str) -> CatalogueModel | None:
        row = await self._first_where(t.models, "id", model_id)
        return None if row is None else self._model(row)

    async def list(self, project: str) -> list[CatalogueModel]:
        query = select(t.models).where(t.models.c.project == project)
        rows = await self._c.execute(query.order_by(t.models.c.created_at, t.models.c.id))
        return [self._model(row) for row in rows]

    async def delete(self, model_id: str) -> None:
        await self._c.execute(delete(t.models).where(t.models.c.id == model_id))

    async def blob_in_use(self, sha256: str) -> bool:
        # Manifests are small JSON documents; a model refers to a blob by its file digest.
        rows = await self._c.execute(select(t.models.c.manifest))
        return any(entry.get("sha256") == sha256 for row in rows for entry in row.manifest["files"])

    async def own_blobs(self, project: str, digests: Sequence[str]) -> None:
        """Enter blobs into the project's set (files imported or transferred into it)."""
        owned = await self._owned(project, digests)
        missing = sorted(set(digests) - owned)
        if missing:
            await self._c.execute(
                insert(t.blob_refs).values([{"project": project, "sha256": d} for d in missing])
            )

    async def owns_blobs(self, project: str, digests: Sequence[str]) -> bool:
        """Whether every one of ``digests`` is in the project's set."""
        return set(digests) <= await self._owned(project, digests)

    async def release_blobs(self, project: str, digests: Sequence[str]) -> None:
        """Drop from the project's set the blobs no imported or transferred model of it names.

        Records a peer created never keep a blob in the set: they never put one there.
        """
        query = select(t.models.c.manifest).where(
            (t.models.c.project == project) & t.models.c.created_by_grant.is_(None)
        )
        named = {
            str(entry["sha256"])
            for row in await self._c.execute(query)
            for entry in row.manifest["files"]
        }
        unused = sorted(set(digests) - named)
        if unused:
            await self._c.execute(
                delete(t.blob_refs).where(
                    (t.blob_refs.c.project == project) & t.blob_refs.c.sha256.in_(unused)
                )
            )

    async def _owned(self, project: str, digests: Sequence[str]) -> set[str]:
        query = select(t.blob_refs.c.sha256).where(
            (t.blob_refs.c.project == project) & t.blob_refs.c.sha256.in_(sorted(set(digests)))
        )
        return {row.sha256 for row in await self._c.execute(query)}


class SqlModelUsage(_Repository):
    async def users_of_model(self, model_id: str) -> Sequence[str]:
        query = select(t.services.c.id).where(t.services.c.model == model_id)
        return [row.id for row in await self._c.execute(query)]


class SqlServices(_Repository):
    @staticmethod
    def _service(row: Any) -> ServiceRecord:
        return ServiceRecord(
            id=row.id,
            project=row.project,
            spec=parse_service_spec(row.spec),
            node=row.node,
            state=ServiceState(row.state),
            desired=DesiredState(row.desired),
            revision=row.revision,
            error=row.error,
            created_by_grant=row.created_by_grant,
            created_at=_req_time(row.created_at),
            updated_at=_req_time(row.updated_at),
        )

    @staticmethod
    def _values(service: ServiceRecord) -> dict[str, Any]:
        return {
            "project": service.project,
            "name": service.spec.name,
            "model": service.spec.model,
            "node": service.node,
            "spec": service.spec.to_json(),
            "state": service.state.value,
            "desired": service.desired.value,
            "revision": service.revision,
            "error": service.error,
            "created_by_grant": service.created_by_grant,
            "created_at": format_time(service.created_at),
            "updated_at": format_time(service.updated_at),
        }

    async def add(self, service: ServiceRecord) -> None:
        await self._c.execute(insert(t.services).values(id=service.id, **self._values(service)))

    async def get(self, service_id: str) -> ServiceRecord | None:
        row = await self._first_where(t.services, "id", service_id)
        return None if row is None else self._service(row)

    async def list_all(self) -> list[ServiceRecord]:
        rows = await self._c.execute(select(t.services).order_by(t.services.c.created_at))
        return [self._service(row) for row in rows]

    async def list(self, project: str) -> list[ServiceRecord]:
        query = select(t.services).where(t.services.c.project == project)
        rows = await self._c.execute(query.order_by(t.services.c.created_at, t.services.c.id))
        return [self._service(row) for row in rows]

    async def update(self, service: ServiceRecord) -> None:
        await self._c.execute(
            update(t.services).where(t.services.c.id == service.id).values(**self._values(service))
        )

    async def delete(self, service_id: str) -> None:
        await self._c.execute(delete(t.services).where(t.services.c.id == service_id))


class SqlAttempts(_Repository):
    @staticmethod
    def _attempt(row: Any) -> AttemptRecord:
        return AttemptRecord(
            id=row.id,
            service_id=row.service_id,
            replica=row.replica,
            state=AttemptState(row.state),
            serve_instance=row.serve_instance,
            created_at=_req_time(row.created_at),
            pid=row.pid,
            pid_start_ticks=row.pid_start_ticks,
            port=row.port,
            exit_code=row.exit_code,
            log_tail=row.log_tail,
            ended_at=_time(row.ended_at),
        )

    @staticmethod
    def _values(attempt: AttemptRecord) -> dict[str, Any]:
        return {
            "service_id": attempt.service_id,
            "replica": attempt.replica,
            "state": attempt.state.value,
            "serve_instance": attempt.serve_instance,
            "created_at": format_time(attempt.created_at),
            "pid": attempt.pid,
            "pid_start_ticks": attempt.pid_start_ticks,
            "port": attempt.port,
            "exit_code": attempt.exit_code,
            "log_tail": attempt.log_tail,
            "ended_at": _opt(attempt.ended_at),
        }

    async def add(self, attempt: AttemptRecord) -> None:
        await self._c.execute(
            insert(t.replica_attempts).values(id=attempt.id, **self._values(attempt))
        )

    async def get(self, attempt_id: str) -> AttemptRecord | None:
        row = await self._first_where(t.replica_attempts, "id", attempt_id)
        return None if row is None else self._attempt(row)

    async def for_service(self, service_id: str) -> list[AttemptRecord]:
        query = select(t.replica_attempts).where(t.replica_attempts.c.service_id == service_id)
        rows = await self._c.execute(query.order_by(t.replica_attempts.c.created_at))
        return [self._attempt(row) for row in rows]

    async def update(self, attempt: AttemptRecord) -> None:
        await self._c.execute(
            update(t.replica_attempts)
            .where(t.replica_attempts.c.id == attempt.id)
            .values(**self._values(attempt))
        )

    async def delete_for_service(self, service_id: str) -> None:
        await self._c.execute(
            delete(t.replica_attempts).where(t.replica_attempts.c.service_id == service_id)
        )

    async def delete(self, attempt_id: str) -> None:
        await self._c.execute(
            delete(t.replica_attempts).where(t.replica_attempts.c.id == attempt_id)
        )


class SqlReceipts(_Repository):
    async def get(self, scope: str, mutation_id: str) -> MutationReceipt | None:
        query = select(t.mutation_receipts).where(
            t.mutation_receipts.c.scope == scope, t.mutation_receipts.c.mutation_id == mutation_id
        )
        row = (await self._c.execute(query)).first()
        if row is None:
            return None
        return MutationReceipt(
            scope=row.scope,
            mutation_id=row.mutation_id,
            operation=row.operation,
            arguments_sha256=row.arguments_sha256,
            state=row.state,
            result=None if row.result is None else dict(row.result),
            created_at=_req_time(row.created_at),
            completed_at=_time(row.completed_at),
        )

    async def put(self, receipt: MutationReceipt) -> None:
        values = {
            "operation": receipt.operation,
            "arguments_sha256": receipt.arguments_sha256,
            "state": receipt.state,
            "result": receipt.result,
            "created_at": format_time(receipt.created_at),
            "completed_at": _opt(receipt.completed_at),
        }
        changed = await self._c.execute(
            update(t.mutation_receipts)
            .where(
                t.mutation_receipts.c.scope == receipt.scope,
                t.mutation_receipts.c.mutation_id == receipt.mutation_id,
            )
            .values(**values)
        )
        if changed.rowcount == 0:
            await self._c.execute(
                insert(t.mutation_receipts).values(
                    scope=receipt.scope, mutation_id=receipt.mutation_id, **values
                )
            )

    async def delete_scope(self, scope: str) -> None:
        await self._c.execute(
            delete(t.mutation_receipts).where(t.mutation_receipts.c.scope == scope)
        )

    async def delete(self, scope: str, mutation_id: str) -> None:
        await self._c.execute(
            delete(t.mutation_receipts).where(
                t.mutation_receipts.c.scope == scope,
                t.mutation_receipts.c.mutation_id == mutation_id,
            )
        )

    async def count(self, scope: str, operation: str, state: str) -> int:
        query = (
            select(func.count())
            .select_from(t.mutation_receipts)
            .where(
                t.mutation_receipts.c.scope == scope,
                t.mutation_receipts.c.operation == operation,
                t.mutation_receipts.c.state == state,
            )
        )
        return int((await self._c.execute(query)).scalar_one())


class SqlPeers(_Repository):
    @staticmethod
    def _peer(row: Any) -> Peer:
        return Peer(
            id=row.id,
            project=row.project,
            label=row.label,
            hypernet_id=row.hypernet_id,
            cluster_key=row.cluster_key,
            state=row.state,
            generation=row.generation,
            role=row.role,
            offer_id=row.offer_id,
            selected_grant=row.selected_grant,
            ticket=row.ticket,
            created_at=_req_time(row.created_at),
            updated_at=_req_time(row.updated_at),
        )

    @staticmethod
    def _values(peer: Peer) -> dict[str, Any]:
        return {
            "project": peer.project,
            "label": peer.label,
            "hypernet_id": peer.hypernet_id,
            "cluster_key": peer.cluster_key,
            "state": peer.state,
            "generation": peer.generation,
            "role": peer.role,
            "offer_id": peer.offer_id,
            "selected_grant": peer.selected_grant,
            "ticket": peer.ticket,
            "created_at": format_time(peer.created_at),
            "updated_at": format_time(peer.updated_at),
        }

    async def add(self, peer: Peer) -> None:
        await self._c.execute(insert(t.peers).values(id=peer.id, **self._values(peer)))

    async def update(self, peer: Peer) -> None:
        await self._c.execute(
            update(t.peers).where(t.peers.c.id == peer.id).values(**self._values(peer))
        )

    async def get(self, peer_id: str) -> Peer | None:
        row = await self._first_where(t.peers, "id", peer_id)
        return None if row is None else self._peer(row)

    async def by_hypernet_id(self, hypernet_id: str) -> list[Peer]:
        return [
            self._peer(row) for row in await self._rows_where(t.peers, "hypernet_id", hypernet_id)
        ]

    async def in_project(self, project: str) -> list[Peer]:
        query = select(t.peers).where(t.peers.c.project == project).order_by(t.peers.c.created_at)
        return [self._peer(row) for row in await self._c.execute(query)]

    async def delete(self, peer_id: str) -> None:
        await self._c.execute(delete(t.peers).where(t.peers.c.id == peer_id))


class SqlOffers(_Repository):
    @staticmethod
    def _offer(row: Any) -> Offer:
        return Offer(
            id=row.id,
            direction=row.direction,
            project=row.project,
            service=row.service,
            peer_label=row.peer_label,
            peer_cluster_key=row.peer_cluster_key,
            scopes=frozenset(row.scopes),
            state=row.state,
            revision=row.revision,
            receipt=None if row.receipt is None else dict(row.receipt),
            ticket=row.ticket,
            created_at=_req_time(row.created_at),
            expires_at=_req_time(row.expires_at),
            peer_id=row.peer_id,
            source=row.source,
        )

    @staticmethod
    def _values(offer: Offer) -> dict[str, Any]:
        return {
            "direction": offer.direction,
            "project": offer.project,
            "service": offer.service,
            "peer_label": offer.peer_label,
            "peer_cluster_key": offer.peer_cluster_key,
            "scopes": sorted(offer.scopes),
            "state": offer.state,
            "revision": offer.revision,
            "receipt": offer.receipt,
            "ticket": offer.ticket,
            "peer_id": offer.peer_id,
            "created_at": format_time(offer.created_at),
            "expires_at": format_time(offer.expires_at),
            "source": offer.source,
        }

    async def add(self, offer: Offer) -> None:
        """Store the offer and tombstone its ID, so it is never taken again (also after
        ``delete``)."""
        await self._c.execute(insert(t.offers).values(id=offer.id, **self._values(offer)))
        await self._c.execute(
            insert(t.offer_tombstones).values(
                id=offer.id, hypernet_id=offer.service, created_at=format_time(offer.created_at)
            )
        )

    async def ever_used(self, offer_id: str) -> bool:
        """True when an offer with this ID was ever sent or received."""
        return await self._first_where(t.offer_tombstones, "id", offer_id) is not None

    @staticmethod
    def _waiting(now: datetime, service: str | None, source: str | None) -> Any:
        """Incoming offers not yet approved nor expired, of ``service``/``source`` if given."""
        offers = t.offers.c
        clause = (
            (offers.direction == INCOMING)
            & (offers.state == RECEIVED)
            & (offers.expires_at > format_time(now))
        )
        if service is not None:
            clause &= offers.service == service
        if source is not None:
            clause &= func.coalesce(offers.source, offers.service) == source
        return clause

    async def count_received(
        self, *, now: datetime, service: str | None = None, source: str | None = None
    ) -> int:
        """Incoming offers waiting, from ``service``, from ``source`` or from everyone."""
        query = select(func.count()).select_from(t.offers)
        query = query.where(self._waiting(now, service, source))
        return int((await self._c.execute(query)).scalar_one())

    async def oldest_received(
        self, *, now: datetime, service: str | None = None, source: str | None = None
    ) -> Offer | None:
        """The oldest incoming offer waiting, from ``service``, ``source`` or anyone."""
        offers = t.offers.c
        query = (
            select(t.offers)
            .where(self._waiting(now, service, source))
            .order_by(offers.created_at, offers.id)
            .limit(1)
        )
        row = (await self._c.execute(query)).first()
        return None if row is None else self._offer(row)

    async def busiest_source(self, *, now: datetime) -> str | None:
        """The source with the most incoming offers waiting (ties: the one waiting longest)."""
        offers = t.offers.c
        source = func.coalesce(offers.source, offers.service)
        query = (
            select(source)
            .where(self._waiting(now, None, None))
            .group_by(source)
            .order_by(func.count().desc(), func.min(offers.created_at))
            .limit(1)
        )
        return (await self._c.execute(query)).scalar_one_or_none()

    async def purge(self, *, expired_before: datetime) -> int:
        """Delete offers no pairing refers to that expired before the moment given."""
        offers = t.offers.c
        result = await self._c.execute(
            delete(t.offers).where(
                offers.state.in_(sorted(PURGEABLE_STATES))
                & (offers.expires_at < format_time(expired_before))
            )
        )
        return int(result.rowcount or 0)

    async def update(self, offer: Offer) -> None:
        await self._c.execute(
            update(t.offers).where(t.offers.c.id == offer.id).values(**self._values(offer))
        )

    async def get(self, offer_id: str) -> Offer | None:
        row = await self._first_where(t.offers, "id", offer_id)
        return None if row is None else self._offer(row)

    async def lock(self, offer_id: str) -> None:
        # SELECT ... FOR UPDATE on PostgreSQL; SQLite has no row locks (and one writer).
        await self._c.execute(
            select(t.offers.c.id).where(t.offers.c.id == offer_id).with_for_update()
        )

    async def visible_to(
        self, project: str, *, after: str | None = None, limit: int | None = None
    ) -> list[Offer]:
        """This project's offers, and incoming offers no project has taken yet, oldest first;
        only those after the offer ``after`` and at most ``limit`` of them when given."""
        offers = t.offers.c
        query = select(t.offers).where((offers.project == project) | offers.project.is_(None))
        if after is not None:
            start = await self._first_where(t.offers, "id", after)
            if start is not None:
                query = query.where(
                    (offers.created_at > start.created_at)
                    | ((offers.created_at == start.created_at) & (offers.id > after))
                )
        query = query.order_by(offers.created_at, offers.id)
        if limit is not None:
            query = query.limit(limit)
        return [self._offer(row) for row in await self._c.execute(query)]

    async def of_peer(self, peer_id: str) -> list[Offer]:
        return [self._offer(row) for row in await self._rows_where(t.offers, "peer_id", peer_id)]

    async def delete(self, offer_id: str) -> None:
        await self._c.execute(delete(t.offers).where(t.offers.c.id == offer_id))


class SqlGrants(_Repository):
    @staticmethod
    def _grant(row: Any, created_services: frozenset[str], created_models: frozenset[str]) -> Grant:
        return Grant(
            id=row.id,
            project=row.project,
            peer_id=row.peer_id,
            terms=parse_grant(row.terms),
            state=row.state,
            created_at=_req_time(row.created_at),
            expires_at=_req_time(row.expires_at),
            revoked_at=_time(row.revoked_at),
            requests_used=row.requests_used,
            transfer_bytes_used=row.transfer_bytes_used,
            created_services=created_services,
            created_models=created_models,
            prompt_tokens_used=row.prompt_tokens_used,
            completion_tokens_used=row.completion_tokens_used,
            tokens_reserved=row.tokens_reserved,
        )

    async def _load(self, row: Any) -> Grant:
        """The grant with the records it created, read in one query."""
        created = await self._c.execute(_CREATED_BY_GRANT, {"grant": row.id})
        pairs = created.all()
        return self._grant(
            row,
            frozenset(r.id for r in pairs if r.kind == "service"),
            frozenset(r.id for r in pairs if r.kind == "model"),
        )

    async def add(self, grant: Grant) -> None:
        await self._c.execute(
            insert(t.grants).values(
                id=grant.id,
                project=grant.project,
                peer_id=grant.peer_id,
                terms=grant.terms.to_json(),
                state=grant.state,
                created_at=format_time(grant.created_at),
                expires_at=format_time(grant.expires_at),
                revoked_at=_opt(grant.revoked_at),
                requests_used=grant.requests_used,
                transfer_bytes_used=grant.transfer_bytes_used,
            )
        )

    async def get(self, grant_id: str) -> Grant | None:
        row = await self._first_where(t.grants, "id", grant_id)
        return None if row is None else await self._load(row)

    async def of_peer(self, peer_id: str) -> list[Grant]:
        query = (
            select(t.grants).where(t.grants.c.peer_id == peer_id).order_by(t.grants.c.created_at)
        )
        return [await self._load(row) for row in (await self._c.execute(query)).all()]

    async def in_project(self, project: str) -> list[Grant]:
        query = (
            select(t.grants).where(t.grants.c.project == project).order_by(t.grants.c.created_at)
        )
        return [await self._load(row) for row in (await self._c.execute(query)).all()]

    async def set_state(self, grant_id: str, state: str, at: datetime | None) -> None:
        values: dict[str, Any] = {"state": state}
        if at is not None:
            values["revoked_at"] = format_time(at)
        await self._c.execute(update(t.grants).where(t.grants.c.id == grant_id).values(**values))

    async def charge_request(self, grant_id: str, *, requests: int) -> bool:
        """Charge one request if fewer than ``requests`` were used; whether it was charged.

        One conditional UPDATE: concurrent admissions cannot both read the last request as
        free (on PostgreSQL the row lock of the UPDATE orders them; SQLite has one writer).
        """
        result = await self._c.execute(
            _CHARGE_ONE_REQUEST, {"grant": grant_id, "requests": requests}
        )
        return result.rowcount == 1

    async def charge(self, grant_id: str, *, requests: int, transfer_bytes: int) -> None:
        await self._c.execute(
            _CHARGE_GRANT,
            {"grant": grant_id, "requests": requests, "transfer_bytes": transfer_bytes},
        )

    async def lock(self, grant_id: str) -> None:
        # SELECT ... FOR UPDATE on PostgreSQL; SQLite has no row locks (and one writer).
        await self._c.execute(
            select(t.grants.c.id).where(t.grants.c.id == grant_id).with_for_update()
        )

    async def delete(self, grant_id: str) -> None:
        await self._c.execute(delete(t.grants).where(t.grants.c.id == grant_id))


class SqlRemoteGrants(_Repository):
    async def replace_for_peer(
        self, peer_id: str, grants: list[dict[str, Any]], at: datetime
    ) -> None:
        await self._c.execute(delete(t.remote_grants).where(t.remote_grants.c.peer_id == peer_id))
        for grant in grants:
            await self._c.execute(
                insert(t.remote_grants).values(
                    id=grant["id"], peer_id=peer_id, data=grant, refreshed_at=format_time(at)
                )
            )

    async def of_peer(self, peer_id: str) -> list[dict[str, Any]]:
        return [
            dict(row.data) for row in await self._rows_where(t.remote_grants, "peer_id", peer_id)
        ]

    async def delete_for_peer(self, peer_id: str) -> None:
        await self._c.execute(delete(t.remote_grants).where(t.remote_grants.c.peer_id == peer_id))


class SqlTransfers(_Repository):
    @staticmethod
    def _transfer(row: Any) -> Transfer:
        return Transfer(
            id=row.id,
            project=row.project,
            peer_id=row.peer_id,
            remote_model=row.remote_model,
            grant_id=row.grant_id,
            manifest=dict(row.manifest),
            sha256=row.sha256,
            state=row.state,
            files=tuple(TransferFile.from_json(f) for f in row.files),
            local_model=row.local_model,
            error=row.error,
            created_at=_req_time(row.created_at),
            updated_at=_req_time(row.updated_at),
        )

    @staticmethod
    def _values(transfer: Transfer) -> dict[str, Any]:
        return {
            "project": transfer.project,
            "peer_id": transfer.peer_id,
            "remote_model": transfer.remote_model,
            "grant_id": transfer.grant_id,
            "manifest": transfer.manifest,
            "sha256": transfer.sha256,
            "state": transfer.state,
            "files": [f.to_json() for f in transfer.files],
            "local_model": transfer.local_model,
            "error": transfer.error,
            "created_at": format_time(transfer.created_at),
            "updated_at": format_time(transfer.updated_at),
        }

    async def add(self, transfer: Transfer) -> None:
        await self._c.execute(insert(t.transfers).values(id=transfer.id, **self._values(transfer)))

    async def update(self, transfer: Transfer) -> None:
        await self._c.execute(
            update(t.transfers)
            .where(t.transfers.c.id == transfer.id)
            .values(**self._values(transfer))
        )

    async def get(self, transfer_id: str) -> Transfer | None:
        row = await self._first_where(t.transfers, "id", transfer_id)
        return None if row is None else self._transfer(row)

    async def of_model(self, project: str, peer_id: str, remote_model: str) -> Transfer | None:
        query = select(t.transfers).where(
            t.transfers.c.project == project,
            t.transfers.c.peer_id == peer_id,
            t.transfers.c.remote_model == remote_model,
        )
        row = (await self._c.execute(query.order_by(t.transfers.c.created_at.desc()))).first()
        return None if row is None else self._transfer(row)

    async def in_project(self, project: str) -> list[Transfer]:
        query = select(t.transfers).where(t.transfers.c.project == project)
        rows = await self._c.execute(query.order_by(t.transfers.c.created_at))
        return [self._transfer(row) for row in rows]

    async def in_state(self, state: str) -> list[Transfer]:
        return [self._transfer(row) for row in await self._rows_where(t.transfers, "state", state)]

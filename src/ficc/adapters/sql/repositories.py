"""Repositories: SQL behind the ports of ``ficc.services.ports``; rows become domain records."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ficc.adapters.sql import tables as t
from ficc.base.times import format_time, parse_time
from ficc.domain.accounts import ApiToken, LoginLink, User, WebSession
from ficc.domain.audit import AuditEntry
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.nodes import Gpu, Node


def _time(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value)


def _req_time(value: str) -> datetime:
    return parse_time(value)


def _opt(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


class _Repository:
    def __init__(self, connection: AsyncConnection) -> None:
        self._c = connection


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
        row = (await self._c.execute(select(t.users).where(t.users.c.id == user_id))).first()
        return None if row is None else self._user(row)

    async def by_username(self, username: str) -> User | None:
        query = select(t.users).where(t.users.c.username == username)
        row = (await self._c.execute(query)).first()
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
            )
        )

    async def get(self, token_id: str) -> ApiToken | None:
        query = select(t.api_tokens).where(t.api_tokens.c.id == token_id)
        row = (await self._c.execute(query)).first()
        return None if row is None else self._token(row)

    async def by_secret_hash(self, secret_hash: str) -> ApiToken | None:
        query = select(t.api_tokens).where(t.api_tokens.c.secret_hash == secret_hash)
        row = (await self._c.execute(query)).first()
        return None if row is None else self._token(row)

    async def revoke(self, token_id: str, at: datetime) -> None:
        await self._c.execute(
            update(t.api_tokens)
            .where(t.api_tokens.c.id == token_id, t.api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=format_time(at))
        )


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
        query = select(t.web_sessions).where(t.web_sessions.c.secret_hash == secret_hash)
        row = (await self._c.execute(query)).first()
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
        query = select(t.login_links).where(t.login_links.c.secret_hash == secret_hash)
        row = (await self._c.execute(query)).first()
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

    async def list(self, *, project: str | None, after_seq: int, limit: int) -> list[AuditEntry]:
        query = select(t.audit_log).where(t.audit_log.c.seq > after_seq)
        if project is not None:
            query = query.where(
                (t.audit_log.c.project == project) | t.audit_log.c.project.is_(None)
            )
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
        }
        changed = await self._c.execute(
            update(t.nodes).where(t.nodes.c.id == node.id).values(**values)
        )
        if changed.rowcount == 0:
            await self._c.execute(insert(t.nodes).values(id=node.id, **values))

    async def get(self, node_id: str) -> Node | None:
        row = (await self._c.execute(select(t.nodes).where(t.nodes.c.id == node_id))).first()
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
            )
        )

    async def get(self, model_id: str) -> CatalogueModel | None:
        row = (await self._c.execute(select(t.models).where(t.models.c.id == model_id))).first()
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


class SqlModelUsage(_Repository):
    async def users_of_model(self, model_id: str) -> Sequence[str]:
        query = select(t.services.c.id).where(t.services.c.model == model_id)
        return [row.id for row in await self._c.execute(query)]

"""Inference services in SQL: the service records and their replicas' attempts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.domain.inference import (
    AttemptState,
    DesiredState,
    ServiceState,
    parse_service_spec,
)
from ficc.domain.service_records import AttemptRecord, ServiceRecord


class SqlServices(_Repository):
    @staticmethod
    def _service(row: Any) -> ServiceRecord:
        return _record(
            ServiceRecord,
            t.services,
            row,
            spec=parse_service_spec(row.spec),
            state=ServiceState(row.state),
            desired=DesiredState(row.desired),
        )

    @staticmethod
    def _values(service: ServiceRecord) -> dict[str, Any]:
        return _row_values(
            service,
            t.services,
            name=service.spec.name,
            model=service.spec.model,
            spec=service.spec.to_json(),
            state=service.state.value,
            desired=service.desired.value,
        )

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
        await self._update_where(t.services, "id", service.id, self._values(service))

    async def delete(self, service_id: str) -> None:
        await self._delete_where(t.services, "id", service_id)


class SqlAttempts(_Repository):
    @staticmethod
    def _attempt(row: Any) -> AttemptRecord:
        return _record(AttemptRecord, t.replica_attempts, row, state=AttemptState(row.state))

    @staticmethod
    def _values(attempt: AttemptRecord) -> dict[str, Any]:
        return _row_values(attempt, t.replica_attempts, state=attempt.state.value)

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
        await self._update_where(t.replica_attempts, "id", attempt.id, self._values(attempt))

    async def delete_for_service(self, service_id: str) -> None:
        await self._delete_where(t.replica_attempts, "service_id", service_id)

    async def delete(self, attempt_id: str) -> None:
        await self._delete_where(t.replica_attempts, "id", attempt_id)

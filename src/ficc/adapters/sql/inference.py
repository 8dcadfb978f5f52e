"""Inference services in SQL: the service records and their replicas' attempts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _EditableRecords, _record, _row_values
from ficc.domain.inference import (
    AttemptState,
    DesiredState,
    ServiceState,
    parse_service_spec,
)
from ficc.domain.service_records import AttemptRecord, ServiceRecord


class SqlServices(_EditableRecords[ServiceRecord]):
    _table = t.services

    def _read(self, row: Any) -> ServiceRecord:
        return _record(
            ServiceRecord,
            t.services,
            row,
            spec=parse_service_spec(row.spec),
            state=ServiceState(row.state),
            desired=DesiredState(row.desired),
        )

    def _values(self, record: ServiceRecord) -> dict[str, Any]:
        return _row_values(
            record,
            t.services,
            name=record.spec.name,
            model=record.spec.model,
            spec=record.spec.to_json(),
            state=record.state.value,
            desired=record.desired.value,
        )

    async def list_all(self) -> list[ServiceRecord]:
        return await self._all(select(t.services).order_by(t.services.c.created_at))

    async def list(self, project: str) -> list[ServiceRecord]:
        query = select(t.services).where(t.services.c.project == project)
        return await self._all(query.order_by(t.services.c.created_at, t.services.c.id))


class SqlAttempts(_EditableRecords[AttemptRecord]):
    _table = t.replica_attempts

    def _read(self, row: Any) -> AttemptRecord:
        return _record(AttemptRecord, t.replica_attempts, row, state=AttemptState(row.state))

    def _values(self, record: AttemptRecord) -> dict[str, Any]:
        return _row_values(record, t.replica_attempts, state=record.state.value)

    async def for_service(self, service_id: str) -> list[AttemptRecord]:
        query = select(t.replica_attempts).where(t.replica_attempts.c.service_id == service_id)
        return await self._all(query.order_by(t.replica_attempts.c.created_at))

    async def delete_for_service(self, service_id: str) -> None:
        await self._delete_where(t.replica_attempts, "service_id", service_id)

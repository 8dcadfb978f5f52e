"""The figures of ``/metrics`` that are state, not events, read from the database at scrape time.

Kept out of :mod:`ficc.adapters.metrics`, which the SQLite writer lock imports, so that storage
and the metrics do not import each other.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Subquery, func, select

from ficc.adapters import metrics
from ficc.adapters.sql import tables as t
from ficc.adapters.sql.database import Database


async def refresh_state_gauges(
    database: Database, in_flight: Mapping[str, int], *, by_grant: bool
) -> None:
    """Read the figures that are state into their gauges, just before a scrape (no await
    between this and the exposition: a scrape sees the figures it asked for)."""
    connection = await database.connect()
    try:
        by_state = (
            await connection.execute(
                select(t.services.c.state, func.count().label("count")).group_by(t.services.c.state)
            )
        ).all()
        attempts = (
            await connection.execute(select(func.count()).select_from(t.replica_attempts))
        ).scalar_one()
        replicas = (
            await connection.execute(select(func.count()).select_from(_distinct_replicas()))
        ).scalar_one()
    finally:
        await connection.rollback()
        await connection.close()
    metrics.INFERENCE_SERVICES.clear()
    for row in by_state:
        metrics.INFERENCE_SERVICES.labels(state=str(row.state)).set(int(row._mapping["count"]))
    metrics.ENGINE_RESTARTS.set(max(int(attempts) - int(replicas), 0))
    metrics.FEDERATION_IN_FLIGHT.clear()
    if not by_grant:
        metrics.FEDERATION_IN_FLIGHT.labels(grant=metrics.ALL_GRANTS).set(sum(in_flight.values()))
        return
    for grant, count in in_flight.items():
        metrics.FEDERATION_IN_FLIGHT.labels(grant=grant).set(count)


def _distinct_replicas() -> Subquery:
    attempt = t.replica_attempts.c
    return select(attempt.service_id, attempt.replica).distinct().subquery()

"""The model catalogue in SQL: models, the blobs each project owns, and who uses a model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.domain.catalogue import CatalogueModel


class SqlModels(_Repository):
    @staticmethod
    def _model(row: Any) -> CatalogueModel:
        return _record(CatalogueModel, t.models, row)

    async def add(self, model: CatalogueModel) -> None:
        values = _row_values(model, t.models)
        await self._c.execute(insert(t.models).values(id=model.id, **values))

    async def get(self, model_id: str) -> CatalogueModel | None:
        row = await self._first_where(t.models, "id", model_id)
        return None if row is None else self._model(row)

    async def list(self, project: str) -> list[CatalogueModel]:
        query = select(t.models).where(t.models.c.project == project)
        rows = await self._c.execute(query.order_by(t.models.c.created_at, t.models.c.id))
        return [self._model(row) for row in rows]

    async def delete(self, model_id: str) -> None:
        await self._delete_where(t.models, "id", model_id)

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

"""Catalogue records: a model is an immutable manifest stored under an ID in a project."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from ficc.domain.manifests import Manifest, canonical_sha256


class ModelView(TypedDict):
    """A catalogue record as the API shows it."""

    id: str
    name: str
    format: str
    manifest: dict[str, Any]
    sha256: str
    size_bytes: int
    provenance: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True)
class CatalogueModel:
    """A model in the catalogue; ``sha256`` is the manifest's canonical SHA-256."""

    id: str
    project: str
    name: str
    format: str
    manifest: dict[str, Any]
    sha256: str
    created_at: datetime
    provenance: dict[str, Any] | None = None
    created_by_grant: str | None = None

    @classmethod
    def of_manifest(
        cls,
        model_id: str,
        project: str,
        manifest: Manifest,
        created_at: datetime,
        *,
        created_by_grant: str | None = None,
    ) -> CatalogueModel:
        """The record of ``manifest``: its name, format and canonical SHA-256 taken from it."""
        return cls(
            id=model_id,
            project=project,
            name=manifest.name,
            format=manifest.format,
            manifest=manifest.to_json(),
            sha256=canonical_sha256(manifest),
            created_at=created_at,
            created_by_grant=created_by_grant,
        )

    def view(self) -> ModelView:
        """The record as the API shows it: the owner's API, and a peer that created it."""
        return {
            "id": self.id,
            "name": self.name,
            "format": self.format,
            "manifest": self.manifest,
            "sha256": self.sha256,
            "size_bytes": self.total_bytes(),
            "provenance": self.provenance,
            "created_at": self.created_at,
        }

    def blob_digests(self) -> list[str]:
        return [str(entry["sha256"]) for entry in self.manifest["files"]]

    def total_bytes(self) -> int:
        return sum(int(entry["size"]) for entry in self.manifest["files"])

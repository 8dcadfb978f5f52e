"""The model catalogue: the owner imports, lists, shows and deletes models; a peer creates and
removes records under a grant."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ficc.base.errors import Conflict, InvalidInput, LimitExceeded, NotFound
from ficc.base.ids import new_id
from ficc.base.json_types import JSONObject
from ficc.base.text import parse_short_text
from ficc.base.times import with_times_formatted
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.manifests import (
    Manifest,
    build_manifest,
    parse_safe_relative_path,
)
from ficc.domain.mutations import derived_entropy
from ficc.domain.principals import Principal
from ficc.services import audit, mutations
from ficc.services.mutations import MutationKey
from ficc.services.ports import (
    BlobStore,
    Clock,
    UnitOfWork,
    UnitOfWorkFactory,
    UserPathResolver,
)

MAX_MODEL_FILES = 256
MAX_MODEL_NAME_CHARS = 200


def _format_of(paths: list[Path]) -> str:
    suffixes = {path.suffix.lower() for path in paths}
    if ".gguf" in suffixes:
        return "gguf"
    if ".safetensors" in suffixes:
        return "safetensors"
    return "files"


def _resolve(resolve_path: UserPathResolver, path: str, field: str) -> Path:
    """Check a user's path; refusals name the field, never echo the path back."""
    try:
        return resolve_path(path, field=field)
    except InvalidInput as exc:
        raise InvalidInput(exc.message.replace(path, field), field=field) from exc


@dataclass(frozen=True, eq=False)
class Catalogue:
    """The project's models: the owner's imports and deletes, and the records a peer creates
    and removes under a grant (idempotent by ``mutation_id``)."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    blobs: BlobStore
    resolve_path: UserPathResolver
    """Which files the local owner may import (``add_model``)."""

    async def add_model(
        self, principal: Principal, project: str, *, name: object, paths: object
    ) -> CatalogueModel:
        """Import files (streamed, hashed, fsynced) and record the model; the local owner
        only."""
        principal.require_local_owner()
        model_name = parse_short_text(name, "name", MAX_MODEL_NAME_CHARS)
        if not isinstance(paths, list) or not paths or len(paths) > MAX_MODEL_FILES:
            raise InvalidInput(
                f"paths must be a list of 1 to {MAX_MODEL_FILES} file paths", field="paths"
            )
        files: list[Path] = []
        for index, path in enumerate(paths):
            if not isinstance(path, str):
                raise InvalidInput(f"paths[{index}] must be a string", field=f"paths[{index}]")
            files.append(_resolve(self.resolve_path, path, f"paths[{index}]"))
        names = [parse_safe_relative_path(file.name, field="paths") for file in files]
        if len(set(names)) != len(names):
            raise InvalidInput("paths must name files with distinct file names", field="paths")
        entries = []
        for index, file in enumerate(files):
            digest, size = await asyncio.to_thread(
                self.blobs.import_file, file, field=f"paths[{index}]"
            )
            entries.append((str(names[index]), size, str(digest)))
        manifest = build_manifest(model_name, _format_of(files), entries, {})
        model = CatalogueModel.of_manifest(
            new_id("model", secrets.token_bytes(16)), project, manifest, self.clock()
        )
        async with self.uow_factory() as uow:
            await uow.models.add(model)
            await uow.models.own_blobs(project, model.blob_digests())
            await audit.record_by(
                uow,
                self.clock,
                principal,
                "model.created",
                project=project,
                target=model.id,
                details={"name": model.name, "sha256": model.sha256},
            )
            await uow.commit()
        return model

    async def list_models(self, project: str) -> list[CatalogueModel]:
        async with self.uow_factory() as uow:
            return await uow.models.list(project)

    async def get_model(self, project: str, model_id: str) -> CatalogueModel:
        async with self.uow_factory() as uow:
            model = await uow.models.get(model_id)
        return _in_project(model, project, model_id, local=True)

    async def delete_model(self, principal: Principal, project: str, model_id: str) -> None:
        """Refused while a service uses the model; blobs no other model uses are removed."""
        async with self.uow_factory() as uow:
            orphans = await _delete_unused_model(
                uow, self.clock, project, model_id, actor=audit.actor_of(principal), peer=None
            )
            await uow.commit()
        await _remove_blobs(self.blobs, orphans)

    async def create_model_record(
        self,
        project: str,
        manifest: Manifest,
        *,
        key: MutationKey,
        created_by_grant: str,
        actor: str,
        peer: tuple[str, str],
        max_created: int,
    ) -> tuple[JSONObject, bool]:
        """A catalogue record from a peer's manifest: no files, never an existing record
        adopted.

        Its digests enter no project's set of blobs: the record resolves only to the blobs of
        the models its grant names (``resolves``), whatever digests the peer names.

        Its ID derives from the mutation, so a retry after a crash finds it instead of adding
        one.
        """
        async with self.uow_factory() as uow:
            mutation = await mutations.begin(uow, key)
            if mutation.result is not None:
                return mutation.result, True
            model_id = new_id("model", derived_entropy(key.scope, key.mutation_id, "model"))
            existing = await uow.models.get(model_id)
            if existing is None:
                # Every record the grant ever created counts, and every creation still
                # uncertain (this one's own among them).
                held = await mutations.count_held(uow, created_by_grant, "models.create")
                if held - 1 >= max_created:
                    raise LimitExceeded(
                        f"a grant can create at most {max_created} models",
                        details={"limit": "created_models", "allowed": max_created},
                    )
                existing = CatalogueModel.of_manifest(
                    model_id, project, manifest, self.clock(), created_by_grant=created_by_grant
                )
                await uow.models.add(existing)
                await audit.record(
                    uow,
                    self.clock,
                    action="model.created",
                    actor=actor,
                    project=project,
                    target=model_id,
                    details={"sha256": existing.sha256, "grant": created_by_grant},
                    peer_hypernet_id=peer[0],
                    peer_cluster_key=peer[1],
                )
            answer = await mutation.complete(with_times_formatted(existing.view()), self.clock())
            await uow.commit()
        return answer, False

    async def remove_model_record(
        self,
        project: str,
        model_id: str,
        *,
        key: MutationKey,
        actor: str,
        peer: tuple[str, str],
    ) -> tuple[JSONObject, bool]:
        """Remove a granted catalogue record that no service uses; blobs no other model uses
        go, as with a local delete."""
        async with self.uow_factory() as uow:
            mutation = await mutations.begin(uow, key)
            if mutation.result is not None:
                return mutation.result, True
            orphans = await _delete_unused_model(
                uow, self.clock, project, model_id, actor=actor, peer=peer
            )
            answer = await mutation.complete({"id": model_id, "removed": True}, self.clock())
            await uow.commit()
        await _remove_blobs(self.blobs, orphans)
        return answer, False


async def _delete_unused_model(
    uow: UnitOfWork,
    clock: Clock,
    project: str,
    model_id: str,
    *,
    actor: str,
    peer: tuple[str, str] | None,
) -> list[str]:
    """A local delete's or a peer's removal, audited: refused while a service uses the model.

    ``peer``: the remover's HyperNet ID and cluster key, or None for a local delete. A peer's
    refusals name neither the project nor a remedy; the owner's name both.
    Gives the blobs no model uses now, to remove after the commit.
    """
    model = _in_project(await uow.models.get(model_id), project, model_id, local=peer is None)
    users = await uow.model_usage.users_of_model(model_id)
    if users:
        remedy = "; remove the service first" if peer is None else ""
        raise Conflict(
            f"model {model_id} is used by the service {users[0]}{remedy}",
            details={"services": list(users)},
        )
    orphans = await _release(uow, model)
    await audit.record(
        uow,
        clock,
        action="model.deleted",
        actor=actor,
        project=project,
        target=model_id,
        peer_hypernet_id=None if peer is None else peer[0],
        peer_cluster_key=None if peer is None else peer[1],
    )
    return orphans


def _in_project(
    model: CatalogueModel | None, project: str, model_id: str, *, local: bool
) -> CatalogueModel:
    """``model`` if it is one of ``project``'s, else 404; only a local caller's refusal names
    the project."""
    if model is None or model.project != project:
        where = f" in project {project}" if local else ""
        raise NotFound(f"no model {model_id}{where}", details={"model": model_id})
    return model


async def _release(uow: UnitOfWork, model: CatalogueModel) -> list[str]:
    """Delete the record and its project's hold on its blobs; the blobs no model uses now."""
    await uow.models.delete(model.id)
    await uow.models.release_blobs(model.project, model.blob_digests())
    return [digest for digest in model.blob_digests() if not await uow.models.blob_in_use(digest)]


async def _remove_blobs(blobs: BlobStore, digests: list[str]) -> None:
    """After the commit that released them: a crash before leaves a file, never a dangling
    record."""
    for digest in digests:
        await asyncio.to_thread(blobs.remove, digest)


async def resolves(uow: UnitOfWork, model: CatalogueModel, digests: Sequence[str]) -> bool:
    """Whether ``digests`` of ``model`` resolve to blobs its project holds.

    A record the project imported or transferred resolves to the project's blobs
    (``blob_refs``). A record a peer created (``created_by_grant``) resolves only to blobs that
    reached the peer through that grant: the files of the models the grant names. Any other
    digest, even one the project holds for another model, reads exactly like a blob never
    stored: naming a digest is no capability, and no oracle beyond what the grant shows.
    """
    if not await uow.models.owns_blobs(model.project, digests):
        return False
    if model.created_by_grant is None:
        return True
    return set(digests) <= await _granted_blobs(uow, model.created_by_grant, model.project)


async def _granted_blobs(uow: UnitOfWork, grant_id: str, project: str) -> set[str]:
    """The blobs a grant's peer was given: those of the project's own models the grant names
    (never of the records the peer created itself, which prove nothing)."""
    grant = await uow.grants.get(grant_id)
    if grant is None or grant.project != project:
        return set()
    digests: set[str] = set()
    for model_id in sorted(grant.terms.models):
        model = await uow.models.get(model_id)
        if model is not None and model.project == project and model.created_by_grant is None:
            digests.update(model.blob_digests())
    return digests

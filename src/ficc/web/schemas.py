"""Request bodies: strict models, unknown fields refused. Pydantic lives only here, at the edge."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TokenCreate(Strict):
    scopes: list[str]
    projects: list[str] | None = None
    lifetime: int | None = None


class ProjectCreate(Strict):
    name: str


class SessionCreate(Strict):
    username: str
    password: str


class PasswordSet(Strict):
    password: str


class ModelCreate(Strict):
    name: str
    paths: list[str]


class ServiceReplace(Strict):
    revision: int
    spec: dict[str, Any]


class ServiceControl(Strict):
    revision: int
    operation: str
    acknowledge_unknown: bool = False


class PreviewRequest(Strict):
    spec: dict[str, Any]


class Configuration(Strict):
    agent_directory: str
    label: str | None = None


class OfferCreate(Strict):
    service: str
    scopes: list[str]
    ticket: str | None = None


class OfferApprove(Strict):
    revision: int
    grant: dict[str, Any]


class OfferFinish(Strict):
    receipt: str


class Refresh(Strict):
    grant: str | None = None


class RemoteRequest(Strict):
    operation: str
    body: dict[str, Any] = {}
    mutation_id: str | None = None


class Acquire(Strict):
    model: str

"""How a credential's secret is kept and how account records get their IDs.

Secrets are shown once and stored only as SHA-256 digests: they carry 256 bits of entropy,
so a slow password hash would add nothing.
"""

from __future__ import annotations

import hashlib
import secrets

from ficc.base.ids import new_id
from ficc.base.json_types import JSONObject
from ficc.domain.principals import Principal
from ficc.services import audit
from ficc.services.ports import Clock, UnitOfWork


def digest(secret: str) -> str:
    """What is stored of a secret: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_record_id(kind: str) -> str:
    """A fresh random ID of ``kind`` (``user``, ``token``, ``session``, ``login_link``)."""
    return new_id(kind, secrets.token_bytes(16))


async def record_change(
    uow: UnitOfWork,
    clock: Clock,
    principal: Principal,
    action: str,
    target: str,
    details: JSONObject | None = None,
) -> None:
    """Audit a change a local principal made to an account record (cluster-wide: no project)."""
    await audit.record_by(
        uow, clock, principal, action, project=None, target=target, details=details
    )

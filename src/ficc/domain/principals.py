"""Who is asking: the principal behind a request, and the checks every route applies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ficc.base.errors import PermissionDenied
from ficc.domain.scopes import LOCAL_SCOPES
from ficc.domain.token_limits import TokenRestrictions

Via = Literal["token", "session", "socket"]
ALL_PROJECTS = "*"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller of the local API.

    ``projects`` holds the admitted project names, or :data:`ALL_PROJECTS` for the owner.
    ``is_owner`` marks the local owner: the owner account authenticated on this cluster.
    """

    user_id: str
    username: str
    scopes: frozenset[str]
    projects: frozenset[str]
    is_owner: bool
    via: Via
    token_id: str | None = None
    session_id: str | None = None
    restrictions: TokenRestrictions | None = None
    """A restricted token's rules (None: the credential is not restricted)."""

    def admitted_to(self, project: str) -> bool:
        return ALL_PROJECTS in self.projects or project in self.projects

    def require_scope(self, *scopes: str) -> None:
        """Refuse unless the principal holds every scope named."""
        missing = [scope for scope in scopes if scope not in self.scopes]
        if missing:
            raise PermissionDenied(
                f"this credential lacks the scope {missing[0]}",
                details={"missing_scope": missing[0]},
            )

    def require_project(self, project: str) -> None:
        if not self.admitted_to(project):
            raise PermissionDenied(
                f"this credential is not admitted to the project {project}",
                details={"project": project},
            )

    def require_local_owner(self) -> None:
        if not self.is_owner:
            raise PermissionDenied(
                "only the local owner may do this", details={"requires": "local_owner"}
            )


def owner_principal(user_id: str, username: str, *, via: Via) -> Principal:
    """The local owner holds every scope in every project."""
    return Principal(
        user_id=user_id,
        username=username,
        scopes=frozenset(LOCAL_SCOPES),
        projects=frozenset({ALL_PROJECTS}),
        is_owner=True,
        via=via,
    )

"""Accounts: the owner, API tokens, password sessions and one-time login links.

:class:`Accounts` holds one service per concept, each in its own module, and callers reach the
one that owns their use case (``accounts.tokens.create_token``, ``accounts.sessions.login``):

- :class:`~.owner.Owner`: the local owner, as the control socket presents it;
- :class:`~.tokens.Tokens`: API tokens, minted, listed, revoked and authenticated;
- :class:`~.sessions.Sessions`: password login, the session cookie, logout, the password;
- :class:`~.login_links.LoginLinks`: one-time login links.

What ``ficc init`` does inside its own transaction (:func:`ensure_owner`, :func:`mint_token`,
:func:`adopt_owner_token`) takes the caller's unit of work instead; :mod:`.credentials` is how
a secret is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from ficc.domain.accounts import LoginThrottle
from ficc.services.accounts.login_links import LoginLinks
from ficc.services.accounts.owner import Owner, adopt_owner_token, ensure_owner
from ficc.services.accounts.sessions import IssuedSession, Sessions
from ficc.services.accounts.tokens import (
    CredentialCache,
    IssuedToken,
    TokenLimitsView,
    Tokens,
    mint_token,
)
from ficc.services.ports import Clock, PasswordHasher, UnitOfWorkFactory

__all__ = [
    "Accounts",
    "CredentialCache",
    "IssuedSession",
    "IssuedToken",
    "LoginLinks",
    "Owner",
    "Sessions",
    "TokenLimitsView",
    "Tokens",
    "adopt_owner_token",
    "ensure_owner",
    "mint_token",
]


@dataclass(frozen=True, eq=False)
class Accounts:
    """The account services over one store, each a public attribute."""

    owner: Owner
    tokens: Tokens
    sessions: Sessions
    login_links: LoginLinks

    @classmethod
    def wire(
        cls,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        hasher: PasswordHasher,
        *,
        limits: TokenLimitsView | None = None,
    ) -> Accounts:
        """The four over ``uow_factory``, with this process's own credential cache and login
        throttle (``limits``: what the token listing shows of restricted tokens)."""
        return cls(
            owner=Owner(uow_factory),
            tokens=Tokens(uow_factory, clock, CredentialCache(), limits),
            sessions=Sessions(uow_factory, clock, hasher, LoginThrottle()),
            login_links=LoginLinks(uow_factory, clock),
        )

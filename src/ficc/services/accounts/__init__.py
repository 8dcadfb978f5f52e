"""Accounts: the owner, API tokens, password sessions and one-time login links.

The web layer and the composition root call these as ``accounts.create_token(...)``; the
modules behind them are one concept each (:mod:`.owner`, :mod:`.tokens`, :mod:`.sessions`,
:mod:`.login_links`, and :mod:`.credentials`, how a secret is kept).
"""

from __future__ import annotations

from ficc.services.accounts.login_links import consume_login_link, create_login_link
from ficc.services.accounts.owner import adopt_owner_token, ensure_owner, local_owner
from ficc.services.accounts.sessions import (
    IssuedSession,
    authenticate_session,
    login,
    logout,
    purge_expired,
    set_password,
)
from ficc.services.accounts.tokens import (
    CredentialCache,
    IssuedToken,
    authenticate_token,
    create_token,
    list_tokens,
    mint_token,
    revoke_token,
    visible_token,
)

__all__ = [
    "CredentialCache",
    "IssuedSession",
    "IssuedToken",
    "adopt_owner_token",
    "authenticate_session",
    "authenticate_token",
    "consume_login_link",
    "create_login_link",
    "create_token",
    "ensure_owner",
    "list_tokens",
    "local_owner",
    "login",
    "logout",
    "mint_token",
    "purge_expired",
    "revoke_token",
    "set_password",
    "visible_token",
]

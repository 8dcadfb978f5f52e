"""Typed, opaque IDs, made only by ``new_id`` and checked by ``parse_id``.

An ID is ``<prefix>_<26 lowercase base32 characters>`` (128 bits of entropy or of a digest).
The entropy is a parameter, so this module reads no randomness: callers pass
``secrets.token_bytes(16)``, or a digest when an ID must derive from a mutation.
"""

from __future__ import annotations

import base64
import re
from typing import Final, NewType

from ficc.base.errors import InvalidInput

ProjectName = NewType("ProjectName", str)
MutationId = NewType("MutationId", str)

ID_ENTROPY_BYTES: Final = 16

PREFIXES: Final = {
    "user": "usr",
    "token": "tok",
    "session": "ses",
    "login_link": "lnk",
    "model": "mdl",
    "service": "svc",
    "node": "nod",
    "peer": "per",
    "offer": "ofr",
    "grant": "grt",
    "transfer": "xfr",
    "attempt": "att",
    "audit": "aud",
    "route": "rte",
}

_BODY = re.compile(r"^[a-z2-7]{26}$")
_MUTATION_ID = re.compile(r"^[0-9a-f]{32}$")
_PROJECT_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def new_id(kind: str, entropy: bytes) -> str:
    """Format an ID of ``kind`` from at least 16 bytes of entropy (or a digest)."""
    if len(entropy) < ID_ENTROPY_BYTES:
        raise ValueError("an ID needs at least 16 bytes of entropy")
    body = base64.b32encode(entropy[:ID_ENTROPY_BYTES]).decode("ascii").rstrip("=").lower()
    return f"{PREFIXES[kind]}_{body}"


def parse_id(kind: str, text: object, *, field: str | None = None) -> str:
    """Return ``text`` if it is a well-formed ID of ``kind``, else refuse naming the field."""
    name = field or kind
    prefix = PREFIXES[kind] + "_"
    if (
        not isinstance(text, str)
        or not text.startswith(prefix)
        or not _BODY.fullmatch(text[len(prefix) :])
    ):
        raise InvalidInput(f"{name} must be a {kind} ID like {prefix}…", field=name)
    return text


def parse_mutation_id(text: object, *, field: str = "mutation_id") -> MutationId:
    """A mutation_id is exactly 32 lowercase hexadecimal characters."""
    if not isinstance(text, str) or not _MUTATION_ID.fullmatch(text):
        raise InvalidInput(f"{field} must be 32 lowercase hexadecimal characters", field=field)
    return MutationId(text)


def parse_project_name(text: object, *, field: str = "project") -> ProjectName:
    """Project names are 1–63 characters of lowercase letters, digits and '-'."""
    if not isinstance(text, str) or not _PROJECT_NAME.fullmatch(text):
        raise InvalidInput(
            f"{field} must be 1-63 lowercase letters, digits or '-', starting with a letter "
            "or digit",
            field=field,
        )
    return ProjectName(text)

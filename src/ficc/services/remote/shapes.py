"""The JSON shapes the protocol document states: an object's members and what each means.

Every row of :data:`~ficc.services.remote.table.OPERATIONS` names its :class:`About`
(:mod:`ficc.services.remote.meanings`); ``scripts/make-catalogue`` renders them into
``docs/protocol.md`` §5. A body's members are the fields its row takes (the server checks
requests against them), and the catalogue tests hold an answer's members to what the handlers
answer. An independent implementation had to
guess these meanings from prose (the interop review), so they are stated once, beside the
table the server dispatches by. The shapes named here recur in several answers.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Shape:
    """A JSON object: its members in the document's order, each with what it holds and means.

    A member named ``"x?"`` is optional. A shape with a ``name`` is defined once in the
    document and referred to by that name elsewhere.
    """

    members: tuple[tuple[str, str], ...]
    name: str = ""
    note: str = ""
    """Said after a named shape's definition: rules that are not one member's."""

    @property
    def names(self) -> frozenset[str]:
        """The members' names, optional ones included (without their ``?``)."""
        return frozenset(member.rstrip("?") for member, _ in self.members)

    @property
    def required(self) -> frozenset[str]:
        return frozenset(member for member, _ in self.members if not member.endswith("?"))

    def definition(self) -> str:
        """The object spelled out: ``{"a": meaning, "b"?: meaning}``."""
        shown = []
        for member, meaning in self.members:
            quoted = f'"{member.rstrip("?")}"' + ("?" if member.endswith("?") else "")
            shown.append(f"{quoted}: {meaning}" if meaning else quoted)
        return "{" + ", ".join(shown) + "}"

    def reference(self) -> str:
        """How an answer names it: by its name when it has one, else spelled out."""
        return self.name or self.definition()

    def fields(self) -> str:
        """The members as a body's fields: ``name``: meaning; ``other``?: meaning."""
        shown = []
        for member, meaning in self.members:
            name = f"`{member.rstrip('?')}`" + ("?" if member.endswith("?") else "")
            shown.append(f"{name}: {meaning}" if meaning else name)
        return "; ".join(shown) or "`{}`"


@dataclass(frozen=True)
class About:
    """One operation as the document states it: the body's members, the answer's shape (None:
    not one JSON object, ``answer_note`` says what), what follows it, and for an operation
    outside a grant its errors and what a repeat gets."""

    body: Shape
    answer: Shape | None
    answer_note: str = ""
    errors: str = ""
    repeat: str = ""

    def answer_text(self) -> str:
        if self.answer is None:
            return self.answer_note
        shown = self.answer.reference()
        return f"{shown}{self.answer_note}" if self.answer_note else shown


def shape(text: str, name: str = "", note: str = "") -> Shape:
    """A shape written as lines ``member: meaning`` (``member?`` when optional); a line
    indented further goes on with the meaning above it."""
    members: list[tuple[str, str]] = []
    for line in textwrap.dedent(text).strip("\n").splitlines():
        if line.startswith(" "):
            member, meaning = members.pop()
            members.append((member, f"{meaning} {line.strip()}"))
        else:
            member, _, meaning = line.partition(": ")
            members.append((member, meaning))
    return Shape(tuple(members), name, note)


RECEIPT: Final = "RECEIPT"
"""The acceptance receipt, defined in §8."""

SPEC: Final = shape(
    r"""
    name: 1–63 letters, digits, `.`, `_` or `-`, starting with a letter or digit
    model: a model ID the grant includes (or created)
    runtime: "llama.cpp" \| "vllm"
    node?: a node ID the grant includes (default: the grantor's own node)
    replicas?: 1–16 (default 1)
    options?: the runtime's options
    restart?: `on-failure` (default) \| `always` \| `never`
    """,
    name="SPEC",
    note=(
        "a crashed engine is started again only while the grant is active; a peer may not name the "
        "`openai` runtime, a `base_url` or any URL in `options` (`forbidden`, `reason: "
        "upstream_refused`)"
    ),
)
SERVICE: Final = shape(
    r"""
    id
    spec: SPEC without `options`, its defaults filled in
    node: the node it runs on
    state: `stopped` \| `starting` \| `running` \| `draining` \| `failed`
    desired: `running` \| `stopped`: what was last asked
    revision: an integer, bumped by every change
    error: null, or a fixed text: the engine's own is never shown
    created_by_grant: a grant ID or null
    unknown_attempts: how many launches have an unknown outcome (a `start` then needs
        `acknowledge_unknown`)
    replicas: [{"replica", "state", "exit_code" (or null)}…]
    created_at
    updated_at
    """,
    name="SERVICE",
    note="a service as a peer sees it: no `options`, engine log lines, PIDs or ports",
)
MANIFEST: Final = shape(
    r"""
    name
    format
    files: [{"path", "size", "sha256": the file's SHA-256}…]
    metadata: an object
    """,
    name="MANIFEST",
    note="a model's manifest: its files by path, size and SHA-256",
)
GRANT: Final = shape(
    r"""
    id
    peer: the caller's peer ID on the grantor
    state: `active` \| `revoked` \| `expired`
    scopes: the remote scopes given
    services: service IDs
    models: model IDs
    nodes: node IDs
    lifetime: seconds from `created_at` to `expires_at`
    concurrent: requests at once
    requests: requests in all
    transfer_bytes: bytes of `models.range` in all
    request_bytes: the largest request body
    response_bytes: the largest answer
    stop_on_revoke: whether its services stop when it ends
    tokens: prompt and completion tokens in all, or null
    tokens_per_minute: the tokens one minute allows, or null
    requests_per_minute: the requests one minute allows, or null
    created_at
    expires_at
    revoked_at: when it was revoked, or null
    in_flight: requests running now
    remaining: {"requests", "transfer_bytes", "tokens" (null when not limited)}
    used: {"requests", "prompt_tokens", "completion_tokens", "transfer_bytes"}
    windows: {"requests_per_minute", "tokens_per_minute"}, each null when the grant sets no such
        rule, else {"remaining", "reset_seconds", "used"}
    created_services: IDs of the services made through the grant
    created_models: IDs of the models made through the grant
    """,
    name="GRANT",
    note="a grant as its grantee is shown it; times are RFC 3339 with `Z`",
)
NAMED: Final = (SPEC, SERVICE, MANIFEST, GRANT)
"""The named shapes, in the order the document defines them."""

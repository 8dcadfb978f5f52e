"""The audit log as a hash chain: each row carries the digest of the one before it, a head is
signed with the cluster key every :data:`HEAD_INTERVAL` rows, and a deleted row leaves a signed
tombstone that keeps its digest, so the chain has no hole.

Encoding, digest and signature as the acceptance receipt's (``docs/security.md``): a row's
``digest`` is the SHA-256 of the RFC 8785 encoding of its body; a signature is Ed25519 by the
cluster key over a context string followed by the 32 bytes of a digest. Pure: the key and the
verifying function are parameters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypedDict

import rfc8785

from ficc.domain.audit import AuditEntry
from ficc.domain.receipts import b64, unb64

ROW_KIND: Final = "ficc.audit/1"
HEAD_KIND: Final = "ficc.audit-head/1"
TOMBSTONE_KIND: Final = "ficc.audit-tombstone/1"
HEAD_CONTEXT: Final = b"ficc.audit/1 signed head\x00"
TOMBSTONE_CONTEXT: Final = b"ficc.audit/1 tombstone\x00"
GENESIS: Final = "0" * 64
"""The ``prev`` of the first row."""
HEAD_INTERVAL: Final = 32
"""A head is signed in the transaction of every row whose ``seq`` is a multiple of this: the
verifier then knows which signed heads must exist, so a deleted head is a break too (rows after
the last signed head are signed by none: at most ``HEAD_INTERVAL - 1`` of them)."""
TOMBSTONE_ACTION: Final = "audit.tombstone"
"""What a tombstoned row's ``action`` reads; its other content is gone."""

Sign = Callable[[bytes], bytes]
Verify = Callable[[bytes, bytes, bytes], bool]


def _sha256(body: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def row_body(entry: AuditEntry, *, seq: int, prev: str, at: str) -> dict[str, Any]:
    """What a row's digest covers: every column but the digest, ``at`` as the stored text."""
    return {
        "kind": ROW_KIND,
        "seq": seq,
        "prev": prev,
        "at": at,
        "project": entry.project,
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "peer_hypernet_id": entry.peer_hypernet_id,
        "peer_cluster_key": entry.peer_cluster_key,
        "details": entry.details,
    }


def row_digest(entry: AuditEntry, *, seq: int, prev: str, at: str) -> str:
    return _sha256(row_body(entry, seq=seq, prev=prev, at=at))


def head_due(seq: int) -> bool:
    return seq % HEAD_INTERVAL == 0


def _head_message(seq: int, digest: str) -> bytes:
    body = {"kind": HEAD_KIND, "seq": seq, "digest": digest}
    return HEAD_CONTEXT + bytes.fromhex(_sha256(body))


def sign_head(seq: int, digest: str, sign: Sign) -> str:
    """The signature of the head at ``seq``, base64url without padding."""
    return b64(sign(_head_message(seq, digest)))


def tombstone_body(*, seq: int, prev: str, digest: str, at: str) -> dict[str, Any]:
    return {"kind": TOMBSTONE_KIND, "seq": seq, "prev": prev, "digest": digest, "at": at}


def _tombstone_message(*, seq: int, prev: str, digest: str, at: str) -> bytes:
    body = tombstone_body(seq=seq, prev=prev, digest=digest, at=at)
    return TOMBSTONE_CONTEXT + bytes.fromhex(_sha256(body))


def sign_tombstone(*, seq: int, prev: str, digest: str, at: str, sign: Sign) -> str:
    """The signature a tombstone carries: the row it replaces is named by its digest alone."""
    return b64(sign(_tombstone_message(seq=seq, prev=prev, digest=digest, at=at)))


class ChainHead(TypedDict):
    seq: int
    digest: str


class BrokenLinkView(TypedDict):
    seq: int
    reason: str
    message: str


class ChainReport(TypedDict):
    """What a verification found, as the CLI prints it."""

    intact: bool
    rows: int
    tombstones: int
    head: ChainHead
    signed_heads: int
    signed_through: int
    broken: BrokenLinkView | None


@dataclass(frozen=True)
class ChainRow:
    """A row as stored: its content (None for a tombstone), links and stored ``at`` text."""

    seq: int
    at: str
    prev: str | None
    digest: str | None
    entry: AuditEntry | None
    tombstone: str | None = None
    """The tombstone's signature; set only when the row's content was deleted."""


@dataclass(frozen=True)
class SignedHead:
    seq: int
    digest: str
    signature: str


@dataclass(frozen=True)
class Break:
    """The first broken link: the ``seq`` it names and why."""

    seq: int
    reason: str
    message: str


@dataclass
class ChainVerifier:
    """Checks rows fed in ``seq`` order against each other and the signed heads.

    Reasons: ``missing`` (a row dropped: the seq expected), ``prev_mismatch`` (a row reordered,
    or one before it rewritten), ``digest_mismatch`` (its content changed), ``tombstone_signature``,
    ``head_signature`` (a forged head), ``head_mismatch`` (the signed head names another digest),
    ``head_missing`` (no signed head where one is due).
    """

    public_key: bytes
    verify: Verify
    heads: dict[int, SignedHead]
    due_through: int | None = None
    """The last row when ``heads`` was read: rows appended later may be read without their
    heads (a log verified while it grows), so heads are required only up to it."""
    rows: int = 0
    tombstones: int = 0
    last_seq: int = 0
    last_digest: str = GENESIS
    broken: Break | None = None

    def __post_init__(self) -> None:
        self._first_head = min(self.heads, default=0)

    def _due(self, seq: int) -> bool:
        """Whether a signed head must exist at ``seq``: at every multiple of the interval,
        except before the first head (rows the migration chained: the first head, signed at
        the first start after it, covers them) and after ``due_through``."""
        if self.due_through is not None and seq > self.due_through:
            return False
        return head_due(seq) and seq >= self._first_head

    def feed(self, rows: Iterable[ChainRow]) -> bool:
        """Check the next rows; False once the chain is broken (stop feeding)."""
        for row in rows:
            self.broken = self._check(row)
            if self.broken is not None:
                return False
            self.rows += 1
            self.last_seq, self.last_digest = row.seq, row.digest or ""
        return True

    def finish(self) -> Break | None:
        """The first break, also one past the last row: a signed head naming a row not there."""
        if self.broken is None:
            beyond = sorted(seq for seq in self.heads if seq > self.last_seq)
            if beyond:
                seq = self.last_seq + 1
                self.broken = Break(
                    seq, "missing", f"row {seq} is missing: a signed head names row {beyond[0]}"
                )
        return self.broken

    def _check(self, row: ChainRow) -> Break | None:
        expected = self.last_seq + 1
        if row.seq != expected:
            return Break(expected, "missing", f"row {expected} is missing")
        if row.prev != self.last_digest:
            return Break(
                row.seq, "prev_mismatch", f"row {row.seq} does not follow row {self.last_seq}"
            )
        if row.digest is None:
            return Break(row.seq, "digest_mismatch", f"row {row.seq} has no digest")
        if row.entry is None or row.tombstone is not None:
            if not self._tombstone_holds(row):
                return Break(
                    row.seq,
                    "tombstone_signature",
                    f"row {row.seq} is a tombstone the cluster key did not sign",
                )
            self.tombstones += 1
        elif row_digest(row.entry, seq=row.seq, prev=row.prev, at=row.at) != row.digest:
            return Break(row.seq, "digest_mismatch", f"row {row.seq} was changed")
        return self._check_head(row.seq, row.digest)

    def _tombstone_holds(self, row: ChainRow) -> bool:
        if row.tombstone is None or row.prev is None or row.digest is None:
            return False
        try:
            signature = unb64(row.tombstone)
        except ValueError:
            return False
        message = _tombstone_message(seq=row.seq, prev=row.prev, digest=row.digest, at=row.at)
        return self.verify(self.public_key, message, signature)

    def _check_head(self, seq: int, digest: str) -> Break | None:
        head = self.heads.get(seq)
        if head is None:
            if self._due(seq):
                return Break(seq, "head_missing", f"the signed head at row {seq} is missing")
            return None
        try:
            signature = unb64(head.signature)
        except ValueError:
            signature = b""
        if not self.verify(self.public_key, _head_message(head.seq, head.digest), signature):
            return Break(
                seq, "head_signature", f"the head at row {seq} is not signed by the cluster key"
            )
        if head.digest != digest:
            return Break(seq, "head_mismatch", f"the signed head at row {seq} names another row")
        return None

    def report(self) -> ChainReport:
        """The outcome as the CLI prints it."""
        signed = max((seq for seq in self.heads if seq <= self.last_seq), default=0)
        broken = self.broken
        return {
            "intact": broken is None,
            "rows": self.rows,
            "tombstones": self.tombstones,
            "head": {"seq": self.last_seq, "digest": self.last_digest},
            "signed_heads": len(self.heads),
            "signed_through": signed,
            "broken": None
            if broken is None
            else {"seq": broken.seq, "reason": broken.reason, "message": broken.message},
        }

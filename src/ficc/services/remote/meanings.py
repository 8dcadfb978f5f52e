"""What each operation's body fields and answer mean, one :class:`About` per row of the
operation table (the named shapes they refer to are in :mod:`ficc.services.remote.shapes`)."""

from __future__ import annotations

from typing import Final

from ficc.services.remote.shapes import SERVICE, About, Shape, shape

NO_BODY: Final = Shape(())
_DONE: Final = Shape(())
_REMOVED: Final = shape(
    r"""
    id
    removed: true
    """
)

PAIRING_OFFER: Final = About(
    shape(
        r"""
        offer: the offer's ID (`ofr_…`), chosen by the requester
        scopes: non-empty list of remote scopes, no repeats
        label?: string ≤ 100 characters or null
        expires_at?: string ≤ 64 characters (ignored: the service gives 7 days)
        """
    ),
    shape(
        r"""
        label: the service's label
        offer: the offer's ID
        """
    ),
    errors=(
        "`invalid_request`; `conflict` (ID used before, by another peer, or with other scopes or "
        "label); no `limit_exceeded`: past 4 waiting offers of the ID, 16 of its source address or "
        "256 in all, the oldest waiting offer of that ID, that source or the source holding the "
        "most is evicted"
    ),
    repeat="the same offer again: the same answer",
)
PAIRING_RECEIPT: Final = About(
    shape(
        r"""
        offer: the offer's ID (`ofr_…`), chosen by the requester
        receipt: the RECEIPT (§8) the service signed
        """
    ),
    _DONE,
    errors=(
        "`not_found` (not an offer of this peer); `conflict` (the receipt does not answer the "
        "offer)"
    ),
    repeat="—",
)
PAIRING_FETCH: Final = About(
    shape("offer: the offer's ID (`ofr_…`), chosen by the requester"),
    shape("receipt: RECEIPT (§8)"),
    errors="`not_found`; `conflict` (not approved)",
    repeat="yes",
)
PAIRING_FINISH: Final = About(
    shape(
        r"""
        offer: the offer's ID (`ofr_…`), chosen by the requester
        receipt: the receipt's `digest` (64 hex)
        """
    ),
    shape("peer: the service's peer ID (`per_…`)"),
    errors="`not_found`; `conflict` (not approved, another digest, pairing gone)",
    repeat="the same answer",
)
PAIRING_DISCARD: Final = About(
    shape("offer: the offer's ID (`ofr_…`), chosen by the requester"),
    _DONE,
    errors="`not_found`",
    repeat="`{}` again",
)
PEER_REMOVED: Final = About(NO_BODY, _DONE, errors="`forbidden` (`reason: not_paired`)", repeat="—")
GRANT_REVOKED: Final = About(
    shape("grant: the ID of the grant that ended"),
    _DONE,
    errors="`forbidden` (`not_paired`)",
    repeat="yes",
)
GRANTS_LIST: Final = About(
    NO_BODY,
    shape("grants: [GRANT…]"),
    ": the grants given to the caller, retired ones left out",
    errors="`forbidden` (`not_paired`)",
    repeat="yes",
)
USAGE_RECEIPTS: Final = About(
    shape(
        r"""
        grant: one of the caller's grants (active, revoked, expired or retired)
        after?: a seq ≥ 0 (default 0: from the first)
        limit?: 1–100 (default 100)
        """
    ),
    shape(
        r"""
        receipts: [{"seq", "receipt": the usage receipt}…] in seq order, at most `limit`
        head: {"seq", "digest"}: the grant's last receipt (`0` and 64 zeros before the first)
        next: the last seq shown when more follow, else null
        """
    ),
    '; a usage receipt as in "Usage receipts" above; the answer is at most 256 KiB',
    errors=(
        "`forbidden` (`not_paired`); `not_found` (not a grant of the caller); `invalid_request` "
        "naming `after` or `limit`"
    ),
    repeat="yes",
)
DISCOVER: Final = About(
    NO_BODY,
    shape(
        r"""
        models: [MODEL_ID…]
        nodes: [NODE_ID…]
        services: [{"alias": the service's name, "capabilities": ["chat.completions", "completions"]
            or ["embeddings"], "id", "model", "state"}…]
        """
    ),
    ": what the grant includes or created, sorted by ID",
)
RESOURCES: Final = About(
    NO_BODY,
    shape(
        r"""
        nodes: [{"id", "name", "local", "ray_node_id", "labels", "capacity": {"cpu_count",
            "memory_bytes", "gpus": [{"index", "name", "memory_bytes"}]}, "availability":
            {"available", "reason", "memory_available_bytes", "gpus": [{"index",
            "memory_available_bytes"}]}, "updated_at"}…]
        """
    ),
    ": the granted nodes",
)
INFERENCE_PREPARE: Final = About(
    NO_BODY,
    shape(
        r"""
        models: [{"id", "name", "revision" (the model's canonical SHA-256), "format", "ready" (every
            file stored)}…]
        offers: [{"node", "runtime", "available", "reasons": [TEXT…]}…]
        """
    ),
    ": the granted models, and each granted node × runtime",
)
INFERENCE_PREVIEW: Final = About(
    shape("spec: SPEC"),
    shape(
        r"""
        fits: BOOL
        reasons: [TEXT…] (why not; empty when it fits)
        warnings: [TEXT…]
        node: NODE_ID or null
        spec: the spec with its defaults
        requirements: {"memory_bytes", "cpu_slots", "gpus"}
        """
    ),
    "; nothing is created",
)
INFERENCE_GET: Final = About(shape("service: a service ID the grant includes or created"), SERVICE)
INFERENCE_CREATE: Final = About(
    shape("spec: SPEC"),
    SERVICE,
    " (state `stopped`, revision 1); at most 64 services per grant (`limit_exceeded`, `limit: "
    "created_services`)",
)
INFERENCE_REPLACE: Final = About(
    shape(
        r"""
        service: one this grant created
        revision: the SERVICE's current revision
        spec: SPEC with the same runtime
        """
    ),
    SERVICE,
    "; another revision is `revision_mismatch`",
)
INFERENCE_CONTROL: Final = About(
    shape(
        r"""
        service: a service ID the grant includes or created
        revision: the SERVICE's current revision
        operation: `start` \| `drain` \| `stop` \| `remove` (`remove` only on a service this grant
            created)
        acknowledge_unknown?: true only with `start`, after replicas whose launch is unknown
        """
    ),
    SERVICE,
    ' (after `stop`: once its replicas ended); after `remove`: `{"id", "removed": true}`',
)
MODELS_MANIFEST: Final = About(
    shape("model: a model ID the grant includes"),
    shape(
        r"""
        manifest: MANIFEST
        model: the model's ID
        sha256: the SHA-256 of the manifest's RFC 8785 encoding
        """
    ),
)
MODELS_RANGE: Final = About(
    shape(
        r"""
        model: a model ID the grant includes
        file: a `path` of the manifest's `files`
        digest: that file's `sha256` (not the manifest's)
        offset: ≥ 0
        length: 1 byte to 256 MiB, within the file
        """
    ),
    None,
    "CHUNKs of the file's raw bytes from `offset` (at most 1 MiB each), then `END` (total = "
    "`length`); the range is charged to `transfer_bytes` before the first byte "
    "(`limit_exceeded`, `limit: transfer_bytes`) and what was not sent is given back",
)
INFERENCE_INVOKE: Final = About(
    shape(
        r"""
        service: a service ID the grant includes or created
        path: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings` or `/v1/responses`
            (`chat/completions` without the prefix is accepted)
        body: the OpenAI request body for that path; its `model` may be left out (the service
            decides)
        """
    ),
    None,
    "the OpenAI answer for that path (a chat completion, a completion, an embeddings list or a "
    "`response` object, with `usage`), at most the grant's `response_bytes` compact, and the "
    "RESPONSE carries the grantor's count as `usage` beside `result` (\"Usage at the end of an "
    'answer" above); with `body.stream: true`, CHUNKs each holding one server-sent event '
    "(`data: {…}\\n\\n`, the last `data: [DONE]\\n\\n`; for `/v1/responses` OpenAI's typed "
    "events `event: response.…\\ndata: {…}\\n\\n`, a CHUNK holding the events one engine "
    "chunk makes, the last `response.completed` or `response.incomplete`, no `[DONE]`), then "
    "one CHUNK with the event `event: ficc.usage` (the count), then `END`; past "
    '`response_bytes` the last OpenAI event is `data: {"error": {"code": "limit_exceeded", …}}`; '
    "an answer ended by an `ERROR` or a cancel carries no count",
)
MODELS_CREATE: Final = About(
    shape("manifest: MANIFEST (no file is sent: the record waits for its blobs)"),
    shape(
        r"""
        id
        name
        format
        manifest: MANIFEST
        sha256: the manifest's canonical SHA-256
        size_bytes: the files' sizes summed
        provenance: null, or an object saying where the model came from
        created_at
        """
    ),
    ": the model record; at most 64 per grant",
)
MODELS_REMOVE: Final = About(
    shape("model: a model the grant includes or created that no service uses (else `conflict`)"),
    _REMOVED,
    "; its blobs go unless another model uses them",
)
OPERATION_STATUS: Final = About(
    shape("id: the `mutation_id` of one of this grant's mutations"),
    shape(
        r"""
        id: the `mutation_id`
        operation: the mutation's operation
        state: `uncertain` \| `completed` \| `refused` \| `not_applied`
        result: the answer the mutation gave (null until it completed)
        advice: what to do next (null when settled)
        """
    ),
    "; asked while nothing else of the grant runs, an `uncertain` mutation becomes "
    "`not_applied` (nothing happened; a retry with the same ID and arguments applies it once); "
    "an unknown ID is `not_found`",
)

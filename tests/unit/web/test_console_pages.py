"""The console's pages as rendered, fast: what a person sees of a pairing and of a grant.

The templates are rendered with the values the presenters give (a grant with the fields
``render_grant`` shows, a peer's copy with its times as text, an offer with its signed
receipt); the browser tier drives the same pages against two real clusters.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.requests import Request

from ficc.base.errors import InvalidInput
from ficc.base.times import format_time
from ficc.base.units import MiB
from ficc.web.console import TEMPLATES, grant_from_form, grouped, standing, usage_chart

NOW = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
DIGEST = "4f1c" * 16
ALL_SCOPES = frozenset({"federation:read", "federation:manage", "resources:read"})
TERMS: dict[str, Any] = {
    "scopes": ["inference:invoke", "models:read"],
    "services": ["svc_1"],
    "models": ["mdl_1"],
    "nodes": [],
    "lifetime": 86400,
    "concurrent": 2,
    "requests": 50,
    "transfer_bytes": 4 * MiB,
    "request_bytes": MiB,
    "response_bytes": 8 * MiB,
    "stop_on_revoke": True,
}


def _render(template: str, path: str = "/ui/p/default", **values: Any) -> str:
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [],
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "root_path": "",
    }
    context: dict[str, Any] = {
        "request": Request(scope),
        "now": NOW,
        "label": "beta-lab",
        "user": "owner",
        "project": "default",
        "csrf_headers": "{}",
        "scopes": ALL_SCOPES,
        "title": "Page",
        "page": "page",
        "projects": ["default"],
        **values,
    }
    return TEMPLATES.get_template(template).render(context)


def _text(html: str) -> str:
    """The page's words, tags dropped and white space collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _offer(direction: str, state: str, *, receipt: bool = True) -> dict[str, Any]:
    body = {
        "kind": "ficc.receipt/1",
        "offer": "offer_1",
        "grant": "grant_1",
        "grant_terms": TERMS,
        "expires_at": format_time(NOW + timedelta(days=1)),
        "service_label": "beta-lab",
    }
    return {
        "id": "offer_1",
        "direction": direction,
        "service": "a" * 64,
        "requester": "b" * 64,
        "label": "beta-lab" if direction == "outgoing" else "alpha-lab",
        "cluster_key": None,
        "scopes": ["discover", "inference:invoke", "models:read"],
        "state": state,
        "revision": 2,
        "receipt": {"digest": DIGEST, "grant": "grant_1", "body": body} if receipt else None,
        "expires_at": NOW + timedelta(hours=1),
        "peer": None,
        "project": "default",
    }


def _offer_page(
    offer: dict[str, Any],
    scopes: frozenset[str] = ALL_SCOPES,
    nodes: list[dict[str, Any]] | None = None,
) -> str:
    limits = "lifetime_hours concurrent requests transfer_bytes request_bytes response_bytes"
    defaults: dict[str, Any] = dict.fromkeys(limits.split(), 1)
    defaults |= {f"max_{name}": 2 for name in limits.split()}
    return _render(
        "_offer.html",
        path="/ui/p/default/offers/offer_1",
        offer=offer,
        defaults=defaults,
        resources={"services": [], "models": [], "nodes": nodes},
        scopes=scopes,
    )


def _digest_shown(html: str) -> bool:
    words = _text(html)
    return DIGEST in words or grouped(DIGEST) in words or DIGEST[:8] in words


def _shows_terms(html: str) -> None:
    words = _text(html)
    terms = re.search(r'<dl class="facts" id="grant-terms">.*?</dl>', html, re.S)
    assert terms is not None, "the page shows no grant terms"
    shown = _text(terms.group(0))
    for expected in (
        "inference:invoke",
        "models:read",
        "svc_1",
        "mdl_1",
        "Lifetime 1 d",
        "Concurrent requests 2",
        "Total requests 50",
        "Model transfer allowance 4.0 MiB",
        "1.0 MiB / 8.0 MiB",
        "Stop services on revoke yes",
    ):
        assert expected in shown, (expected, shown)
    assert "expires in 1 d" in words


@pytest.mark.parametrize("state", ["approved", "accepted"])
def test_the_finish_page_asks_for_the_digest_without_printing_it_and_shows_the_terms(
    state: str,
) -> None:
    html = _offer_page(_offer("outgoing", state))
    assert 'id="finish-receipt"' in html
    assert not _digest_shown(html), "the Finish page prints the digest it asks to be typed"
    _shows_terms(html)
    assert "The grant you accept by finishing" in _text(html)


def test_a_finish_page_without_a_receipt_says_the_terms_are_not_known_yet() -> None:
    html = _offer_page(_offer("outgoing", "sent", receipt=False))
    assert 'id="finish-receipt"' in html
    assert 'id="finish-no-receipt"' in html
    assert 'id="grant-terms"' not in html


def test_a_finished_pairing_shows_the_digest_it_checked_and_the_terms_accepted() -> None:
    html = _offer_page(_offer("outgoing", "finished"))
    assert 'id="finish-receipt"' not in html
    assert grouped(DIGEST) in _text(html)
    _shows_terms(html)
    assert "The grant you accepted" in _text(html)


def test_the_approver_reads_the_digest_from_its_page_with_the_terms_it_signed() -> None:
    html = _offer_page(_offer("incoming", "approved"))
    assert f'<code class="id" id="receipt-digest">{grouped(DIGEST)}</code>' in html
    _shows_terms(html)
    assert "The grant you signed" in _text(html)
    assert 'href="/ui/p/default/grants/grant_1"' in html


def test_the_approval_form_lists_no_nodes_without_resources_read() -> None:
    """G14, as the page renders it: the route passes no nodes, and the page says why."""
    manage = frozenset({"federation:read", "federation:manage"})
    html = _offer_page(_offer("incoming", "received", receipt=False), scopes=manage)
    assert 'id="approve-form"' in html
    assert 'name="nodes"' not in html
    assert "needs the resources:read scope" in _text(html)
    node = {"id": "node_1", "name": "gpu-host-7"}
    listed = _offer_page(_offer("incoming", "received", receipt=False), nodes=[node])
    assert 'value="node_1"> gpu-host-7' in listed
    assert "needs the resources:read scope" not in _text(listed)


# --- grants: one reading of their state, on every page --------------------------------------


def _grant(state: str, **changes: Any) -> dict[str, Any]:
    """A grant given, with the fields ``render_grant`` shows: created 4 min ago, expiring in
    56 min."""
    return {
        "id": "grant_1",
        "peer": "peer_1",
        "state": state,
        **TERMS,
        "requests": 100,
        "created_at": NOW - timedelta(minutes=4),
        "expires_at": NOW + timedelta(minutes=56),
        "revoked_at": None,
        "in_flight": 0,
        "remaining": {"requests": 94, "transfer_bytes": MiB, "tokens": None},
        "tokens": None,
        "tokens_per_minute": None,
        "requests_per_minute": None,
        "used": {"requests": 6, "prompt_tokens": 0, "completion_tokens": 0, "transfer_bytes": 0},
        "windows": {"tokens_per_minute": None, "requests_per_minute": None},
        "created_services": [],
        "created_models": [],
        **changes,
    }


REVOKED_AT = NOW - timedelta(minutes=1)
EXPIRED_AT = NOW - timedelta(minutes=5)
ENDED: list[tuple[str, dict[str, Any], str, str]] = [
    ("revoked", _grant("revoked", revoked_at=REVOKED_AT), "revoked", "revoked"),
    ("expired", _grant("expired", expires_at=EXPIRED_AT), "expired", "expired"),
    ("retired after revocation", _grant("retired", revoked_at=REVOKED_AT), "retired", "revoked"),
    ("retired after expiry", _grant("retired", expires_at=EXPIRED_AT), "retired", "expired"),
    (
        "a stale active copy past expiry",
        _grant("active", expires_at=EXPIRED_AT),
        "expired",
        "expired",
    ),
]


def _ended_at(event: str) -> str:
    return format_time(REVOKED_AT if event == "revoked" else EXPIRED_AT)


def _assert_ended(html: str, state: str, event: str) -> None:
    words = _text(html)
    assert f'class="state state-{state}"' in html
    assert f"{event} at {_ended_at(event)}" in words, words
    assert "expires" not in words.lower()
    assert "in 56 min" not in words
    meters = re.findall(r"<meter\b[^>]*>", html)
    assert meters
    assert all('class="ended"' in meter for meter in meters), meters
    assert "Requests: 94 of 100 unused; the grant has ended" in words
    assert "94 of 100 left" not in words


@pytest.mark.parametrize(
    ("grant", "state", "event"), [c[1:] for c in ENDED], ids=[c[0] for c in ENDED]
)
def test_an_ended_grant_reads_as_ended_on_its_page(
    grant: dict[str, Any], state: str, event: str
) -> None:
    html = _render(
        "_grant.html",
        path="/ui/p/default/grants/grant_1",
        grant=grant,
        peer=None,
        usage={"records": []},
        chart=None,
    )
    _assert_ended(html, state, event)
    assert f'id="grant-state">{state}</span>' in html


def _federation(grants: list[dict[str, Any]], remote: list[dict[str, Any]]) -> dict[str, Any]:
    peer = {
        "id": "peer_1",
        "label": "alpha-lab",
        "hypernet_id": "b" * 64,
        "cluster_key": None,
        "state": "paired",
        "role": "service",
        "remote_grants": remote,
        "selected": None,
    }
    return {
        "identity": {"hypernet_id": "a" * 64},
        "companion": {"state": "running"},
        "offers": [],
        "peers": [peer],
        "grants": grants,
        "transfers": [],
    }


def _as_received(grant: dict[str, Any]) -> dict[str, Any]:
    """The same grant as the requester keeps its copy: times as RFC 3339 text."""
    return {
        key: format_time(value) if isinstance(value, datetime) else value
        for key, value in grant.items()
    }


def _row(html: str, grant_id: str, table: str) -> str:
    found = re.search(rf'<table id="{table}">.*?<tr id="row-{grant_id}".*?</tr>', html, re.S)
    assert found is not None, table
    return found.group(0)[found.group(0).index(f'<tr id="row-{grant_id}"') :]


@pytest.mark.parametrize(
    ("grant", "state", "event"), [c[1:] for c in ENDED], ids=[c[0] for c in ENDED]
)
def test_an_ended_grant_reads_as_ended_in_the_lists_given_and_received(
    grant: dict[str, Any], state: str, event: str
) -> None:
    received = {**_as_received(grant), "id": "grant_2"}
    html = _render("_federation.html", view=_federation([grant], [received]))
    for grant_id, table in (("grant_1", "grants-given"), ("grant_2", "grants-received")):
        row = _row(html, grant_id, table)
        _assert_ended(row, state, event)
        assert ">Select<" not in row


def test_a_live_grant_reads_as_live_with_its_expiry_everywhere() -> None:
    grant = _grant("active")
    received = {**_as_received(grant), "id": "grant_2"}
    pages = [
        _render(
            "_grant.html",
            path="/ui/p/default/grants/grant_1",
            grant=grant,
            peer=None,
            usage={"records": []},
            chart=None,
        ),
        _row(_render("_federation.html", view=_federation([grant], [])), "grant_1", "grants-given"),
        _row(
            _render("_federation.html", view=_federation([], [received])),
            "grant_2",
            "grants-received",
        ),
    ]
    for html in pages:
        words = _text(html)
        assert 'class="state state-active"' in html
        assert f"expires in 56 min ({format_time(NOW + timedelta(minutes=56))})" in words, words
        assert "Requests: 94 of 100 left" in words
        assert 'class="ended"' not in html


def test_the_overview_counts_active_and_ended_grants_apart() -> None:
    federation = _federation([_grant("active"), *[case[1] for case in ENDED]], [])
    html = _render(
        "overview.html",
        federation=federation,
        services=None,
        models=None,
        nodes=None,
        cluster_key=None,
    )
    assert "6 grants given (1 active, 5 ended)" in _text(html)


def test_standing_reads_a_peer_copy_s_text_times_like_the_grant_s_own() -> None:
    own = standing(_grant("revoked", revoked_at=REVOKED_AT), NOW)
    copy = standing(_as_received(_grant("revoked", revoked_at=REVOKED_AT)), NOW)
    assert own == copy
    assert (own.state, own.ended, own.event, own.at) == ("revoked", True, "revoked", REVOKED_AT)
    unknown = standing({"state": "suspended"}, NOW)
    assert unknown.ended


def test_a_metered_grants_page_draws_its_usage_and_shows_what_remains() -> None:
    """Tokens per hour as inline SVG drawn by the server, the budget and the windows left."""
    hours = [
        {
            "hour": "2026-12-01T18:00:00Z",
            "requests": 2,
            "prompt_tokens": 30,
            "completion_tokens": 70,
        },
        {
            "hour": "2026-12-01T19:00:00Z",
            "requests": 1,
            "prompt_tokens": 10,
            "completion_tokens": 40,
        },
    ]
    grant = _grant(
        "active",
        tokens=1000,
        tokens_per_minute=500,
        remaining={"requests": 97, "transfer_bytes": MiB, "tokens": 850},
        used={"requests": 3, "prompt_tokens": 40, "completion_tokens": 110, "transfer_bytes": 0},
        windows={
            "tokens_per_minute": {"used": 50, "remaining": 450, "reset_seconds": 12.5},
            "requests_per_minute": None,
        },
    )
    record = {
        "request": "req-1",
        "started_at": NOW - timedelta(minutes=2),
        "prompt_tokens": 10,
        "completion_tokens": 40,
        "outcome": "cancelled",
    }
    html = _render(
        "_grant.html",
        path="/ui/p/default/grants/grant_1",
        grant=grant,
        peer=None,
        usage={"records": [record]},
        chart=usage_chart(hours),
    )
    words = _text(html)
    assert "Tokens: 850 of 1000 left" in words
    assert "40 prompt, 110 completion, over 3 requests" in words
    assert "450 of 500 left in the last 60 s" in words
    assert "Requests per minute not limited" in words
    assert html.count('<rect class="prompt"') == 2
    assert 'class="usage-chart" role="img"' in html
    assert "the tallest bar is 100" in words
    assert "req-1" in words
    assert "cancelled" in words
    assert "<script" not in html.split('class="usage-chart"')[1].split("</svg>")[0]


def test_the_approval_forms_token_limits_are_optional_and_checked_by_name() -> None:
    base = {
        "scopes": ["inference:invoke"],
        "lifetime_hours": ["1"],
        "concurrent": ["2"],
        "requests": ["10"],
        "transfer_bytes": ["0"],
        "request_bytes": ["1024"],
        "response_bytes": ["1024"],
    }
    plain = grant_from_form({**base, "tokens": [""], "tokens_per_minute": [" "]})
    assert "tokens" not in plain
    assert "tokens_per_minute" not in plain
    metered = grant_from_form({**base, "tokens": ["5000"], "requests_per_minute": ["60"]})
    assert (metered["tokens"], metered["requests_per_minute"]) == (5000, 60)
    with pytest.raises(InvalidInput) as bad:
        grant_from_form({**base, "tokens_per_minute": ["lots"]})
    assert bad.value.details["field"] == "grant.tokens_per_minute"


def test_the_tokens_page_shows_each_tokens_restrictions_use_and_what_remains() -> None:
    """The form takes the restrictions; the list shows a team's budget used and left."""
    restricted = {
        "id": "tok_team_a",
        "state": "active",
        "scopes": ["federation:invoke"],
        "created_by": None,
        "peers": ["per_partner"],
        "services": ["svc_chat"],
        "tokens": 200000,
        "tokens_per_minute": None,
        "requests_per_minute": 10,
        "used": {"requests": 4, "prompt_tokens": 100, "completion_tokens": 300},
        "remaining": {"tokens": 199600, "tokens_per_minute": None, "requests_per_minute": 9},
    }
    plain = {
        "id": "tok_plain",
        "state": "active",
        "scopes": ["discover"],
        "created_by": None,
        "peers": None,
        "services": None,
        "tokens": None,
        "tokens_per_minute": None,
        "requests_per_minute": None,
        "used": None,
        "remaining": None,
    }
    html = _render(
        "_tokens.html", path="/ui/p/default/tokens", all_scopes=[], tokens=[restricted, plain]
    )
    words = _text(html)
    for name in ("peers", "services", "tokens", "tokens_per_minute", "requests_per_minute"):
        assert f'name="{name}"' in html
    assert "200000 tokens · 10 requests/min" in words
    assert "4 requests, 400 tokens" in words
    assert "199600 tokens · 9 requests this minute" in words
    assert "not restricted" in words


def test_a_received_grants_page_shows_its_last_reconciliation_naming_each_failing_receipt() -> None:
    grant = _grant("active", tokens=1000)
    grant.setdefault("used", {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0})
    grant.setdefault("windows", {"tokens_per_minute": None, "requests_per_minute": None})
    report = {
        "grant": "grant_1",
        "head": {"seq": 7, "digest": DIGEST},
        "matched": False,
        "fetched": 2,
        "missing": [{"request": "req-cut", "outcome": "failed"}],
        "invalid": [{"seq": 4, "reason": "prev_mismatch"}],
    }
    values: dict[str, Any] = {
        "path": "/ui/p/default/grants/grant_1",
        "grant": grant,
        "peer": None,
        "usage": {"records": []},
        "chart": None,
        "received": True,
    }
    words = _text(_render("_grant.html", reconciliation=report, **values))
    assert "the chains do not match" in words
    assert "receipt 7" in words
    assert "2 receipts this side lacked" in words
    assert "req-cut (failed)" in words
    assert "4 prev_mismatch" in words
    assert "Revoke" not in words
    matched = {**report, "matched": True, "missing": [], "invalid": []}
    assert "both chains match" in _text(_render("_grant.html", reconciliation=matched, **values))
    assert "Not reconciled yet" in _text(_render("_grant.html", reconciliation=None, **values))
    given = _text(_render("_grant.html", **{**values, "received": False}))
    assert "Usage receipts" not in given

"""The presenters render the typed views services return to the very bytes the contract shows.

Each literal below is what the view's former JSON builder answered for the same record.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ficc.domain.grant_views import GrantView, RevokedGrantView
from ficc.domain.grants import Grant, GrantState, parse_grant
from ficc.domain.inference import AttemptState, DesiredState, ServiceState, parse_service_spec
from ficc.domain.offers import (
    ApprovedOfferView,
    Offer,
    OfferDirection,
    OfferState,
    OfferView,
)
from ficc.domain.peers import Peer, PeerRole, PeerState, PeerView
from ficc.domain.remote_grants import RemoteGrant
from ficc.domain.service_records import AttemptRecord, ServiceRecord, ServiceView
from ficc.domain.transfers import Transfer, TransferFile, TransferState, TransferView
from ficc.services.companion import CompanionState
from ficc.services.federation.overview import FederationView
from ficc.web.presenters.federation import render_federation
from ficc.web.presenters.grants import render_grant, render_revoked_grant
from ficc.web.presenters.offers import render_approved_offer, render_offer
from ficc.web.presenters.peers import render_peer
from ficc.web.presenters.services import render_service
from ficc.web.presenters.transfers import render_transfer
from ficc.web.responses import dumps

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = datetime(2026, 11, 29, 12, 5, tzinfo=UTC)

SERVICE_JSON = (
    b'{"id":"svc_1","spec":{"name":"chat","model":"mdl_aaaqeayeaudaocajbifqydiob4","runtime":"'
    b'llama.cpp","node":null,"replicas":2,"options":{"n_threads":1,"n_ctx":2048,"n_gpu_layers"'
    b':0},"restart":"on-failure"},"node":"node_1","state":"running","desired":"running","revis'
    b'ion":3,"error":null,"created_by_grant":"grant_1","unknown_attempts":1,"replicas":[{"atte'
    b'mpt":"att_1","replica":0,"state":"healthy","pid":4242,"port":8081,"exit_code":null,"log_'
    b'tail":null,"created_at":"2026-11-29T12:00:00Z","ended_at":null},{"attempt":"att_2","repl'
    b'ica":1,"state":"unknown","pid":null,"port":null,"exit_code":137,"log_tail":"killed","cre'
    b'ated_at":"2026-11-29T12:00:00Z","ended_at":"2026-11-29T12:05:00Z"}],"created_at":"2026-1'
    b'1-29T12:00:00Z","updated_at":"2026-11-29T12:00:01.500000Z"}'
)


def test_a_service_renders_to_the_bytes_of_its_contract_object() -> None:
    spec = parse_service_spec(
        {
            "name": "chat",
            "model": "mdl_aaaqeayeaudaocajbifqydiob4",
            "runtime": "llama.cpp",
            "replicas": 2,
            "options": {"n_ctx": 2048},
        }
    )
    service = ServiceRecord(
        id="svc_1",
        project="default",
        spec=spec,
        node="node_1",
        state=ServiceState.RUNNING,
        revision=3,
        error=None,
        created_by_grant="grant_1",
        created_at=AT,
        updated_at=datetime(2026, 11, 29, 12, 0, 1, 500000, tzinfo=UTC),
        desired=DesiredState.RUNNING,
    )
    attempts = [
        AttemptRecord(
            id="att_1",
            service_id="svc_1",
            replica=0,
            state=AttemptState.HEALTHY,
            serve_instance="s",
            created_at=AT,
            pid=4242,
            pid_start_ticks=9,
            port=8081,
        ),
        AttemptRecord(
            id="att_2",
            service_id="svc_1",
            replica=1,
            state=AttemptState.UNKNOWN,
            serve_instance="s",
            created_at=AT,
            exit_code=137,
            log_tail="killed",
            ended_at=LATER,
        ),
    ]
    assert dumps(render_service(ServiceView.of(service, attempts))) == SERVICE_JSON


TRANSFER_JSON = (
    b'{"id":"trf_1","peer":"peer_1","model":"mdl_1","grant":"grant_1","sha256":"ababababababab'
    b'ababababababababababababababababababababababababab","state":"paused","bytes_done":410,"b'
    b'ytes_total":1010,"rate_bytes_per_second":1235,"files":[{"path":"model.gguf","size":1000,'
    b'"sha256":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","bytes_done"'
    b':400,"verified":false},{"path":"README.md","size":10,"sha256":"efefefefefefefefefefefefe'
    b'fefefefefefefefefefefefefefefefefefefef","bytes_done":10,"verified":true}],"local_model"'
    b':null,"error":"FICC stopped; acquire again to resume","created_at":"2026-11-29T12:00:00Z'
    b'","updated_at":"2026-11-29T12:00:03.250000Z"}'
)


def _transfer_view() -> TransferView:
    transfer = Transfer(
        id="trf_1",
        project="default",
        peer_id="peer_1",
        remote_model="mdl_1",
        grant_id="grant_1",
        manifest={"name": "m"},
        sha256="ab" * 32,
        state=TransferState.PAUSED,
        files=(
            TransferFile("model.gguf", 1000, "cd" * 32, 400, False),
            TransferFile("README.md", 10, "ef" * 32, 10, True),
        ),
        local_model=None,
        error="FICC stopped; acquire again to resume",
        created_at=AT,
        updated_at=datetime(2026, 11, 29, 12, 0, 3, 250000, tzinfo=UTC),
    )
    return TransferView.of(transfer, rate_bytes_per_second=round(1234.6))


def test_a_transfer_renders_to_the_bytes_of_its_contract_object() -> None:
    assert dumps(render_transfer(_transfer_view())) == TRANSFER_JSON


GRANT_JSON = (
    b'{"id":"grt_1","peer":"peer_1","state":"active","scopes":["discover","inference:invoke"],'
    b'"services":["svc_aaaqeayeaudaocajbifqydiob4"],"models":[],"nodes":[],"lifetime":3600,"co'
    b'ncurrent":2,"requests":1000,"transfer_bytes":0,"request_bytes":524288,"response_bytes":6'
    b'7108864,"stop_on_revoke":false,"tokens":1000,"tokens_per_minute":40,"requests_per_minute'
    b'":null,"created_at":"2026-11-29T12:00:00Z","expires_at":"2026-11-29T13:00:00Z","revoked_'
    b'at":null,"in_flight":1,"remaining":{"requests":997,"transfer_bytes":0,"tokens":993},"use'
    b'd":{"requests":3,"prompt_tokens":2,"completion_tokens":1,"transfer_bytes":0},"windows":{'
    b'"requests_per_minute":null,"tokens_per_minute":{"used":3,"remaining":37,"reset_seconds":'
    b'59.5}},"created_services":["svc_a","svc_b"],"created_models":[]}'
)


def _grant_view() -> GrantView:
    terms = parse_grant(
        {
            "scopes": ["inference:invoke", "discover"],
            "services": ["svc_aaaqeayeaudaocajbifqydiob4"],
            "lifetime": 3600,
            "tokens": 1000,
            "tokens_per_minute": 40,
        }
    )
    grant = Grant(
        id="grt_1",
        project="default",
        peer_id="peer_1",
        terms=terms,
        state=GrantState.ACTIVE,
        created_at=AT,
        expires_at=datetime(2026, 11, 29, 13, 0, tzinfo=UTC),
        revoked_at=None,
        requests_used=3,
        transfer_bytes_used=0,
        created_services=frozenset({"svc_b", "svc_a"}),
        prompt_tokens_used=2,
        completion_tokens_used=1,
        tokens_reserved=4,
    )
    windows = {
        "requests_per_minute": None,
        "tokens_per_minute": {"used": 3, "remaining": 37, "reset_seconds": 59.5},
    }
    now = datetime(2026, 11, 29, 12, 30, 0, 250000, tzinfo=UTC)
    return GrantView.of(grant, now, in_flight=1, windows=windows)


def test_a_grant_renders_to_the_bytes_of_its_contract_object() -> None:
    assert dumps(render_grant(_grant_view())) == GRANT_JSON


def test_a_revoked_grant_renders_as_its_grant_and_whether_the_peer_was_told() -> None:
    rendered = dumps(render_revoked_grant(RevokedGrantView(_grant_view(), told=False)))
    assert rendered == GRANT_JSON[:-1] + b',"told":false}'


PEER_JSON = (
    b'{"id":"peer_1","label":"beta","hypernet_id":"hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh'
    b'hhhhhhhhh","cluster_key":"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk","state":"paired",'
    b'"role":"requester","generation":2,"remote_grants":[{"id":"grt_1","peer":"peer_9","state"'
    b':"expired","services":["svc_a"],"expires_at":"2026-11-29T12:30:00Z","remaining":{"reques'
    b'ts":997,"transfer_bytes":0,"tokens":null},"extra":[1,2.5]},{"id":"grt_2","state":"revoke'
    b'd","expires_at":"2026-11-29T12:00:00Z"}],"selected":"grt_1","created_at":"2026-11-29T12:'
    b'00:00Z","updated_at":"2026-11-29T12:00:00.000005Z"}'
)


def _peer_view() -> PeerView:
    peer = Peer(
        id="peer_1",
        project="default",
        label="beta",
        hypernet_id="h" * 52,
        cluster_key="k" * 43,
        state=PeerState.PAIRED,
        generation=2,
        role=PeerRole.REQUESTER,
        offer_id="off_1",
        selected_grant="grt_1",
        ticket=None,
        created_at=AT,
        updated_at=datetime(2026, 11, 29, 12, 0, 0, 5, tzinfo=UTC),
    )
    copies: list[dict[str, object]] = [
        {
            "id": "grt_1",
            "peer": "peer_9",
            "state": "active",
            "services": ["svc_a"],
            "expires_at": "2026-11-29T12:30:00Z",
            "remaining": {"requests": 997, "transfer_bytes": 0, "tokens": None},
            "extra": [1, 2.5],
        },
        {"id": "grt_2", "state": "revoked", "expires_at": "2026-11-29T12:00:00Z"},
    ]
    now = datetime(2026, 11, 29, 13, 0, tzinfo=UTC)
    return PeerView.of(peer, [RemoteGrant.as_of(copy, now) for copy in copies])


def test_a_peer_renders_to_the_bytes_of_its_contract_object_copies_as_listed() -> None:
    view = _peer_view()
    assert dumps(render_peer(view)) == PEER_JSON
    assert [(g.id, g.state, g.services) for g in view.remote_grants] == [
        ("grt_1", "expired", ("svc_a",)),
        ("grt_2", "revoked", ()),
    ]


OFFER_JSON = (
    b'{"id":"off_1","direction":"incoming","service":"mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm'
    b'mmmmmmmmmmmm","requester":"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr","label"'
    b':"alpha","cluster_key":"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk","scopes":["discover'
    b'","inference:invoke"],"state":"approved","revision":2,"receipt":{"digest":"ddddddddddddd'
    b'ddddddddddddddddddddddddddddddddddddddddddddddddddd","grant":"grt_1","signature":"s"},"e'
    b'xpires_at":"2026-12-06T12:00:00.120000Z","peer":"peer_1","project":"default"}'
)


def _offer_view() -> OfferView:
    offer = Offer(
        id="off_1",
        direction=OfferDirection.INCOMING,
        project="default",
        other_hypernet_id="r" * 52,
        peer_label="alpha",
        peer_cluster_key="k" * 43,
        scopes=frozenset({"inference:invoke", "discover"}),
        state=OfferState.APPROVED,
        revision=2,
        receipt={"digest": "d" * 64, "grant": "grt_1", "signature": "s"},
        ticket=None,
        created_at=AT,
        expires_at=datetime(2026, 12, 6, 12, 0, 0, 120000, tzinfo=UTC),
        peer_id="peer_1",
    )
    return OfferView.of(offer, datetime(2026, 11, 29, 13, 0, tzinfo=UTC), "m" * 52)


def test_an_offer_renders_to_the_bytes_of_its_contract_object() -> None:
    assert dumps(render_offer(_offer_view())) == OFFER_JSON


def test_an_approved_offer_renders_as_its_offer_and_whether_the_receipt_arrived() -> None:
    rendered = dumps(render_approved_offer(ApprovedOfferView(_offer_view(), True)))
    assert rendered == OFFER_JSON[:-1] + b',"receipt_delivered":true}'


def test_the_overview_renders_each_part_in_the_contracts_key_order() -> None:
    view = FederationView(
        companion={
            "configured": True,
            "state": CompanionState.RUNNING,
            "agent_directory": "/var/lib/ficc/agent",
            "hypernet_id": "m" * 52,
            "addresses": ["127.0.0.1:4433"],
            "error": None,
        },
        identity={
            "label": "alpha",
            "cluster_key": "c" * 43,
            "hypernet_id": "m" * 52,
            "ticket": "t",
        },
        project="default",
        peers=(_peer_view(),),
        offers=(_offer_view(),),
        offers_next="off_1",
        grants=(_grant_view(),),
        transfers=(_transfer_view(),),
    )
    assert dumps(render_federation(view)) == (
        b'{"companion":{"configured":true,"state":"running","agent_directory":"/var/lib/ficc/agent",'
        b'"hypernet_id":"' + b"m" * 52 + b'","addresses":["127.0.0.1:4433"],"error":null},'
        b'"identity":{"label":"alpha","cluster_key":"'
        + b"c" * 43
        + b'","hypernet_id":"'
        + b"m" * 52
        + b'","ticket":"t"},"project":"default",'
        b'"peers":[' + PEER_JSON + b'],"offers":[' + OFFER_JSON + b'],"offers_next":"off_1",'
        b'"grants":[' + GRANT_JSON + b'],"transfers":[' + TRANSFER_JSON + b"]}"
    )

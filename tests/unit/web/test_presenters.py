"""The presenters render the typed views services return to the very bytes the contract shows.

Each literal below is what the view's former JSON builder answered for the same record.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ficc.domain.inference import AttemptState, DesiredState, ServiceState, parse_service_spec
from ficc.domain.service_records import AttemptRecord, ServiceRecord, ServiceView
from ficc.domain.transfers import Transfer, TransferFile, TransferState, TransferView
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


def test_a_transfer_renders_to_the_bytes_of_its_contract_object() -> None:
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
    view = TransferView.of(transfer, rate_bytes_per_second=round(1234.6))
    assert dumps(render_transfer(view)) == TRANSFER_JSON

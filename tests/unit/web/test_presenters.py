"""The presenters render the typed views services return to the very bytes the contract shows.

Each literal below is what the view's former JSON builder answered for the same record.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ficc.domain.inference import AttemptState, DesiredState, ServiceState, parse_service_spec
from ficc.domain.service_records import AttemptRecord, ServiceRecord, ServiceView
from ficc.web.presenters.services import render_service
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

"""Usage receipts on two real clusters (llama.cpp's server on the tiny model, real HyperNet on
loopback): after streamed, plain and cancelled requests every receipt on the requester
verifies with the grantor's cluster key, the cancelled one fetched on the next request, and
reconcile reports both chains matching; the export verifies offline with that key alone."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.conformance.usage_receipts import verify_export
from tests.support.cluster import ficc
from tests.support.federation import API, ok, wait_for
from tests.support.metering import long_stream, new_request_id, revoked_stream, stream_chat, usage
from tests.support.remote import Federated, federation
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.bootstrap import CONNECT_SECONDS_VARIABLE
from ficc.domain.receipts import unb64


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    root = tmp_path_factory.mktemp("receipts")
    tiny = write_tiny_gguf(root / "tiny.gguf")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CONNECT_SECONDS_VARIABLE, "2")
        with federation(root, "tiny", tiny, n_ctx=4096) as running:
            yield running


def cancelled_stream(fed: Federated, request_id: str) -> None:
    read = 0
    with long_stream(fed, request_id) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            read += line.startswith("data: ")
            if read == 10:
                break


def test_receipts_verify_after_streamed_and_cancelled_requests_and_the_chains_match(
    fed: Federated,
) -> None:
    grant = fed.grant(scopes=["inference:invoke"], services=[fed.service], tokens=100_000)
    streamed = new_request_id()
    assert stream_chat(fed, fed.service, max_tokens=8, request_id=streamed)[0] == 200
    cancelled = new_request_id()
    cancelled_stream(fed, cancelled)
    fed.wait_idle(grant)
    after = new_request_id()
    assert stream_chat(fed, fed.service, max_tokens=4, request_id=after)[0] == 200
    fed.wait_idle(grant)

    requester = usage(fed.alpha.owner(), grant)["records"]
    assert [r["request"] for r in requester] == [streamed, cancelled, after]
    assert [r["verified"] for r in requester] == [True, True, True]
    assert [r["receipt"]["body"]["seq"] for r in requester] == [1, 2, 3]
    assert requester[1]["receipt"]["body"]["outcome"] == "cancelled"
    report = ok(fed.alpha.owner().post(f"{API}/peers/{fed.peer}/reconcile", json={"grant": grant}))
    [mine] = report["grants"]
    assert (mine["matched"], mine["head"]["seq"], mine["missing"], mine["invalid"]) == (
        True,
        3,
        [],
        [],
    )

    exported, grantor_key = _export(fed, grant)
    checked = verify_export(exported, grantor_key)
    assert (checked["verified"], checked["receipts"], checked["invalid"]) == (True, 3, [])
    assert checked["head"] == mine["head"]
    altered = json.loads(exported)
    altered["records"][1]["receipt"]["body"]["completion_tokens"] += 1
    assert verify_export(json.dumps(altered), grantor_key)["invalid"] == [
        {"seq": 2, "reason": "digest_mismatch"}
    ]


def test_a_revoked_streams_receipt_is_fetched_by_reconcile_and_verifies(fed: Federated) -> None:
    """Revoked mid-stream: the answer ends with the grant's error and no receipt, which the
    requester fetches when it reconciles (the grant's peer may still read its own chain)."""
    grant = fed.grant(scopes=["inference:invoke"], services=[fed.service])
    revoked = new_request_id()
    assert "grant_revoked" in revoked_stream(fed, grant, revoked)
    wait_for(
        lambda: usage(fed.alpha.owner(), grant)["records"],
        what="the requester's record of the revoked stream",
    )
    report = ok(fed.alpha.owner().post(f"{API}/peers/{fed.peer}/reconcile", json={"grant": grant}))
    [mine] = report["grants"]
    assert (mine["matched"], mine["head"]["seq"], mine["missing"], mine["invalid"]) == (
        True,
        1,
        [],
        [],
    )
    [record] = usage(fed.alpha.owner(), grant)["records"]
    assert (record["request"], record["verified"]) == (revoked, True)
    assert record["receipt"]["body"]["outcome"] == "revoked"
    checked = verify_export(*_export(fed, grant))
    assert (checked["verified"], checked["receipts"], checked["invalid"]) == (True, 1, [])


def _export(fed: Federated, grant: str) -> tuple[str, bytes]:
    """The grantor's export of ``grant``'s records with their receipts, and its public key."""
    grantor_key = ok(fed.beta.owner().get(f"{API}/"))["identity"]["cluster_key"]
    exported = ficc(
        "federation-usage", grant, "--format", "json", "--receipts", state_dir=fed.beta.state_dir
    )
    assert exported.returncode == 0, exported.stderr
    return exported.stdout, unb64(grantor_key)

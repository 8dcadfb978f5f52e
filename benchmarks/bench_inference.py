"""Local invoke overhead: FICC's local OpenAI-compatible URL beside the engine called directly.

A real ``ficc serve`` runs two services: one on the example model with the ``llama.cpp``
runtime, and one with the ``openai`` runtime in front of an instant mock engine (a tiny
OpenAI-compatible SSE server defined here, run by uvicorn in its own process on loopback), so
that FICC's own cost is not hidden by generation time. The same short completion (``max_tokens``
2, temperature 0, same prompt) goes to FICC and straight to the engine, alternately, with one
keep-alive HTTP client; the total time of each request is measured until its JSON is parsed.

Rows: p50 and p99 of both, and FICC's added time (FICC − direct) beside the 3 ms p50 target.
Every process runs on loopback (run the harness in a loopback-only network namespace).
``FICC_BENCH_INFERENCE_REQUESTS`` changes the number of measured requests per target.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks import row
from benchmarks.processes import (
    engine_api_key,
    ficc_cli,
    mock_engine_running,
    running_process,
    wait_until,
)

REQUESTS: Final = int(os.environ.get("FICC_BENCH_INFERENCE_REQUESTS", "300"))
ENGINE_REQUESTS: Final = max(REQUESTS // 3, 20)
"""The real engine takes tens of milliseconds a request: fewer are enough for its percentiles."""
WARM_UP: Final = 20
TARGET_ADDED_P50_MS: Final = 3.0
START_SECONDS: Final = 60.0
PROMPT: Final = "Hi"
MOCK_MODEL: Final = "mock-engine"
PACED_PREFIX: Final = "/paced"
"""Under this path prefix (a base URL ``…/paced``) the mock engine streams a token every
:data:`TOKEN_SECONDS`, as a GPU server does at 1,000 tokens a second: each chunk then crosses a
relay on its own, as it does in front of a real engine, instead of hundreds in one read."""
TOKEN_SECONDS: Final = 0.001
ROOT: Final = Path(__file__).resolve().parent.parent
LOCAL_V1: Final = "/api/v1/inference/v1"


# --- the instant mock engine ------------------------------------------------------------


MAX_MOCK_TOKENS: Final = 4096
"""The most tokens the mock engine streams for one request (its ``max_tokens``)."""
WORDS: Final = ("Hello", " there", ",", " friend", ".", " How", " are", " you", "?")


def _sse_event(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _tokens(request: dict[str, Any]) -> int:
    """How many tokens to answer with: the request's ``max_tokens`` (2 when absent)."""
    asked = request.get("max_tokens", request.get("max_output_tokens", 2))
    return max(1, min(int(asked), MAX_MOCK_TOKENS)) if isinstance(asked, int) else 2


def _stream_events(path: str, request: dict[str, Any]) -> list[bytes]:
    """A streamed answer as llama.cpp's server sends it: (for chat) a role chunk, then one
    chunk per token up to ``max_tokens``, the last with ``finish_reason`` "length", then
    ``[DONE]``; with ``include_usage`` a usage chunk before it."""
    created = int(time.time())
    chat = path.endswith("/chat/completions")
    base = {"id": "mock-1", "created": created, "model": request.get("model", MOCK_MODEL)}
    kind = "chat.completion.chunk" if chat else "text_completion"
    count = _tokens(request)
    choices: list[dict[str, Any]] = []
    if chat:
        choices.append(
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        )
    for index in range(count):
        word = WORDS[index % len(WORDS)]
        finish = "length" if index == count - 1 else None
        if chat:
            choices.append({"index": 0, "delta": {"content": word}, "finish_reason": finish})
        else:
            choices.append({"index": 0, "text": word, "finish_reason": finish})
    events = [_sse_event({**base, "object": kind, "choices": [choice]}) for choice in choices]
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        usage = {"prompt_tokens": 1, "completion_tokens": count, "total_tokens": count + 1}
        events.append(_sse_event({**base, "object": kind, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    return events


def _answer(path: str, request: dict[str, Any]) -> tuple[bytes, bytes]:
    """(content type, body) of a plain answer: ``max_tokens`` tokens as one object."""
    created = int(time.time())
    chat = path.endswith("/chat/completions")
    base = {"id": "mock-1", "created": created, "model": request.get("model", MOCK_MODEL)}
    text = "".join(WORDS[index % len(WORDS)] for index in range(_tokens(request)))
    if chat:
        message = {"role": "assistant", "content": text}
        answer = {"index": 0, "message": message, "finish_reason": "length"}
        return b"application/json", json.dumps(
            {**base, "object": "chat.completion", "choices": [answer]}
        ).encode()
    answer = {"index": 0, "text": text, "finish_reason": "length"}
    return b"application/json", json.dumps(
        {**base, "object": "text_completion", "choices": [answer]}
    ).encode()


async def mock_engine(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A raw ASGI app: ``GET /v1/models`` and the two completion routes, answered at once.

    A streamed answer goes out one event per send, as an engine generating tokens sends them,
    so that a relay in front of it sees as many reads as there are tokens (at most: the
    kernel may join them).
    """
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    path = scope["path"]
    paced = path.startswith(PACED_PREFIX + "/")
    path = path.removeprefix(PACED_PREFIX)
    if scope["method"] == "GET" and path == "/v1/models":
        content_type = b"application/json"
        payload = json.dumps({"object": "list", "data": [{"id": MOCK_MODEL}]}).encode()
    elif scope["method"] == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
        request = json.loads(body or b"{}")
        if request.get("stream"):
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for index, event in enumerate(_stream_events(path, request)):
                if paced and index:
                    await asyncio.sleep(TOKEN_SECONDS)
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        content_type, payload = _answer(path, request)
    else:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-type", content_type), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


# --- processes ------------------------------------------------------------------------------


def _ficc_running(stack: ExitStack, work: Path, upstream: str) -> tuple[str, str, Path]:
    """(url, owner token, state dir) of a fresh `ficc serve`."""
    state = work / "state"
    argv = [
        sys.executable,
        "-m",
        "ficc",
        "serve",
        "--state-dir",
        str(state),
        "--listen",
        "127.0.0.1:0",
        "--hypernet-bind",
        "127.0.0.1:0",
        "--upstream-allow",
        upstream,
    ]
    process = stack.enter_context(running_process(argv, work / "ficc.log"))
    server_json = state / "server.json"

    def serving() -> bool:
        try:
            return bool(json.loads(server_json.read_text())["pid"] == process.pid)
        except (OSError, ValueError, KeyError):
            return False

    wait_until(serving, "ficc serve", process)
    url = str(json.loads(server_json.read_text())["url"])
    return url, (state / "owner.token").read_text().strip(), state


def _running_service(client: httpx.Client, spec: dict[str, Any]) -> dict[str, Any]:
    created = client.post("/api/v1/inference/services", json=spec)
    created.raise_for_status()
    service = created.json()
    started = client.post(
        f"/api/v1/inference/services/{service['id']}/control",
        json={"revision": service["revision"], "operation": "start"},
    )
    started.raise_for_status()
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        shown: dict[str, Any] = client.get(f"/api/v1/inference/services/{service['id']}").json()
        if shown["state"] == "running":
            return shown
        if shown["state"] == "failed":
            raise RuntimeError(f"service {spec['name']} failed: {shown['error']}")
        time.sleep(0.05)
    raise RuntimeError(f"service {spec['name']} did not start in {START_SECONDS:g} s")


# --- measuring ------------------------------------------------------------------------------


def _no_delay() -> httpx.HTTPTransport:
    """A client that sends a request's headers and body without waiting (Nagle off).

    httpx's sync client writes them separately; with Nagle on, the body waits for the server's
    delayed ACK (about 40 ms) and both FICC and the direct baseline would measure that stall.
    """
    return httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _plain_call(client: httpx.Client, url: str, body: dict[str, Any]) -> Callable[[], None]:
    def call() -> None:
        response = client.post(url, json=body)
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:300]}")
        if response.json()["choices"][0]["finish_reason"] not in ("length", "stop"):
            raise RuntimeError(f"{url} gave an incomplete answer")

    return call


def _streamed_call(client: httpx.Client, url: str, body: dict[str, Any]) -> Callable[[], None]:
    def call() -> None:
        with client.stream("POST", url, json={**body, "stream": True}) as response:
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}")
            last = ""
            for line in response.iter_lines():
                if line.startswith("data: "):
                    last = line
            if last != "data: [DONE]":
                raise RuntimeError(f"{url}: the stream did not end with [DONE]")

    return call


def _measure(
    ficc: Callable[[], None], direct: Callable[[], None], count: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per request, FICC and direct alternately (drift biases neither)."""
    for _ in range(WARM_UP):
        ficc()
        direct()
    ficc_ms: list[float] = []
    direct_ms: list[float] = []
    for index in range(2 * count):
        call, samples = (ficc, ficc_ms) if index % 2 == 0 else (direct, direct_ms)
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return ficc_ms, direct_ms


def _rows(
    label: str, engine: str, ficc_ms: list[float], direct_ms: list[float]
) -> list[dict[str, Any]]:
    rows = []
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        ficc_value = _percentile(ficc_ms, fraction)
        direct_value = _percentile(direct_ms, fraction)
        rows.append(
            row(
                f"inference.{label}.{name}",
                f"{name} total time, {len(ficc_ms)} requests through FICC's local URL",
                "ms",
                ficc_value,
                f"{engine} called directly",
                direct_value,
            )
        )
        rows.append(
            row(
                f"inference.{label}.added_{name}",
                f"{name} time FICC adds (FICC − direct)",
                "ms",
                ficc_value - direct_value,
                "target p50" if name == "p50" else f"{engine} direct {name}",
                TARGET_ADDED_P50_MS if name == "p50" else direct_value,
            )
        )
    return rows


def run() -> list[dict[str, Any]]:
    with (
        tempfile.TemporaryDirectory(prefix="ficc-bench-inference-") as temporary,
        ExitStack() as stack,
    ):
        work = Path(temporary)
        mock_url = mock_engine_running(stack, work).url
        url, token, state = _ficc_running(stack, work, mock_url)
        example = ficc_cli("example-model")
        model = json.loads(
            ficc_cli("model-add", "--state-dir", str(state), "--name", "smollm2", example)
        )
        headers = {"Authorization": f"Bearer {token}"}
        client = stack.enter_context(
            httpx.Client(base_url=url, headers=headers, timeout=60, transport=_no_delay())
        )
        engine_service = _running_service(
            client, {"name": "bench-llama", "model": model["id"], "runtime": "llama.cpp"}
        )
        mock_service = _running_service(
            client,
            {
                "name": "bench-mock",
                "model": MOCK_MODEL,
                "runtime": "openai",
                "options": {"base_url": mock_url},
            },
        )
        (replica,) = engine_service["replicas"]
        engine_url = f"http://127.0.0.1:{replica['port']}"
        direct = stack.enter_context(
            httpx.Client(timeout=60, trust_env=False, transport=_no_delay())
        )
        request = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0}

        rows: list[dict[str, Any]] = []
        mock_ficc = {**request, "model": mock_service["id"]}
        mock_direct = {**request, "model": MOCK_MODEL}
        rows += _rows(
            "local_invoke_mock",
            "mock engine",
            *_measure(
                _plain_call(client, f"{LOCAL_V1}/completions", mock_ficc),
                _plain_call(direct, f"{mock_url}/v1/completions", mock_direct),
                REQUESTS,
            ),
        )
        rows += _rows(
            "local_invoke_mock_streamed",
            "mock engine",
            *_measure(
                _streamed_call(client, f"{LOCAL_V1}/completions", mock_ficc),
                _streamed_call(direct, f"{mock_url}/v1/completions", mock_direct),
                REQUESTS,
            ),
        )
        engine_body = {**request, "model": engine_service["id"]}
        # The engine answers only to the key FICC gave it; FICC sends it on every call.
        engine_direct = stack.enter_context(
            httpx.Client(
                timeout=60,
                trust_env=False,
                transport=_no_delay(),
                headers={"Authorization": f"Bearer {engine_api_key(int(replica['pid']))}"},
            )
        )
        rows += _rows(
            "local_invoke_llama_cpp",
            "llama.cpp engine (SmolLM2)",
            *_measure(
                _plain_call(client, f"{LOCAL_V1}/completions", engine_body),
                _plain_call(engine_direct, f"{engine_url}/v1/completions", engine_body),
                ENGINE_REQUESTS,
            ),
        )
        # FICC always streams from the engine; beside a streamed direct call as well.
        rows += _rows(
            "local_invoke_llama_cpp_streamed",
            "llama.cpp engine (SmolLM2)",
            *_measure(
                _streamed_call(client, f"{LOCAL_V1}/completions", engine_body),
                _streamed_call(engine_direct, f"{engine_url}/v1/completions", engine_body),
                ENGINE_REQUESTS,
            ),
        )
        return rows

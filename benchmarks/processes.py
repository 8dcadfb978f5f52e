"""Processes the benchmarks start: free ports, readiness waits, the instant mock engine, the
LiteLLM gateway measured beside FICC, and what the benchmarks read of a process from /proc."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
START_SECONDS = 60.0
"""How long a process the benchmarks start may take to answer."""
GATEWAY_START_SECONDS = 180.0
"""LiteLLM imports for tens of seconds on two busy cores before it answers."""
LITELLM_ENV = "FICC_BENCH_LITELLM"
LITELLM_DEFAULT = ROOT / ".venv-litellm" / "bin" / "litellm"
GATEWAY_KEY = "sk-ficc-bench-gateway"
"""The gateway's master key: the benchmark's client authenticates to it as to FICC."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    check: Callable[[], bool],
    what: str,
    process: subprocess.Popen[bytes],
    seconds: float = START_SECONDS,
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with status {process.returncode}")
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what}: not ready after {seconds:g} s")


@contextmanager
def running_process(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far, all its threads, from /proc/PID/stat.

    Its children are not counted (the kernel adds them only once reaped), so FICC's CPU and
    the engine's it launched stay apart.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces: fields are counted after its closing parenthesis,
    # where field 3 (state) comes first; utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_api_key(pid: int) -> str:
    """The key an engine FICC launched answers to (FICC hands each attempt its own through
    the engine's environment): a direct call needs it, as a gateway in front of it does."""
    for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        name, _, value = entry.partition(b"=")
        if name in (b"API_KEY", b"VLLM_API_KEY"):
            return value.decode()
    raise RuntimeError(f"the engine process {pid} has no API key in its environment")


@dataclass(frozen=True)
class Engine:
    """A process answering the OpenAI-compatible API: its base URL (without /v1) and PID."""

    url: str
    pid: int


def mock_engine_running(stack: ExitStack, work: Path) -> Engine:
    return asgi_engine_running(stack, work, "benchmarks.bench_inference:mock_engine", "mock")


def asgi_engine_running(
    stack: ExitStack, work: Path, app: str, name: str, probe: str = "/v1/models"
) -> Engine:
    """The ASGI engine ``app`` (``module:attribute``) under uvicorn, logging to
    ``work/NAME.log``, once ``probe`` answers 200."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        app,
        "--app-dir",
        str(ROOT),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
        "--lifespan",
        "off",
    ]
    process = stack.enter_context(running_process(argv, work / f"{name}.log"))
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(f"{url}{probe}", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, f"the {name} engine", process)
    return Engine(url, process.pid)


@dataclass(frozen=True)
class GatewayModel:
    """One model the gateway routes: the name clients ask for and the engine behind it."""

    name: str
    engine_url: str
    engine_model: str
    engine_key: str


def litellm_executable() -> Path:
    """The ``litellm`` command of its own venv (``make setup-bench`` installs it there)."""
    path = Path(os.environ.get(LITELLM_ENV) or LITELLM_DEFAULT)
    if not path.is_file():
        raise RuntimeError(
            f"LiteLLM is not installed at {path}: `make setup-bench` installs it in a venv of "
            f"its own, or set {LITELLM_ENV} to a litellm command"
        )
    return path


def gateway_running(stack: ExitStack, work: Path, models: Sequence[GatewayModel]) -> Engine:
    """The LiteLLM proxy on loopback in front of ``models``, started with nothing that would
    reach the network: offline mode, the bundled model cost map, telemetry off."""
    config = {
        "model_list": [
            {
                "model_name": model.name,
                "litellm_params": {
                    "model": f"openai/{model.engine_model}",
                    "api_base": f"{model.engine_url}/v1",
                    "api_key": model.engine_key,
                },
            }
            for model in models
        ],
        "litellm_settings": {"telemetry": False},
        "general_settings": {"master_key": GATEWAY_KEY},
    }
    # YAML is a superset of JSON.
    config_path = work / "litellm.yaml"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    env = {
        **os.environ,
        "LITELLM_OFFLINE_MODE": "true",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "NO_PROXY": "*",
    }
    port = free_port()
    argv = [str(litellm_executable()), "--config", str(config_path)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    process = stack.enter_context(running_process(argv, work / "litellm.log", env))
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(f"{url}/health/liveliness", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, "the LiteLLM gateway", process, GATEWAY_START_SECONDS)
    return Engine(url, process.pid)


def ficc_cli(*args: str) -> str:
    """Run ``ficc ARGS`` from the repository root; its standard output (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "ficc", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=ROOT,
    )
    return done.stdout.strip()

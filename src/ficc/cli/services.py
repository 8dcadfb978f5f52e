"""`ficc services`, `service-show`, `service-create` and `service-start|drain|stop|remove`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Final

import click

from ficc.base.errors import NotFound
from ficc.cli.bodies import input_or_flags, missing_flags, parse_assignments
from ficc.cli.client import ControlClient
from ficc.cli.exits import EXIT_DEADLINE, EXIT_REFUSED, handles_errors
from ficc.cli.group import call, cli, emit, state_options
from ficc.cli.output import activity, fail_with

PREFIX: Final = "/api/v1/inference/services"
OPENAI_PATH: Final = "/api/v1/inference/v1"
POLL_SECONDS: Final = 0.25
DEFAULT_WAIT_SECONDS: Final = 600.0

# The state each operation ends in; None: the service record is gone.
TARGET_STATES: Final[dict[str, str | None]] = {
    "start": "running",
    "drain": "stopped",
    "stop": "stopped",
    "remove": None,
}


def service_rows(result: Any) -> Any:
    """The columns a person looks at first; the JSON keeps the whole object."""
    services = result["services"] if isinstance(result, dict) else [result]
    rows = [
        {
            "id": service["id"],
            "name": service["spec"]["name"],
            "state": service["state"],
            "desired": service.get("desired"),
            "restart": service["spec"].get("restart"),
            "runtime": service["spec"]["runtime"],
            "model": service["spec"]["model"],
            "node": service.get("node"),
            "replicas": service["spec"].get("replicas"),
            "revision": service["revision"],
            "error": service.get("error"),
            "updated_at": service.get("updated_at"),
        }
        for service in services
    ]
    return {"services": rows}


def _shown(state_dir: Path, service: dict[str, Any]) -> dict[str, Any]:
    """One service for a person: its fields, the OpenAI URL and model name to call it with."""
    spec = service["spec"]
    shown: dict[str, Any] = {
        key: value for key, value in service.items() if key not in ("spec", "replicas")
    }
    shown.update({f"spec.{key}": value for key, value in spec.items()})
    url = _server_url(state_dir)
    if url is not None:
        shown["openai_base_url"] = f"{url}{OPENAI_PATH}"
        shown["openai_model"] = service["id"]
    return {"service": shown, "replicas": service["replicas"]}


def _server_url(state_dir: Path) -> str | None:
    try:
        info = json.loads((state_dir / "server.json").read_text())
    except (OSError, ValueError):
        return None
    url = info.get("url") if isinstance(info, dict) else None
    return url if isinstance(url, str) else None


@cli.command("services")
@state_options
@handles_errors
def services(state_dir: Path, project: str) -> None:
    """List the project's inference services."""
    result = call(state_dir, project, "GET", PREFIX)
    emit(result, view=service_rows)


@cli.command("service-show")
@state_options
@click.argument("service")
@handles_errors
def service_show(state_dir: Path, project: str, service: str) -> None:
    """Show a service, its replicas, and the OpenAI URL and model name that reach it."""
    result = call(state_dir, project, "GET", f"{PREFIX}/{service}")
    emit(result, view=lambda found: _shown(state_dir, found))


@cli.command("service-create")
@state_options
@click.option("--input", "input_path", help="The service spec as JSON ('-' for stdin).")
@click.option("--name", help="The service's name.")
@click.option("--model", help="The model's ID (mdl_...), or the upstream name for openai.")
@click.option("--runtime", help="llama.cpp, vllm or openai.")
@click.option("--node", help="Run it on this node (default: FICC chooses).")
@click.option("--replicas", type=click.IntRange(min=1), help="How many replicas (default 1).")
@click.option(
    "--restart",
    type=click.Choice(["on-failure", "always", "never"]),
    help="Start a crashed engine again: on-failure (default), always or never.",
)
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A runtime option (n_ctx=4096); repeat.",
)
@handles_errors
def service_create(
    state_dir: Path,
    project: str,
    input_path: str | None,
    name: str | None,
    model: str | None,
    runtime: str | None,
    node: str | None,
    replicas: int | None,
    restart: str | None,
    options: tuple[str, ...],
) -> None:
    """Create a stopped service (start it with service-start)."""
    flags = {
        "--name": name,
        "--model": model,
        "--runtime": runtime,
        "--node": node,
        "--replicas": replicas,
        "--restart": restart,
        "--option": options,
    }
    body = input_or_flags(input_path, flags)
    if body is None:
        missing_flags({"--name": name, "--model": model, "--runtime": runtime})
        body = {"name": name, "model": model, "runtime": runtime}
        if node is not None:
            body["node"] = node
        if replicas is not None:
            body["replicas"] = replicas
        if restart is not None:
            body["restart"] = restart
        if options:
            body["options"] = parse_assignments("--option", options)
    result = call(state_dir, project, "POST", PREFIX, body)
    emit(result, view=lambda created: _shown(state_dir, created))


def _control_command(operation: str, summary: str) -> None:
    @cli.command(f"service-{operation}", help=summary)
    @state_options
    @click.argument("service")
    @click.option("--wait", is_flag=True, help=f"Return once the service is {_goal(operation)}.")
    @click.option(
        "--wait-timeout",
        type=click.FloatRange(min=0),
        default=DEFAULT_WAIT_SECONDS,
        show_default=True,
        help="With --wait: seconds before giving up (exit status 4).",
    )
    @click.option(
        "--acknowledge-unknown",
        is_flag=True,
        hidden=operation != "start",
        help="Start although an earlier attempt's outcome is unknown.",
    )
    @handles_errors
    def command(
        state_dir: Path,
        project: str,
        service: str,
        wait: bool,
        wait_timeout: float,
        acknowledge_unknown: bool,
    ) -> None:
        with ControlClient(state_dir, project) as client:
            result = control(client, service, operation, acknowledge_unknown=acknowledge_unknown)
            if wait:
                result = wait_for_state(client, service, operation, wait_timeout)
        emit(result, view=lambda shown: _shown(state_dir, shown) if shown else shown)


def _goal(operation: str) -> str:
    target = TARGET_STATES[operation]
    return "gone" if target is None else target


def control(
    client: ControlClient, service: str, operation: str, *, acknowledge_unknown: bool = False
) -> Any:
    """Apply ``operation`` at the service's current revision (read just before)."""
    current = client.request("GET", f"{PREFIX}/{service}")
    body = {
        "revision": current["revision"],
        "operation": operation,
        "acknowledge_unknown": acknowledge_unknown,
    }
    result = client.request("POST", f"{PREFIX}/{service}/control", body)
    return {"removed": service} if operation == "remove" else result


def wait_for_state(client: ControlClient, service: str, operation: str, seconds: float) -> Any:
    """Poll until the operation's state is reached; a failed start is refused with its error."""
    target = TARGET_STATES[operation]
    deadline = time.monotonic() + seconds
    with activity(f"waiting for {service} to be {_goal(operation)}") as show:
        while True:
            try:
                current = client.request("GET", f"{PREFIX}/{service}")
            except NotFound:
                if target is None:
                    return {"removed": service}
                raise
            show(f"{service} is {current['state']}; waiting for {_goal(operation)}")
            if current["state"] == target:
                return current
            if current["state"] == "failed":
                fail_with(
                    "service_failed",
                    f"service {service} failed: {current.get('error')}",
                    {"service": service, "state": "failed", "error": current.get("error")},
                    EXIT_REFUSED,
                )
            if time.monotonic() >= deadline:
                fail_with(
                    "deadline_reached",
                    f"service {service} is {current['state']}, not {_goal(operation)}, "
                    f"after {seconds:g} s",
                    {"service": service, "state": current["state"]},
                    EXIT_DEADLINE,
                )
            time.sleep(POLL_SECONDS)


_control_command("start", "Start a stopped or failed service (revision read for you).")
_control_command("drain", "Let a running service finish its requests, admitting no new ones.")
_control_command("stop", "Stop a service at once.")
_control_command("remove", "Remove a stopped service (its ID is never reused).")

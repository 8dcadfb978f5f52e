"""`ficc route-create`, `routes`, `route-show` and `route-remove`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import click

from ficc.cli.bodies import input_or_flags, missing_flags
from ficc.cli.exits import handles_errors
from ficc.cli.group import call, cli, emit, state_options

PREFIX: Final = "/api/v1/inference/routes"


def route_rows(result: Any) -> Any:
    """One row per target, so a person reads a route's order down the table."""
    routes = result["routes"] if isinstance(result, dict) and "routes" in result else [result]
    rows = [
        {
            "id": route["id"],
            "name": route["name"],
            "policy": route["policy"],
            "order": index + 1,
            "target": _label(target),
            "weight": target.get("weight"),
            "max_in_flight": target.get("max_in_flight"),
        }
        for route in routes
        for index, target in enumerate(route["targets"])
    ]
    return {"routes": rows}


def _label(target: dict[str, Any]) -> str:
    peer = target.get("peer")
    return str(target["service"]) if peer is None else f"{peer}/{target['service']}"


def parse_target(text: str) -> dict[str, Any]:
    """``SVC`` (a local service) or ``PEER/SVC`` (a peer's granted service)."""
    peer, slash, service = text.rpartition("/")
    return {"peer": peer, "service": service} if slash else {"service": text}


@cli.command("routes")
@state_options
@handles_errors
def routes(state_dir: Path, project: str) -> None:
    """List the project's routes, each target in the order it is tried."""
    emit(call(state_dir, project, "GET", PREFIX), view=route_rows)


@cli.command("route-show")
@state_options
@click.argument("route")
@handles_errors
def route_show(state_dir: Path, project: str, route: str) -> None:
    """Show a route and its targets."""
    emit(call(state_dir, project, "GET", f"{PREFIX}/{route}"), view=route_rows)


@cli.command("route-create")
@state_options
@click.option("--input", "input_path", help="The route as JSON ('-' for stdin).")
@click.option("--name", help="The model name callers use (1-63 letters, digits, . _ -).")
@click.option(
    "--policy",
    type=click.Choice(["priority", "least-busy"]),
    help="priority: the first target that admits; least-busy: the most free.",
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="SVC|PEER/SVC",
    help="A local service, or a peer's granted service; repeat, in order.",
)
@handles_errors
def route_create(
    state_dir: Path,
    project: str,
    input_path: str | None,
    name: str | None,
    policy: str | None,
    targets: tuple[str, ...],
) -> None:
    """Create a route: one model name over ordered targets."""
    flags = {"--name": name, "--policy": policy, "--target": targets}
    body = input_or_flags(input_path, flags)
    if body is None:
        missing_flags({"--name": name, "--policy": policy, "--target": targets or None})
        body = {"name": name, "policy": policy, "targets": [parse_target(t) for t in targets]}
    emit(call(state_dir, project, "POST", PREFIX, body), view=route_rows)


@cli.command("route-remove")
@state_options
@click.argument("route")
@handles_errors
def route_remove(state_dir: Path, project: str, route: str) -> None:
    """Remove a route (its ID is never reused); its services are untouched."""
    call(state_dir, project, "DELETE", f"{PREFIX}/{route}")
    emit({"removed": route})

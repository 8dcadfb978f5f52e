"""`ficc federation-request`, `-acquire`, `-pause`, `-transfers` and `-audit`: using what peers
grant this project, and seeing what was done."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import click

from ficc.base.errors import FiccError, error_from_code
from ficc.cli.client import ControlClient
from ficc.cli.exits import EXIT_DEADLINE, EXIT_INTERRUPTED, EXIT_REFUSED, handles_errors
from ficc.cli.federation import PREFIX
from ficc.cli.group import call, cli, emit, read_input, state_options
from ficc.domain.audit import MAX_AUDIT_PAGE, MAX_AUDIT_SEQ


@cli.command("federation-request")
@state_options
@click.argument("peer")
@click.option("--input", "input_path", required=True, help='{"operation", "body", "mutation_id"?}')
@click.option("--output", "output_path", help="Write the result here; the file must not exist.")
@handles_errors
def federation_request(
    state_dir: Path, project: str, peer: str, input_path: str, output_path: str | None
) -> None:
    """Send one remote operation through the selected grant (never retried).

    Exits 1 when the answer, or a stream's last event, is a refusal; ``--output`` is then
    removed, so the same command can run again.
    """
    from ficc.services.remote.client import INVOKE_TIMEOUT_SECONDS
    from ficc.services.remote.table import is_streaming

    body = read_input(input_path)
    output = _exclusive(output_path) if output_path is not None else None
    try:
        with ControlClient(state_dir, project, timeout_seconds=INVOKE_TIMEOUT_SECONDS) as client:
            path = f"{PREFIX}/peers/{peer}/request"
            if isinstance(body, dict) and is_streaming(body.get("operation"), body.get("body")):
                events = _LastEvent()
                with client.stream("POST", path, body) as response:
                    for data in response.iter_bytes():
                        events.feed(data)
                        _write(output, data)
                if response.content_type.startswith("text/event-stream"):
                    events.raise_error()
            else:
                result = client.request("POST", path, body)
                _write(output, (json.dumps(result, indent=2, sort_keys=True) + "\n").encode())
    except BaseException:
        if output is not None and output_path is not None:
            output.close()
            with contextlib.suppress(FileNotFoundError):
                Path(output_path).unlink()
        raise
    finally:
        if output is not None:
            output.close()


class _LastEvent:
    """The last whole server-sent event of a stream: an error there means it ended refused."""

    def __init__(self) -> None:
        self._pending = b""
        self._last = b""

    def feed(self, data: bytes) -> None:
        events = (self._pending + data).split(b"\n\n")
        self._pending = events.pop()
        if events:
            self._last = events[-1]

    def raise_error(self) -> None:
        last = (self._pending.strip() or self._last).removeprefix(b"data:").strip()
        try:
            event = json.loads(last)
        except ValueError:
            return
        error = event.get("error") if isinstance(event, dict) else None
        if isinstance(error, dict):
            details = error.get("details")
            raise error_from_code(
                str(error.get("code", "internal")),
                str(error.get("message", "the stream ended with an error")),
                details if isinstance(details, dict) else None,
            )


def _exclusive(path: str) -> BinaryIO:
    """Create the output file, refusing one that exists (and touching nothing)."""
    try:
        return open(path, "xb")
    except FileExistsError as exc:
        raise click.UsageError(f"--output: {path} exists already; it was not touched") from exc
    except OSError as exc:
        raise click.UsageError(f"--output: cannot create {path}: {exc.strerror}") from exc


def _write(output: BinaryIO | None, data: bytes) -> None:
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        output.write(data)
        output.flush()


@cli.command("federation-acquire")
@state_options
@click.argument("peer")
@click.argument("model")
@click.option(
    "--deadline",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds to wait before pausing.",
)
@handles_errors
def federation_acquire(
    state_dir: Path, project: str, peer: str, model: str, deadline: float
) -> None:
    """Start or resume acquiring a peer's model; pause it on the deadline or Ctrl-C."""
    with ControlClient(state_dir, project) as client:
        try:
            transfer = client.request("POST", f"{PREFIX}/peers/{peer}/models", {"model": model})
        except KeyboardInterrupt:
            # The server may have started the transfer before the answer arrived: find it.
            _pause_started(client, peer, model)
            sys.exit(EXIT_INTERRUPTED)
        try:
            transfer = _follow(client, transfer, deadline)
        except KeyboardInterrupt:
            transfer = _pause_quietly(client, transfer)
            if transfer["state"] == "complete":
                emit(transfer)
                return
            click.echo(json.dumps({"paused": transfer["id"], "reason": "interrupted"}), err=True)
            sys.exit(EXIT_INTERRUPTED)
        if transfer["state"] in ("running", "verifying"):
            transfer = _pause_quietly(client, transfer)
            if transfer["state"] != "complete":
                click.echo(json.dumps({"paused": transfer["id"], "reason": "deadline"}), err=True)
                emit(transfer)
                sys.exit(EXIT_DEADLINE)
        emit(transfer)
        if transfer["state"] != "complete":
            # Paused by FICC itself (stall, peer gone, allowance, disk) or failed: its error
            # says why; run the command again to resume a paused one.
            sys.exit(EXIT_REFUSED)


def _follow(client: ControlClient, transfer: dict[str, Any], deadline: float) -> dict[str, Any]:
    """Show a progress bar on stderr until the transfer leaves ``running`` or time is up."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    end = time.monotonic() + deadline
    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(transfer["id"], total=transfer["bytes_total"])
        while True:
            progress.update(bar, completed=transfer["bytes_done"])
            if transfer["state"] not in ("running", "verifying") or time.monotonic() >= end:
                return transfer
            time.sleep(min(0.25, max(end - time.monotonic(), 0)))
            transfer = client.request("GET", f"{PREFIX}/transfers/{transfer['id']}")


def _pause_quietly(client: ControlClient, transfer: dict[str, Any]) -> dict[str, Any]:
    """Pause (a second Ctrl-C cannot interrupt it); the transfer as it is afterwards."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with contextlib.suppress(FiccError):
            # Refused only when it completed or failed meanwhile; the GET below shows which.
            client.request("POST", f"{PREFIX}/transfers/{transfer['id']}/pause")
        with contextlib.suppress(FiccError):
            transfer = client.request("GET", f"{PREFIX}/transfers/{transfer['id']}")
    finally:
        signal.signal(signal.SIGINT, previous)
    return transfer


def _pause_started(client: ControlClient, peer: str, model: str) -> None:
    """Pause the running transfer of ``model`` from ``peer``, if the interrupted start began one."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with contextlib.suppress(FiccError):
            overview = client.request("GET", f"{PREFIX}/")
            for transfer in overview.get("transfers", []):
                if (
                    transfer.get("peer") == peer
                    and transfer.get("model") == model
                    and transfer.get("state") in ("running", "verifying")
                ):
                    _pause_quietly(client, transfer)
                    click.echo(
                        json.dumps({"paused": transfer["id"], "reason": "interrupted"}), err=True
                    )
    finally:
        signal.signal(signal.SIGINT, previous)


@cli.command("federation-pause")
@state_options
@click.argument("transfer")
@handles_errors
def federation_pause(state_dir: Path, project: str, transfer: str) -> None:
    """Pause an acquisition, keeping its partial bytes."""
    emit(call(state_dir, project, "POST", f"{PREFIX}/transfers/{transfer}/pause"))


@cli.command("federation-audit")
@state_options
@click.option(
    "--after",
    type=click.IntRange(min=0, max=MAX_AUDIT_SEQ),
    default=0,
    help="Entries after this seq.",
)
@click.option(
    "--limit", type=click.IntRange(min=1, max=MAX_AUDIT_PAGE), default=100, show_default=True
)
@handles_errors
def federation_audit(state_dir: Path, project: str, after: int, limit: int) -> None:
    """The audit log: pairing steps, grant changes and remote mutations, oldest first."""
    emit(call(state_dir, project, "GET", f"{PREFIX}/audit?after={after}&limit={limit}"))


@cli.command("federation-transfers")
@state_options
@handles_errors
def federation_transfers(state_dir: Path, project: str) -> None:
    """The project's model acquisitions with their progress."""
    overview = call(state_dir, project, "GET", f"{PREFIX}/")
    emit({"transfers": overview.get("transfers", [])})

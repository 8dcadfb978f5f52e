"""Entry point of the `ficc` console script.

Every command but ``serve`` and ``init`` talks to the running server of its state directory
through the control socket, as the local owner. Results are JSON on stdout (tables on a
terminal, see ``--format``); errors, usage errors included, are the JSON error envelope on
stderr. Exit status, by the error's class (:func:`exit_status`): 0 done, 1 refused by FICC, 2 usage
error, 3 no server, 4 deadline reached, 5 outcome unknown (inspect, or retry with the same
``mutation_id``: never read it as refused), 130 interrupted.

Start-up time matters (completion, scripts): this module and the command modules import only
click and the standard library at the top; the server's libraries load inside the commands
that need them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar

import click

from ficc.base.defaults import DEFAULT_HYPERNET_BIND, DEFAULT_LISTEN, LOG_FORMATS, LOG_LEVELS
from ficc.base.errors import FiccError, OutcomeUnknown
from ficc.cli.client import ControlClient, NoServer, ServerTimeout
from ficc.cli.config import env_name, load_config_file
from ficc.cli.output import fail_with, format_option

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NO_SERVER = 3
EXIT_DEADLINE = 4
EXIT_OUTCOME_UNKNOWN = 5
EXIT_INTERRUPTED = 130

EXIT_BY_CLASS: Final[dict[type[FiccError], int]] = {OutcomeUnknown: EXIT_OUTCOME_UNKNOWN}
"""Errors a script must handle otherwise than a refusal; every other FICC error is 1. An
unreachable peer or a failed engine stays 1, as the contract has it: nothing was done."""

F = TypeVar("F", bound=Callable[..., Any])


def state_options(function: F) -> F:
    """--state-dir and --project, taken by every command."""
    function = click.option(
        "--project",
        default="default",
        show_default=True,
        help="Project to act in.",
    )(function)
    function = click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="FICC_STATE_DIR",
        default=".ficc",
        help="State directory (default $FICC_STATE_DIR, else .ficc).",
    )(function)
    return format_option(function)


def exit_status(error: FiccError) -> int:
    """The CLI's exit status for ``error``, by its class (the nearest listed in its MRO)."""
    for cls in type(error).__mro__:
        if cls in EXIT_BY_CLASS:
            return EXIT_BY_CLASS[cls]
    return EXIT_REFUSED


def fail(error: FiccError) -> NoReturn:
    fail_with(error.code, error.message, error.details, exit_status(error))


def emit(
    result: Any, *, title: str | None = None, view: Callable[[Any], Any] | None = None
) -> None:
    """The result as JSON, or as tables on a terminal (``--format`` decides)."""
    from ficc.cli.output import emit as show

    show(result, title=title, view=view)


def handles_errors(function: F) -> F:
    """Translate FICC errors to the CLI's exit codes, once."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except NoServer as exc:
            fail_with("no_server", str(exc), None, EXIT_NO_SERVER)
        except ServerTimeout as exc:
            fail_with("timeout", str(exc), {"seconds": exc.seconds}, EXIT_DEADLINE)
        except FiccError as exc:
            fail(exc)
        except KeyboardInterrupt:
            fail_with("interrupted", "interrupted", None, EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]


def read_input(path: str) -> Any:
    """The JSON body of ``--input FILE`` (``-`` for stdin)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise click.UsageError(f"--input: cannot read {path}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.UsageError(f"--input: {path} is not valid JSON") from exc


def private_files() -> None:
    """Files this process creates (database, journals, server.json, engine logs) are 0600."""
    os.umask(0o077)


def call(state_dir: Path, project: str, method: str, path: str, body: Any = None) -> Any:
    with ControlClient(state_dir, project) as client:
        return client.request(method, path, body)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ficc")
def cli() -> None:
    """FICC: a control plane for inference clusters, with federation."""


def forwarding(
    name: str,
    method: str,
    path: str,
    doc: str,
    argument: str | None = None,
    *,
    done: str | None = None,
) -> None:
    """Register the command ``name`` that sends one request and prints its answer: ``path``
    names the command's one ``argument`` (if any) as ``{argument}``; with ``done``, the answer
    printed is ``{done: ARGUMENT}`` instead. Most commands are that."""

    def command(state_dir: Path, project: str, **given: str) -> None:
        answer = call(state_dir, project, method, path.format(**given))
        emit(answer if done is None or argument is None else {done: given[argument]})

    function: Callable[..., None] = handles_errors(command)
    if argument is not None:
        function = click.argument(argument)(function)
    cli.command(name, help=doc)(state_options(function))


@cli.command()
@state_options
@click.option("--label", default=None, help="A name for this cluster, shown to peers.")
@click.option(
    "--database",
    default=None,
    envvar=env_name("database"),
    help="Database URL (default: SQLite in the state dir).",
)
@handles_errors
def init(state_dir: Path, project: str, label: str | None, database: str | None) -> None:
    """Create the state directory (database, cluster key, owner token); idempotent."""
    import asyncio

    from ficc.bootstrap import Settings, initialise
    from ficc.cli.worktree import warn_if_not_ignored

    private_files()
    result = asyncio.run(
        initialise(Settings(state_dir=state_dir, database_url=database), label=label)
    )
    emit(
        {
            "state_dir": str(result.state_dir),
            "created": result.created,
            "label": result.label,
            "cluster_key": result.cluster_key,
            "owner_token_file": str(state_dir / "owner.token"),
        }
    )
    warn_if_not_ignored(state_dir)


@cli.command()
@click.option(
    "--config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    envvar=env_name("config"),
    is_eager=True,
    expose_value=False,
    callback=load_config_file,
    help="TOML file of settings named like these flags (flags and FICC_* variables win).",
)
@state_options
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    envvar=env_name("listen"),
    show_default=True,
    help="HOST:PORT of the API.",
)
@click.option(
    "--database",
    default=None,
    envvar=env_name("database"),
    help="Database URL (default: SQLite in the state dir).",
)
@click.option(
    "--hypernet-bind",
    default=DEFAULT_HYPERNET_BIND,
    envvar=env_name("hypernet-bind"),
    show_default=True,
)
@click.option(
    "--hypernet-relay", default="disabled", envvar=env_name("hypernet-relay"), show_default=True
)
@click.option(
    "--public-url",
    default=None,
    envvar=env_name("public-url"),
    help="The URL users reach this server at (behind a proxy); login links use it.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    envvar=env_name("log-format"),
    show_default=True,
    help="json: one object a line on stderr.",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="info",
    envvar=env_name("log-level"),
    show_default=True,
)
@click.option(
    "--upstream-allow",
    multiple=True,
    metavar="URL_PREFIX",
    envvar=env_name("upstream-allow"),
    help="A URL prefix openai services may reach (repeatable; none by default).",
)
@click.option(
    "--ray",
    default=None,
    metavar="ADDRESS",
    envvar=env_name("ray"),
    help="Run replicas on the nodes of this Ray cluster (HOST:PORT of its head).",
)
def serve(
    state_dir: Path,
    project: str,
    listen: str,
    database: str | None,
    hypernet_bind: str,
    hypernet_relay: str,
    public_url: str | None,
    log_format: str,
    log_level: str,
    upstream_allow: tuple[str, ...],
    ray: str | None,
) -> None:
    """Serve the HTTP API, the web UI and the control socket until SIGTERM or SIGINT."""
    import asyncio
    import gc

    import uvloop

    from ficc.adapters.logs import configure_logging
    from ficc.bootstrap import Settings
    from ficc.cli.serve import (
        ServeOptions,
        parse_listen,
        parse_public_url,
        parse_upstream_allow,
        serve,
    )

    private_files()
    try:
        parse_listen(listen)
        upstream_allow = parse_upstream_allow(upstream_allow)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        public_url = parse_public_url(public_url)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    configure_logging(log_format, log_level)
    settings = Settings(
        state_dir=state_dir,
        database_url=database,
        listen=listen,
        hypernet_bind=hypernet_bind,
        hypernet_relay=hypernet_relay,
        upstream_allow=upstream_allow,
        ray_address=ray or None,
    )
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(settings, ServeOptions(public_url=public_url)))
    except FiccError as exc:
        fail(exc)
    except OSError as exc:
        fail_with("os_error", str(exc), None, EXIT_REFUSED)
    # Everything is closed and flushed: the exit need not collect the whole heap for cycles
    # (FastAPI's and pydantic's objects made that 0.4 s of every stop).
    gc.freeze()


@cli.command("token-create")
@state_options
@click.option("--scope", "scopes", multiple=True, required=True, help="A scope; repeat.")
@click.option("--lifetime", type=int, default=None, help="Lifetime in seconds.")
@handles_errors
def token_create(
    state_dir: Path, project: str, scopes: tuple[str, ...], lifetime: int | None
) -> None:
    """Create an API token for --project holding the scopes; prints it once."""
    body = {"scopes": list(scopes), "projects": [project], "lifetime": lifetime}
    emit(call(state_dir, project, "POST", "/api/v1/tokens", body))


@cli.command("login-link")
@state_options
@handles_errors
def login_link(state_dir: Path, project: str) -> None:
    """Print a one-time, short-lived browser login URL for the local owner."""
    click.echo(call(state_dir, project, "POST", "/api/v1/login-links")["url"])


@cli.command("set-password")
@state_options
@click.option("--password-stdin", is_flag=True, required=True, help="Read the password from stdin.")
@handles_errors
def set_password(state_dir: Path, project: str, password_stdin: bool) -> None:
    """Set the owner's password for browser login (read from stdin)."""
    password = sys.stdin.readline().rstrip("\n")
    call(state_dir, project, "PUT", "/api/v1/owner/password", {"password": password})
    emit({"password_set": True})


@cli.command("model-add")
@state_options
@click.option("--name", required=True, help="The model's name.")
@click.argument("paths", nargs=-1, required=True)
@handles_errors
def model_add(state_dir: Path, project: str, name: str, paths: tuple[str, ...]) -> None:
    """Import local files as one model (streamed, hashed, stored by content).

    Waits as long as the import takes (a large model hashes and syncs for minutes).
    """
    from ficc.cli.models import import_model

    emit(import_model(state_dir, project, name, [Path(path) for path in paths]))


forwarding("models", "GET", "/api/v1/models", "List the project's models.")
forwarding(
    "nodes", "GET", "/api/v1/nodes", "List this cluster's nodes with capacity and availability."
)


@cli.command("example-model")
@state_options
@handles_errors
def example_model(state_dir: Path, project: str) -> None:
    """Print the path of the small example model the install brings (SmolLM2-135M GGUF)."""
    from ficc.adapters.example_model import example_model_path

    click.echo(str(example_model_path()))


def main() -> None:
    # Importing a command module registers its commands.
    from ficc.cli import (  # noqa: F401
        accounts,
        backup,
        chat,
        federation,
        models,
        remote,
        routes,
        service_logs,
        services,
    )
    from ficc.cli.output import run

    run(cli)

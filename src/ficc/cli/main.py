"""Entry point of the `ficc` console script.

Every command but ``serve`` and ``init`` talks to the running server of its state directory
through the control socket, as the local owner. Results are JSON on stdout (tables on a
terminal, see ``--format``); errors, usage errors included, are the JSON error envelope on
stderr. Exit status, by the error's class: see :mod:`ficc.cli.exits`.

This module holds the commands that make and run a server (``init``, ``serve``) and ``main``,
which imports the command modules so that they register their commands on the group
(:mod:`ficc.cli.group`); no command module imports this one.

Start-up time matters (completion, scripts): this module and the command modules import only
click and the standard library at the top; the server's libraries load inside the commands
that need them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ficc.base.defaults import (
    DEFAULT_HYPERNET_BIND,
    DEFAULT_LISTEN,
    DEFAULT_STREAM_JOIN_MS,
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_STREAM_JOIN_MS,
)
from ficc.base.errors import FiccError
from ficc.cli.config import env_name, load_config_file
from ficc.cli.exits import EXIT_REFUSED, fail, handles_errors
from ficc.cli.group import DATABASE_HELP, cli, emit, forwarding, private_files, state_options
from ficc.cli.output import fail_with

F = TypeVar("F", bound=Callable[..., Any])


def setting(flag: str, **attrs: Any) -> Callable[[F], F]:
    """``--FLAG``, which the variable ``FICC_FLAG`` (or the config file) may set instead."""
    return click.option(f"--{flag}", envvar=env_name(flag), **attrs)


@cli.command()
@state_options
@click.option("--label", default=None, help="A name for this cluster, shown to peers.")
@setting("database", default=None, help=DATABASE_HELP)
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
@setting(
    "config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    is_eager=True,
    expose_value=False,
    callback=load_config_file,
    help="TOML file of settings named like these flags (flags and FICC_* variables win).",
)
@state_options
@setting("listen", default=DEFAULT_LISTEN, show_default=True, help="HOST:PORT of the API.")
@setting("database", default=None, help=DATABASE_HELP)
@setting("hypernet-bind", default=DEFAULT_HYPERNET_BIND, show_default=True)
@setting("hypernet-relay", default="disabled", show_default=True)
@setting(
    "public-url",
    default=None,
    help="The URL users reach this server at (behind a proxy); login links use it.",
)
@setting(
    "log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    help="json: one object a line on stderr.",
)
@setting(
    "log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
)
@setting(
    "upstream-allow",
    multiple=True,
    metavar="URL_PREFIX",
    help="A URL prefix openai services may reach (repeatable; none by default).",
)
@setting(
    "ray",
    default=None,
    metavar="ADDRESS",
    help="Run replicas on the nodes of this Ray cluster (HOST:PORT of its head).",
)
@setting(
    "stream-join-ms",
    type=click.IntRange(0, MAX_STREAM_JOIN_MS),
    default=DEFAULT_STREAM_JOIN_MS,
    show_default=True,
    help="A streamed answer's pieces leave at most this often; 0: each event as it came.",
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
    stream_join_ms: int,
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
        stream_join_ms=stream_join_ms,
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


forwarding(
    "nodes", "GET", "/api/v1/nodes", "List this cluster's nodes with capacity and availability."
)


def main() -> None:
    # Importing a command module registers its commands.
    from ficc.cli import (  # noqa: F401
        accounts,
        audit,
        backup,
        chat,
        federation,
        models,
        remote,
        routes,
        service_logs,
        services,
        usage,
    )
    from ficc.cli.output import run

    run(cli)

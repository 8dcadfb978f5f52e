"""``ficc audit-verify``: check the audit log's hash chain and signed heads, offline.

It reads the database itself (no server needed, safe while one serves) and the cluster key
of the state directory, so a log altered behind the server's back is found all the same.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

import click

from ficc.base.errors import InvalidInput
from ficc.cli.config import env_name
from ficc.cli.exits import EXIT_REFUSED, handles_errors
from ficc.cli.group import cli, emit, state_options
from ficc.cli.output import fail_with
from ficc.domain.audit_chain import ChainReport

BROKEN_CODE: Final = "audit_chain_broken"


@cli.command("audit-verify")
@state_options
@click.option(
    "--database",
    default=None,
    envvar=env_name("database"),
    help="Database URL (default: SQLite in the state dir).",
)
@handles_errors
def audit_verify(state_dir: Path, project: str, database: str | None) -> None:
    """Check that every audit row follows the one before it and the signed heads hold.

    Prints the report; exit status 0 when the chain holds, 1 when it is broken (the report's
    ``broken`` and the error on stderr name the first broken row).
    """
    report = asyncio.run(_verify(state_dir, database))
    emit(report)
    broken = report["broken"]
    if broken is not None:
        fail_with(
            BROKEN_CODE,
            f"the audit chain is broken at row {broken['seq']}: {broken['message']}",
            {"seq": broken["seq"], "reason": broken["reason"]},
            EXIT_REFUSED,
        )


async def _verify(state_dir: Path, url: str | None) -> ChainReport:
    from ficc.adapters.keys import ClusterKey, verify_signature
    from ficc.adapters.sql.database import Database, default_url
    from ficc.adapters.sql.schema import schema_state
    from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
    from ficc.adapters.state_dir import StateDir
    from ficc.services.audit import Audit

    state = StateDir(state_dir)
    if not state.cluster_key.is_file() or (url is None and not state.database.is_file()):
        raise InvalidInput(f"{state_dir} is not an initialised state directory", field="state_dir")
    key = ClusterKey.load(state.cluster_key)
    database = Database(url or default_url(state_dir))
    try:
        schema = await schema_state(database)
        if not schema.at_head:
            raise InvalidInput(
                f"the database is at revision {schema.current}, not {schema.head}: "
                "run `ficc db upgrade` first",
                field="database",
            )
        log = Audit(SqlUnitOfWorkFactory(database), key.public_key, verify_signature)
        return await log.verify_chain()
    finally:
        await database.dispose()

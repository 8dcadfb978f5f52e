"""`ficc federation-reconcile` and `ficc federation-usage`: a grant's metered use, its
receipts and their reconciliation with the peer's, from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ficc.cli.client import ControlClient
from ficc.cli.exits import handles_errors
from ficc.cli.federation import PREFIX, peer_grant_command
from ficc.cli.group import cli, emit
from ficc.domain.usage_receipts import RECORD_FIELDS

peer_grant_command(
    "federation-reconcile",
    "reconcile",
    "Only this grant of the peer (default: every one).",
    "Compare this side's usage receipts with the peer's, fetching those missing here.",
)


USAGE_FORMATS = ("json", "table", "csv")
USAGE_COLUMNS = tuple(field for field in RECORD_FIELDS if field != "grant")
"""A usage record's fields, but the grant the command names."""


@cli.command("federation-usage")
@click.argument("grant")
@click.option("--since", help="Only requests started at or after this RFC 3339 time.")
@click.option("--until", help="Only requests started before this RFC 3339 time.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(USAGE_FORMATS),
    default=None,
    envvar="FICC_FORMAT",
    help="json, table or csv (default: table on a terminal, json otherwise).",
)
@click.option(
    "--receipts",
    is_flag=True,
    help="Each record with its signed receipt (csv: a receipt column of its JSON), which a "
    "third party verifies with the grantor's public cluster key alone.",
)
@click.option("--project", default="default", show_default=True, help="Project to act in.")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="FICC_STATE_DIR",
    default=".ficc",
    help="State directory (default $FICC_STATE_DIR, else .ficc).",
)
@handles_errors
def federation_usage(
    grant: str,
    since: str | None,
    until: str | None,
    output_format: str | None,
    receipts: bool,
    project: str,
    state_dir: Path,
) -> None:
    """A grant's usage records on this side, every page, and its totals per hour and day."""
    from urllib.parse import urlencode

    records: list[dict[str, Any]] = []
    after: str | None = None
    page: dict[str, Any] = {}
    with ControlClient(state_dir, project) as client:
        while True:
            query = {
                "limit": 1000,
                "since": since,
                "until": until,
                "after": after,
                "receipts": "true" if receipts else None,
            }
            wanted = urlencode({k: v for k, v in query.items() if v is not None})
            page = client.request("GET", f"{PREFIX}/grants/{grant}/usage?{wanted}")
            records.extend(page["records"])
            after = page.get("next")
            if after is None:
                break
    chosen = output_format or ("table" if sys.stdout.isatty() else "json")
    result = {**page, "records": records, "next": None}
    if chosen == "csv":
        import csv

        columns = (*USAGE_COLUMNS, "receipt") if receipts else USAGE_COLUMNS
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for record in records:
            if receipts:
                shown = record.get("receipt")
                text = "" if shown is None else json.dumps(shown, separators=(",", ":"))
                record = {**record, "receipt": text}
            writer.writerow(record)
        return
    if chosen == "json":
        click.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    click.get_current_context().meta["ficc.format"] = "table"
    emit(
        {
            "records": [{k: r.get(k) for k in USAGE_COLUMNS} for r in records],
            "totals": {k: v for k, v in page.get("totals", {}).items() if k not in ("hours",)},
        }
    )

"""The web console's plumbing: who is looking, at which project, and how values are shown.

Pages name their project in the path (``/ui/p/{project}/…``) because a browser cannot send the
API's project header on a link; everything else (authentication, CSRF on unsafe methods, scopes,
project admission) is the API's own code in :mod:`ficc.web.auth`, in the same order.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl

from fastapi import Depends, Request
from fastapi.templating import Jinja2Templates

from ficc.base.errors import InvalidInput, TooLarge
from ficc.base.times import format_time, parse_time
from ficc.domain.grants import GrantState
from ficc.domain.principals import Principal
from ficc.domain.receipts import unb64
from ficc.web.auth import (
    AUTHENTICATED_ONLY,
    Context,
    authenticate,
    cluster_of,
    session_cookie,
)

TEMPLATES: Final = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
MAX_FORM_BYTES: Final = 64 * 1024
"""A console form is a handful of fields; anything larger is refused before it is parsed."""
MAX_FORM_FIELDS: Final = 256

SCOPE_WORDS: Final[Mapping[str, str]] = {
    "discover": "See which services and models this project offers, by name and ID.",
    "inference:invoke": "Send prompts to the granted services and read their answers.",
    "inference:manage": "Create, change, start and stop inference services in this project.",
    "models:read": "Read the manifests (names, sizes, digests) of the granted models.",
    "models:transfer": "Download the granted models' files, up to the transfer allowance.",
    "models:manage": "Add and remove models in this project.",
    "resources:read": "See the granted nodes with their capacity and availability.",
}
"""Each remote scope in the words an approver reads before signing."""


@dataclass(frozen=True)
class ConsoleContext(Context):
    """A console request: the API's context plus the session's CSRF token for the forms."""

    csrf_token: str


async def _csrf_of(request: Request, principal: Principal) -> str:
    if principal.session_id is None:
        return ""  # a bearer credential needs no CSRF token
    sessions = cluster_of(request).accounts.sessions
    _, csrf_token = await sessions.authenticate_session(session_cookie(request) or "")
    return csrf_token


def console(*scopes: str) -> Any:
    """The dependency of a console route that needs every scope in ``scopes`` (none: any caller).

    The scope is checked before the project is looked up, so a caller without the scope learns
    nothing about which projects exist.
    """

    async def dependency(request: Request) -> ConsoleContext:
        principal = await authenticate(request)
        principal.require_scope(*scopes)
        name = request.path_params.get("project", "default")
        project = await cluster_of(request).projects.admitted(principal, str(name))
        return ConsoleContext(
            cluster=cluster_of(request),
            principal=principal,
            project=project,
            csrf_token=await _csrf_of(request, principal),
        )

    dependency.required_scopes = scopes or (AUTHENTICATED_ONLY,)  # type: ignore[attr-defined]
    dependency.local_owner = False  # type: ignore[attr-defined]
    return Depends(dependency)


async def read_form(request: Request) -> dict[str, list[str]]:
    """An ``application/x-www-form-urlencoded`` body, bounded; each name maps to its values."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise TooLarge(f"a console form is at most {MAX_FORM_BYTES} bytes", field="body")
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=MAX_FORM_FIELDS,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput("the form is not valid URL-encoded UTF-8", field="body") from exc
    form: dict[str, list[str]] = {}
    for name, value in pairs:
        form.setdefault(name, []).append(value)
    return form


def form_int(form: Mapping[str, Sequence[str]], name: str, *, field: str | None = None) -> int:
    """One integer field; a missing or malformed one is refused naming the field."""
    values = form.get(name, [])
    label = field or name
    if len(values) != 1 or not values[0].strip().lstrip("-").isdigit():
        raise InvalidInput(f"{label} must be a whole number", field=label)
    return int(values[0].strip())


def form_text(form: Mapping[str, Sequence[str]], name: str) -> str:
    values = form.get(name, [])
    if len(values) != 1 or not values[0].strip():
        raise InvalidInput(f"{name} is required", field=name)
    return values[0].strip()


def grant_from_form(form: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The GRANT object the approval form describes; the grant rules check it afterwards."""
    grant: dict[str, Any] = {
        "scopes": list(form.get("scopes", [])),
        "services": list(form.get("services", [])),
        "models": list(form.get("models", [])),
        "nodes": list(form.get("nodes", [])),
        "stop_on_revoke": form.get("stop_on_revoke", []) == ["on"],
    }
    for name in ("concurrent", "requests", "request_bytes", "response_bytes", "transfer_bytes"):
        grant[name] = form_int(form, name, field=f"grant.{name}")
    grant["lifetime"] = form_int(form, "lifetime_hours", field="grant.lifetime") * 3600
    for name in ("tokens", "tokens_per_minute", "requests_per_minute"):
        # Optional: left empty, the grant is not limited by that rule.
        if any(value.strip() for value in form.get(name, [])):
            grant[name] = form_int(form, name, field=f"grant.{name}")
    return grant


USAGE_CHART_WIDTH: Final = 480
USAGE_CHART_HEIGHT: Final = 120


def usage_chart(hours: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Tokens per hour as bars for the grant page's inline SVG (prompt below, completion
    above), their geometry worked out here so the page needs no JavaScript. None when
    nothing was used."""
    if not hours:
        return None
    top = max(max(int(h["prompt_tokens"]) + int(h["completion_tokens"]) for h in hours), 1)
    step = USAGE_CHART_WIDTH / len(hours)
    bars = []
    for index, hour in enumerate(hours):
        prompt = int(hour["prompt_tokens"]) * USAGE_CHART_HEIGHT / top
        completion = int(hour["completion_tokens"]) * USAGE_CHART_HEIGHT / top
        bars.append(
            {
                "x": round(index * step, 1),
                "width": round(max(step - 1, 1), 1),
                "prompt_y": round(USAGE_CHART_HEIGHT - prompt, 1),
                "prompt_height": round(prompt, 1),
                "completion_y": round(USAGE_CHART_HEIGHT - prompt - completion, 1),
                "completion_height": round(completion, 1),
                "hour": hour,
            }
        )
    return {
        "width": USAGE_CHART_WIDTH,
        "height": USAGE_CHART_HEIGHT,
        "top": top,
        "first": hours[0]["hour"],
        "last": hours[-1]["hour"],
        "bars": bars,
    }


# --- how values are shown -------------------------------------------------------------------


def fingerprint(cluster_key: str | None) -> str:
    """The first 128 bits of SHA-256 of the cluster key, in groups of four hex digits: short
    enough to read aloud when two people compare keys out of band."""
    if not cluster_key:
        return ""
    digest = hashlib.sha256(unb64(cluster_key)).hexdigest()[:32]
    return " ".join(digest[i : i + 4] for i in range(0, 32, 4))


def grouped(value: str | None, size: int = 8) -> str:
    """A long identifier in groups, so a reader can compare it piece by piece."""
    if not value:
        return ""
    return " ".join(value[i : i + size] for i in range(0, len(value), size))


def size(value: float | int | None) -> str:
    """Bytes in binary units with one decimal (``1.5 GiB``)."""
    if value is None:
        return "—"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{int(amount)} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float | int | None) -> str:
    """Seconds as the two largest units (``3 d 4 h``, ``5 min 2 s``)."""
    if seconds is None or math.isinf(seconds):
        return "—"
    left = max(0, round(seconds))
    parts: list[str] = []
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= length or (unit == "s" and not parts):
            parts.append(f"{left // length} {unit}")
            left %= length
        if len(parts) == 2:
            break
    return " ".join(parts)


def moment(at: object) -> datetime | None:
    """A time as the services give it: a datetime, or RFC 3339 text (a peer's copy of a grant
    keeps its times as text); anything else is no time at all."""
    if isinstance(at, datetime):
        return at
    if isinstance(at, str):
        try:
            return parse_time(at)
        except ValueError:
            return None
    return None


def relative(at: object, now: datetime) -> str:
    when = moment(at)
    if when is None:
        return "never"
    delta = (when - now).total_seconds()
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(-delta)} ago"


def absolute(at: object) -> str:
    when = moment(at)
    return "—" if when is None else format_time(when)


@dataclass(frozen=True)
class Standing:
    """How a grant stands, the one reading every page shows: live or ended, and the moment
    that says so (when it expires, or when it was revoked or expired)."""

    state: str
    ended: bool
    event: str
    """``expires`` while live; ``revoked`` or ``expired`` once ended (a retired grant too)."""
    at: datetime | None


def standing(grant: Mapping[str, Any], now: datetime) -> Standing:
    """A grant given or received, as it stands at ``now``: anything but ``active`` has ended,
    and an active one past its expiry is expired, whatever a stale copy still says."""
    state = str(grant.get("state") or "unknown")
    expires_at = moment(grant.get("expires_at"))
    revoked_at = moment(grant.get("revoked_at"))
    if state == GrantState.ACTIVE and expires_at is not None and expires_at <= now:
        state = GrantState.EXPIRED
    if state == GrantState.ACTIVE:
        return Standing(state, False, "expires", expires_at)
    if state == GrantState.EXPIRED or (state == GrantState.RETIRED and revoked_at is None):
        return Standing(state, True, "expired", expires_at)
    return Standing(state, True, "revoked", revoked_at)


def percent(done: int | None, total: int | None) -> int:
    if not total:
        return 0
    return max(0, min(100, round(100 * (done or 0) / total)))


def eta(transfer: Mapping[str, Any]) -> str:
    """Time left at the current speed, or a dash when there is no speed to go by."""
    rate = transfer.get("rate_bytes_per_second") or 0
    if transfer.get("state") != "running" or rate <= 0:
        return "—"
    return duration((transfer["bytes_total"] - transfer["bytes_done"]) / rate)


TEMPLATES.env.filters.update(
    fingerprint=fingerprint, grouped=grouped, size=size, duration=duration, absolute=absolute
)
TEMPLATES.env.globals.update(
    SCOPE_WORDS=SCOPE_WORDS, relative=relative, percent=percent, eta=eta, standing=standing
)

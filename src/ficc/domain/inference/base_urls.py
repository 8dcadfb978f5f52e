"""The base URL of an OpenAI-compatible server: checked, and stored in one canonical spelling.

One spelling per address matters because the owner's upstream allow-list compares these URLs:
a host written another way (``0x7f.1``, ``[::ffff:127.0.0.1]``) must not pass a rule its
canonical form fails.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import unquote, urlsplit

from ficc.base.errors import InvalidInput

MAX_BASE_URL_CHARS: Final = 2048
_DNS_NAME = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))*$")
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")


def _ipv4_number(host: str) -> int | None:
    """The address of a host written in any form ``inet_aton`` takes, or None.

    ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and ``127.1`` all reach 127.0.0.1 when a resolver
    is given them; they are made ordinary dotted quads before any rule compares them.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        if part.startswith("0x"):
            digits, base, allowed = part[2:] or "0", 16, "0123456789abcdef"
        elif len(part) > 1 and part.startswith("0"):
            digits, base, allowed = part[1:], 8, "01234567"
        else:
            digits, base, allowed = part, 10, "0123456789"
        if not digits or any(ch not in allowed for ch in digits):
            return None
        values.append(int(digits, base))
    *head, last = values
    if any(value > 255 for value in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for index, value in enumerate(head):
        number += value << (8 * (3 - index))
    return number


def canonical_host(host: str) -> str | None:
    """One spelling per address: IP literals in their standard form, names lower case.

    None for a host that is neither a DNS name nor an IP address (a numeric form out of range,
    a zone index, stray characters).
    """
    host = host.lower()
    if "%" in host:
        return None
    if ":" in host:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return None
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else f"[{address.compressed}]"
    host = host.removesuffix(".")
    if _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
        number = _ipv4_number(host)
        return None if number is None else str(ipaddress.IPv4Address(number))
    return host if _DNS_NAME.fullmatch(host) else None


def parse_base_url(name: str, value: object) -> str:
    """An http(s) URL of an OpenAI-compatible server, stored without a trailing ``/v1``.

    Users paste the URL an OpenAI client takes (``http://host:8000/v1``) as often as the server's
    root; both mean the same server. Credentials, queries and fragments are refused because they
    would be shown wherever the spec is. The host is stored in its canonical form (see
    :func:`canonical_host`), so the URL an upstream rule matches is the URL that is connected to,
    and the path may hold no dot segments that would climb out of an allowed prefix.
    """
    rule = (
        f"{name} must be an http or https URL with a host and no user, query, fragment "
        "or dot segments"
    )
    if not isinstance(value, str) or not 0 < len(value) <= MAX_BASE_URL_CHARS:
        raise InvalidInput(rule, field=name)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(rule, field=name) from exc
    if (
        parts.scheme not in {"http", "https"}
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or "@" in parts.netloc
        or "\\" in value
        or parts.query
        or parts.fragment
        or any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in value)
    ):
        raise InvalidInput(rule, field=name)
    host = canonical_host(parts.hostname)
    segments = parts.path.split("/")
    if host is None or any(unquote(s) in {".", ".."} or "/" in unquote(s) for s in segments):
        raise InvalidInput(rule, field=name)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{path}"

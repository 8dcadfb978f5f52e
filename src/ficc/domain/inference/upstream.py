"""The upstream servers ``openai`` services may reach: the owner's allow-list of URL prefixes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from ficc.base.errors import PermissionDenied
from ficc.domain.inference.base_urls import parse_base_url
from ficc.domain.inference.runtimes import RuntimeName
from ficc.domain.inference.spec import ServiceSpec

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


@dataclass(frozen=True)
class UpstreamPrefix:
    """An upstream URL prefix the cluster owner allowed, compared part by part."""

    url: str
    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]

    @classmethod
    def parse(cls, value: object, *, name: str = "upstream prefix") -> UpstreamPrefix:
        """A prefix in the canonical form :func:`parse_base_url` gives base URLs."""
        url = parse_base_url(name, value)
        scheme, host, port, segments = _url_parts(url)
        return cls(url, scheme, host, port, segments)

    def covers(self, base_url: str) -> bool:
        """Same scheme, host and port, and the prefix's path segments begin the URL's path.

        ``http://a.com`` covers ``http://a.com/x`` but not ``http://a.com.evil`` or
        ``http://a.com:8080``; ``http://a.com/v`` does not cover ``http://a.com/vx``.
        """
        scheme, host, port, segments = _url_parts(base_url)
        return (scheme, host, port) == (self.scheme, self.host, self.port) and segments[
            : len(self.segments)
        ] == self.segments


def _url_parts(canonical_url: str) -> tuple[str, str, int, tuple[str, ...]]:
    parts = urlsplit(canonical_url)
    host = canonical_url.split("://", 1)[1].split("/", 1)[0]
    host = host.rsplit(":", 1)[0] if parts.port is not None else host
    port = parts.port if parts.port is not None else _DEFAULT_PORTS[parts.scheme]
    segments = tuple(s for s in parts.path.split("/") if s)
    return parts.scheme, host, port, segments


UPSTREAM_RULE: Final = (
    "options.base_url must begin with an upstream URL prefix the cluster owner allowed "
    "(ficc serve --upstream-allow URL_PREFIX)"
)


@dataclass(frozen=True)
class UpstreamAllowList:
    """The upstream servers ``openai`` services may reach; empty (nothing) unless the owner says.

    An ``openai`` service makes FICC send requests, and prompts, to its ``base_url``; without
    this list any ``inference:manage`` holder could point FICC at the cloud metadata address,
    private networks or other projects' loopback engines.
    """

    prefixes: tuple[UpstreamPrefix, ...] = ()

    @classmethod
    def parse(cls, values: Iterable[object]) -> UpstreamAllowList:
        """From the owner's ``--upstream-allow`` values; a malformed one is refused."""
        return cls(tuple(UpstreamPrefix.parse(v, name="--upstream-allow") for v in values))

    def check(self, spec: ServiceSpec) -> None:
        """PermissionDenied unless ``spec`` reaches no upstream or an allowed one."""
        base_url = spec.options.get("base_url")
        if spec.runtime is not RuntimeName.OPENAI or not isinstance(base_url, str):
            return
        if not any(prefix.covers(base_url) for prefix in self.prefixes):
            raise PermissionDenied(
                UPSTREAM_RULE,
                details={"field": "options.base_url", "reason": "upstream_not_allowed"},
            )

"""Model manifests: strict validation and the canonical SHA-256 that names a model's content.

A manifest is ``{"name", "format", "files": [{"path", "size", "sha256"}], "metadata"}``. It is
what a peer receives before it fetches any byte, so it is checked as hostile input: unknown keys
are refused, every file path is a safe relative path, and no string anywhere (metadata included)
may carry a URL, because a manifest describes content, never where to fetch it.

The canonical SHA-256 is SHA-256 of the RFC 8785 (JCS) encoding; two clusters that hold the same
manifest compute the same digest, whatever their JSON library does with key order or spacing.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NewType

import rfc8785

from ficc.base.errors import InvalidInput, TooLarge
from ficc.base.units import KiB, TiB

SafeRelativePath = NewType("SafeRelativePath", str)
"""A ``/``-separated relative path that cannot leave the directory it is joined to."""

Sha256 = NewType("Sha256", str)
"""64 lowercase hexadecimal characters."""

MANIFEST_KEYS: Final = frozenset({"name", "format", "files", "metadata"})
FILE_KEYS: Final = frozenset({"path", "size", "sha256"})

MAX_NAME_CHARS: Final = 256
MAX_FORMAT_CHARS: Final = 64
MAX_FILES: Final = 4096
MAX_PATH_CHARS: Final = 1024
# Most filesystems refuse a name longer than 255 bytes.
MAX_PATH_SEGMENT_BYTES: Final = 255
MAX_METADATA_DEPTH: Final = 16
# A manifest travels in one ficc.federation/1 frame (at most 1 MiB) with room for its envelope.
MAX_MANIFEST_BYTES: Final = 512 * KiB
# RFC 8785 encodes numbers as IEEE 754 doubles: larger integers would not round-trip.
MAX_JSON_INTEGER: Final = 2**53 - 1
MAX_FILE_BYTES: Final = 1 * TiB
"""The largest file a manifest may declare: several times today's largest open model files,
and far below what a hostile manifest could otherwise make a requester plan for."""
MAX_MODEL_BYTES: Final = 1 * TiB
"""The largest sum of a manifest's file sizes."""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Any RFC 3986 scheme followed by an authority, anywhere in the text: "s3://", "git+ssh://".
# Tried only where a run of scheme characters begins, with the run's first letter found
# without backtracking: the same texts match as with a plain ``[A-Za-z][A-Za-z0-9+.\-]*://``,
# but in time linear in the text (that one rescans the rest of a run from each of its
# characters, so a long word in a manifest's metadata took quadratic time).
_SCHEME_AUTHORITY = re.compile(r"(?<![A-Za-z0-9+.\-])[0-9+.\-]*[A-Za-z][A-Za-z0-9+.\-]*://")
# Schemes that locate content even without "//": "hf:org/model", "file:/etc", "s3:bucket/key".
_LOCATOR_SCHEME = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?:https?|ftps?|sftp|file|s3|gs|hf|wss?)\s*:", re.IGNORECASE
)
# A network-path reference: "//host/path" at the start of the text or after a space or bracket.
_AUTHORITY = re.compile(r"(?:^|[\s(<\[\"'=])//[^\s/]")
_WWW = re.compile(r"(?<![A-Za-z0-9.\-])www\.[A-Za-z0-9\-]+\.", re.IGNORECASE)


@dataclass(frozen=True)
class ManifestFile:
    """One file of a model: where it goes under the model directory, and its content."""

    path: SafeRelativePath
    size: int
    sha256: Sha256

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Manifest:
    """A validated manifest; build it only with :func:`parse_manifest` or :func:`build_manifest`."""

    name: str
    format: str
    files: tuple[ManifestFile, ...]
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The manifest as plain JSON values (a fresh copy: the manifest stays immutable)."""
        return {
            "name": self.name,
            "format": self.format,
            "files": [entry.to_json() for entry in self.files],
            "metadata": copy.deepcopy(self.metadata),
        }

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def looks_like_url(text: str) -> bool:
    """True if ``text`` contains something a client could follow to fetch content."""
    return bool(
        _SCHEME_AUTHORITY.search(text)
        or _LOCATOR_SCHEME.search(text)
        or _AUTHORITY.search(text)
        or _WWW.search(text)
    )


def _refuse_url(text: str, field_name: str) -> None:
    if looks_like_url(text):
        raise InvalidInput(
            f"{field_name} must not contain a URL: a manifest describes content, not its location",
            field=field_name,
        )


def parse_sha256(value: object, *, field: str = "sha256") -> Sha256:
    """A SHA-256 digest is exactly 64 lowercase hexadecimal characters."""
    if not isinstance(value, str) or not _SHA256.match(value):
        raise InvalidInput(f"{field} must be 64 lowercase hexadecimal characters", field=field)
    return Sha256(value)


def parse_safe_relative_path(value: object, *, field: str = "path") -> SafeRelativePath:
    """Check a path from a user or a peer before it is ever joined to a directory.

    Refused: anything but a string, an empty or over-long path, an absolute path, a backslash,
    NUL or another control character, and any empty, ``.`` or ``..`` segment (so no leading,
    trailing or doubled ``/`` either).
    """
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string", field=field)
    if not value:
        raise InvalidInput(f"{field} must not be empty", field=field)
    if len(value) > MAX_PATH_CHARS:
        raise InvalidInput(f"{field} must be at most {MAX_PATH_CHARS} characters", field=field)
    if "\\" in value:
        raise InvalidInput(f"{field} must use '/' as separator, not '\\'", field=field)
    if _CONTROL.search(value):
        raise InvalidInput(f"{field} must not contain NUL or control characters", field=field)
    _refuse_url(value, field)
    if value.startswith("/"):
        raise InvalidInput(f"{field} must be relative, not start with '/'", field=field)
    for segment in value.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidInput(
                f"{field} must not contain an empty, '.' or '..' segment", field=field
            )
        if len(segment.encode("utf-8", "surrogatepass")) > MAX_PATH_SEGMENT_BYTES:
            raise InvalidInput(
                f"{field} has a segment longer than {MAX_PATH_SEGMENT_BYTES} bytes", field=field
            )
    return SafeRelativePath(value)


def _parse_text(value: object, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string", field=field)
    if not value.strip():
        raise InvalidInput(f"{field} must not be empty", field=field)
    if len(value) > max_chars:
        raise InvalidInput(f"{field} must be at most {max_chars} characters", field=field)
    if _CONTROL.search(value):
        raise InvalidInput(f"{field} must not contain control characters", field=field)
    _refuse_url(value, field)
    return value


def _parse_size(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be an integer number of bytes", field=field)
    if not 0 <= value <= MAX_FILE_BYTES:
        raise InvalidInput(
            f"{field} must be between 0 and {MAX_FILE_BYTES} bytes",
            field=field,
            details={"minimum": 0, "maximum": MAX_FILE_BYTES},
        )
    return value


def _check_keys(value: Mapping[Any, Any], allowed: frozenset[str], field: str) -> None:
    for key in value:
        if key not in allowed:
            name = _join(field, key if isinstance(key, str) else repr(key))
            known = ", ".join(sorted(allowed))
            raise InvalidInput(f"{name} is not a known field; allowed: {known}", field=name)
    for key in sorted(allowed):
        if key not in value:
            raise InvalidInput(f"{_join(field, key)} is required", field=_join(field, key))


def _parse_json_value(value: object, field: str, depth: int) -> Any:
    """Copy a metadata value, refusing what JCS cannot encode exactly and any URL."""
    if depth > MAX_METADATA_DEPTH:
        raise InvalidInput(f"{field} nests deeper than {MAX_METADATA_DEPTH} levels", field=field)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        _refuse_url(value, field)
        return value
    if isinstance(value, int):
        if abs(value) > MAX_JSON_INTEGER:
            raise InvalidInput(
                f"{field} must be an integer between -{MAX_JSON_INTEGER} and {MAX_JSON_INTEGER}",
                field=field,
            )
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidInput(f"{field} must be a finite number", field=field)
        return value
    if isinstance(value, list):
        return [
            _parse_json_value(item, f"{field}[{index}]", depth + 1)
            for index, item in enumerate(value)
        ]
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{field} keys must be strings", field=field)
            _refuse_url(key, _join(field, key))
            result[key] = _parse_json_value(item, _join(field, key), depth + 1)
        return result
    raise InvalidInput(f"{field} must be a JSON value", field=field)


def _parse_file(value: object, field: str) -> ManifestFile:
    if not isinstance(value, dict):
        raise InvalidInput(f"{field} must be an object", field=field)
    _check_keys(value, FILE_KEYS, field)
    return ManifestFile(
        path=parse_safe_relative_path(value["path"], field=_join(field, "path")),
        size=_parse_size(value["size"], _join(field, "size")),
        sha256=parse_sha256(value["sha256"], field=_join(field, "sha256")),
    )


def _check_paths_distinct(files: tuple[ManifestFile, ...], field: str) -> None:
    """No two files may share a path, and no file may sit where another needs a directory."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(files):
        if entry.path in seen:
            name = f"{field}[{index}].path"
            raise InvalidInput(
                f"{name} repeats the path of {field}[{seen[entry.path]}].path", field=name
            )
        seen[entry.path] = index
    for index, entry in enumerate(files):
        parts = entry.path.split("/")
        for end in range(1, len(parts)):
            parent = "/".join(parts[:end])
            if parent in seen:
                name = f"{field}[{index}].path"
                raise InvalidInput(
                    f"{name} lies under {field}[{seen[parent]}].path, which is a file", field=name
                )


def parse_manifest(value: object, *, field: str = "") -> Manifest:
    """Validate a manifest received as JSON values; ``field`` prefixes every error's field name."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{field or 'manifest'} must be an object", field=field or "manifest")
    _check_keys(value, MANIFEST_KEYS, field)
    name = _parse_text(value["name"], _join(field, "name"), MAX_NAME_CHARS)
    format_ = _parse_text(value["format"], _join(field, "format"), MAX_FORMAT_CHARS)
    files_field = _join(field, "files")
    raw_files = value["files"]
    if not isinstance(raw_files, list):
        raise InvalidInput(f"{files_field} must be a list", field=files_field)
    if not raw_files:
        raise InvalidInput(f"{files_field} must list at least one file", field=files_field)
    if len(raw_files) > MAX_FILES:
        raise TooLarge(f"{files_field} must list at most {MAX_FILES} files", field=files_field)
    files = tuple(
        _parse_file(entry, f"{files_field}[{index}]") for index, entry in enumerate(raw_files)
    )
    _check_paths_distinct(files, files_field)
    total_bytes = sum(entry.size for entry in files)
    if total_bytes > MAX_MODEL_BYTES:
        raise TooLarge(
            f"{files_field} add up to {total_bytes} bytes; a model has at most {MAX_MODEL_BYTES}",
            field=files_field,
            details={"limit": "model_bytes", "allowed": MAX_MODEL_BYTES},
        )
    metadata_field = _join(field, "metadata")
    if not isinstance(value["metadata"], dict):
        raise InvalidInput(f"{metadata_field} must be an object", field=metadata_field)
    metadata = _parse_json_value(value["metadata"], metadata_field, 1)
    manifest = Manifest(name=name, format=format_, files=files, metadata=metadata)
    encoded_bytes = len(canonical_bytes(manifest))
    if encoded_bytes > MAX_MANIFEST_BYTES:
        name_of_field = field or "manifest"
        raise TooLarge(
            f"{name_of_field} encodes to {encoded_bytes} bytes; at most {MAX_MANIFEST_BYTES}",
            field=name_of_field,
        )
    return manifest


def build_manifest(
    name: str,
    format: str,  # noqa: A002 - the manifest's own word
    files: Iterable[tuple[str, int, str]],
    metadata: Mapping[str, Any] | None = None,
) -> Manifest:
    """Build a manifest from local facts, files sorted by path.

    Sorting makes the canonical SHA-256 independent of the order the files were named in, so
    importing the same files twice gives the same model digest.
    """
    entries = sorted(files, key=lambda entry: entry[0])
    return parse_manifest(
        {
            "name": name,
            "format": format,
            "files": [
                {"path": path, "size": size, "sha256": sha256} for path, size, sha256 in entries
            ],
            "metadata": dict(metadata or {}),
        }
    )


def canonical_bytes(manifest: Manifest) -> bytes:
    """The RFC 8785 (JCS) encoding of the manifest."""
    return rfc8785.dumps(manifest.to_json())


def canonical_sha256(manifest: Manifest) -> Sha256:
    """SHA-256 of the JCS encoding: the digest that names the model's content everywhere."""
    return Sha256(hashlib.sha256(canonical_bytes(manifest)).hexdigest())

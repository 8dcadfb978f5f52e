"""A local path a user names for import, checked before any byte of it is read."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ficc.base.errors import InvalidInput


def resolve_user_path(
    path: str | os.PathLike[str],
    allowed_roots: Sequence[Path] | None = None,
    *,
    field: str = "path",
) -> Path:
    """Check a local path a user named for import and return the real file it designates.

    Refused, naming ``field``: a NUL byte, any ``..`` component (even one that would resolve
    harmlessly), a path that does not exist, a file (or symlink target) outside every allowed
    root when roots are given, and anything but a regular file (directories, FIFOs, devices).
    """
    text = os.fspath(path)
    if not text:
        raise InvalidInput(f"{field} must not be empty", field=field)
    if "\x00" in text:
        raise InvalidInput(f"{field} must not contain NUL", field=field)
    if ".." in Path(text).parts:
        raise InvalidInput(f"{field} must not contain a '..' component", field=field)
    try:
        real = Path(text).resolve(strict=True)
    except FileNotFoundError as exc:
        raise InvalidInput(f"{field} does not exist: {text}", field=field) from exc
    except (OSError, RuntimeError) as exc:
        raise InvalidInput(f"{field} cannot be resolved: {text}", field=field) from exc
    if allowed_roots is not None:
        roots = [Path(root).resolve() for root in allowed_roots]
        if not any(real.is_relative_to(root) for root in roots):
            raise InvalidInput(
                f"{field} resolves to {real}, outside the allowed directories",
                field=field,
                details={"allowed_roots": [str(root) for root in roots]},
            )
    try:
        mode = real.stat().st_mode
    except OSError as exc:
        raise InvalidInput(f"{field} cannot be read: {text}", field=field) from exc
    if not stat.S_ISREG(mode):
        raise InvalidInput(f"{field} is not a regular file: {text}", field=field)
    return real

"""`ficc init`'s check that secrets are not about to be committed.

The state directory holds ``cluster.key`` and ``owner.token``; one created inside a git work
tree and not ignored would be picked up by ``git add -A``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import click

GIT_SECONDS = 5.0


def warn_if_not_ignored(state_dir: Path) -> bool:
    """Warn on stderr when ``state_dir`` lies in a git work tree that does not ignore it."""
    git = shutil.which("git")
    if git is None:
        return False
    directory = state_dir.absolute()
    try:
        inside = _git(git, directory, "rev-parse", "--is-inside-work-tree")
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return False
        ignored = _git(git, directory, "check-ignore", "-q", str(directory / "owner.token"))
    except (OSError, subprocess.TimeoutExpired):
        return False
    if ignored.returncode == 0:
        return False
    warning = {
        "warning": {
            "code": "state_dir_not_ignored",
            "message": (
                f"{directory} is inside a git work tree and not ignored: its cluster key and "
                "owner token would be committed by `git add -A`; add it to .gitignore or use "
                "a state directory outside the work tree"
            ),
            "details": {"state_dir": str(directory)},
        }
    }
    click.echo(json.dumps(warning), err=True)
    return True


def _git(git: str, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [git, "-C", str(directory), *args],
        capture_output=True,
        text=True,
        timeout=GIT_SECONDS,
        check=False,
    )

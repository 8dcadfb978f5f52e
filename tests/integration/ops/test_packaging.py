"""The systemd unit is valid and hardened; the licence and the dependencies match pyproject."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "packaging" / "ficc.service"
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "StateDirectory": "ficc",
    "StateDirectoryMode": "0700",
    "DynamicUser": "yes",
    "UMask": "0077",
    "RestrictSUIDSGID": "yes",
    "CapabilityBoundingSet": "",
    "KillSignal": "SIGTERM",
}
KNOWN_SERVICE_KEYS = {
    *HARDENING,
    "Type", "ExecStart", "Environment", "ConfigurationDirectory", "ConfigurationDirectoryMode",
    "Restart", "RestartSec", "TimeoutStopSec", "PrivateDevices", "ProtectKernelTunables",
    "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
    "ProtectHostname", "ProtectProc", "RestrictNamespaces", "RestrictRealtime",
    "LockPersonality", "RemoveIPC", "AmbientCapabilities", "SystemCallArchitectures",
    "SystemCallFilter", "RestrictAddressFamilies", "LimitNOFILE",
}  # fmt: skip


def _sections(text: str) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current[key] = value
    return sections


def test_the_unit_is_hardened_and_runs_ficc_serve() -> None:
    sections = _sections(UNIT.read_text())
    assert set(sections) == {"Unit", "Service", "Install"}
    service = sections["Service"]
    assert set(service) <= KNOWN_SERVICE_KEYS, set(service) - KNOWN_SERVICE_KEYS
    for key, value in HARDENING.items():
        assert service.get(key) == value, key
    command = service["ExecStart"].split()
    assert command[1:3] == ["serve", "--state-dir"]
    assert command[3] == "/var/lib/ficc"
    assert sections["Install"]["WantedBy"] == "multi-user.target"


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """`systemd-analyze verify` where systemd is installed; the key list above everywhere."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        test_the_unit_is_hardened_and_runs_ficc_serve()
        return
    # verify checks that ExecStart exists: point it at an executable this machine has.
    copy = tmp_path / "ficc.service"
    executable = shutil.which("true") or "/bin/true"
    copy.write_text(re.sub(r"ExecStart=\S+", f"ExecStart={executable}", UNIT.read_text()))
    done = subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ficc.service" not in done.stderr, done.stderr


def test_licence_and_pinned_dependencies_match_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence
    assert "Version 2.0, January 2004" in licence
    constraints = {
        line.split("==")[0].lower(): line
        for line in (ROOT / "requirements" / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    declared = {dep.split("==")[0].split("[")[0].lower(): dep for dep in project["dependencies"]}
    for name in ("uvloop", "prometheus-client"):
        assert name in declared, name
        assert declared[name] == constraints[name], name

"""`ficc serve --config FILE` and FICC_* variables: flags win over variables, variables over
the file, the file over the defaults; an unknown key is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.cluster import ficc, start_cluster
from tests.support.federation import wait_for
from tests.support.ops import json_lines

from ficc.adapters.hypernet.endpoint import DEFAULT_CONNECT_TIMEOUT_SECONDS
from ficc.base.errors import InvalidInput
from ficc.bootstrap import CONNECT_SECONDS_VARIABLE, connect_seconds_from_environment


def _login_link(state_dir: Path) -> str:
    done = ficc("login-link", state_dir=state_dir)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_flags_beat_variables_beat_the_file_beat_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "ficc.toml"
    config.write_text(
        'listen = "not-a-listen-address"\n'  # the --listen flag wins
        'log-format = "text"\n'  # FICC_LOG_FORMAT wins
        'public_url = "https://from-the-file.example/ficc/"\n'  # FICC_PUBLIC_URL wins
        'log-level = "info"\n'
    )
    monkeypatch.setenv("FICC_CONFIG", str(config))
    monkeypatch.setenv("FICC_LOG_FORMAT", "json")
    monkeypatch.setenv("FICC_PUBLIC_URL", "https://from-the-environment.example")
    cluster = start_cluster(tmp_path / "state")
    try:
        assert _login_link(cluster.state_dir).startswith("https://from-the-environment.example/")
        cluster.client().get("/livez", headers={"X-Request-ID": "config-1"})
        wait_for(
            lambda: [r for r in json_lines(cluster.log_path) if r["request_id"] == "config-1"],
            what="a JSON access line",
        )
    finally:
        cluster.stop()


def test_the_file_beats_the_defaults(tmp_path: Path) -> None:
    config = tmp_path / "ficc.toml"
    config.write_text(
        'public-url = "https://from-the-file.example/ficc/"\nlog-format = "json"\n'
        'log-level = "warning"\n'
    )
    cluster = start_cluster(tmp_path / "state", "--config", str(config))
    try:
        assert _login_link(cluster.state_dir).startswith("https://from-the-file.example/ficc/")
        assert cluster.client().get("/livez").status_code == 200
        records = json_lines(cluster.log_path)
        assert all(record["level"] != "info" for record in records), records
    finally:
        cluster.stop()


def test_an_unknown_key_or_bad_value_is_refused_by_name(tmp_path: Path) -> None:
    config = tmp_path / "ficc.toml"
    config.write_text('listn = "127.0.0.1:0"\n')
    state_dir = tmp_path / "state"
    done = ficc("serve", "--config", str(config), state_dir=state_dir)
    assert done.returncode == 2
    assert "unknown key 'listn'" in done.stderr
    assert not state_dir.exists()
    config.write_text('public-url = "ftp://nowhere"\n')
    done = ficc("serve", "--config", str(config), state_dir=state_dir)
    assert done.returncode == 2
    assert "--public-url" in done.stderr
    assert not state_dir.exists()


def test_every_serve_flag_has_a_variable() -> None:
    done = ficc("serve", "--help")
    assert done.returncode == 0
    from ficc.cli.main import serve

    for param in serve.params:
        if param.name in ("help", "project"):
            continue
        assert getattr(param, "envvar", None) == f"FICC_{param.name.upper()}", param.name


@pytest.mark.parametrize(("raw", "seconds"), [("", 5.0), (" ", 5.0), ("2", 2.0), ("0.1", 0.1)])
def test_the_connect_variable_sets_the_peer_connect_deadline(raw: str, seconds: float) -> None:
    assert DEFAULT_CONNECT_TIMEOUT_SECONDS == 5.0
    assert connect_seconds_from_environment({CONNECT_SECONDS_VARIABLE: raw}) == seconds
    assert connect_seconds_from_environment({}) == DEFAULT_CONNECT_TIMEOUT_SECONDS


@pytest.mark.parametrize("raw", ["0", "0.05", "3601", "soon", "nan"])
def test_a_connect_deadline_outside_its_range_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        connect_seconds_from_environment({CONNECT_SECONDS_VARIABLE: raw})
    assert refused.value.details["field"] == CONNECT_SECONDS_VARIABLE
    assert "0.1 to 3600" in refused.value.message


def test_a_stream_join_window_out_of_range_is_refused_by_name(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    for value in ("-1", "1001", "soon"):
        done = ficc("serve", "--stream-join-ms", value, state_dir=state_dir)
        assert done.returncode == 2, value
        assert "--stream-join-ms" in done.stderr, done.stderr
    assert not state_dir.exists()

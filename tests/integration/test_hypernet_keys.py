"""The agent directory's HyperNet key and the write-path fix of the iroh bindings."""

from __future__ import annotations

import hashlib
import logging
import stat
from pathlib import Path

import iroh
import pytest
from iroh import iroh_ffi

from ficc.adapters.hypernet import bind_addresses, relay_mode
from ficc.adapters.hypernet.binding import MAX_TICKET_ADDRESSES, peer_address
from ficc.adapters.hypernet.keys import AgentDirectoryError, load_or_create_secret_key
from ficc.adapters.hypernet.writefix import apply_write_fix
from ficc.base.errors import FiccError, InvalidInput


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_agent_directory_is_created_private_with_a_private_key(tmp_path: Path) -> None:
    directory = tmp_path / "agent"
    seed = load_or_create_secret_key(directory)
    assert len(seed) == 32
    assert mode(directory) == 0o700
    assert mode(directory / "hypernet.key") == 0o600
    assert (directory / "hypernet.key").read_bytes() == seed


def test_an_existing_key_is_reused(tmp_path: Path) -> None:
    first = load_or_create_secret_key(tmp_path / "agent")
    assert load_or_create_secret_key(tmp_path / "agent") == first


def test_a_key_file_readable_by_others_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    load_or_create_secret_key(tmp_path / "agent")
    (tmp_path / "agent" / "hypernet.key").chmod(0o640)
    with pytest.raises(AgentDirectoryError, match="chmod 600") as caught:
        load_or_create_secret_key(tmp_path / "agent")
    assert isinstance(caught.value, FiccError)


def test_a_corrupt_key_file_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    directory = tmp_path / "agent"
    directory.mkdir(mode=0o700)
    key = directory / "hypernet.key"
    key.write_bytes(b"short")
    key.chmod(0o600)
    with pytest.raises(AgentDirectoryError, match="corrupt"):
        load_or_create_secret_key(directory)


def test_an_agent_directory_writable_by_others_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "agent"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(AgentDirectoryError, match="chmod 700"):
        load_or_create_secret_key(directory)


def test_the_write_fix_is_applied_once_and_copies_bytes_exactly() -> None:
    assert apply_write_fix() is True
    assert apply_write_fix() is True
    data = hashlib.sha256(b"x").digest() * 40_000
    lowered = iroh_ffi._UniffiFfiConverterBytes.lower(data)
    assert iroh_ffi._UniffiFfiConverterBytes.lift(lowered) == data


def test_generated_code_of_another_shape_is_left_alone_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Changed:
        def write(self, value: bytes) -> None:
            """A different body than the one the fix was written for."""

    original = Changed.write
    monkeypatch.setattr(iroh_ffi, "_UniffiRustBufferBuilder", Changed)
    with caplog.at_level(logging.WARNING, logger="ficc.adapters.hypernet.writefix"):
        assert apply_write_fix() is False
    assert Changed.write is original
    assert "changed shape" in caplog.text
    assert "not applied" in caplog.text


def test_a_loopback_bind_adds_only_the_other_familys_loopback() -> None:
    assert bind_addresses("127.0.0.1:0") == ["127.0.0.1:0", "[::1]:0"]
    assert bind_addresses("0.0.0.0:4433") == ["0.0.0.0:4433", "[::]:0"]
    assert bind_addresses("[::1]:0") == ["[::1]:0", "127.0.0.1:0"]


@pytest.mark.parametrize("address", ["localhost:0", "127.0.0.1", "127.0.0.1:99999"])
def test_a_malformed_bind_address_is_refused(address: str) -> None:
    with pytest.raises(InvalidInput):
        bind_addresses(address)


def test_an_unknown_relay_setting_is_refused() -> None:
    with pytest.raises(InvalidInput):
        relay_mode("sometimes")


def _ticket(addresses: int) -> tuple[str, str]:
    """A hand-made ticket naming ``addresses`` direct addresses, and its HyperNet ID."""
    key = iroh.SecretKey.generate()
    direct = [f"127.0.1.{index + 1}:4433" for index in range(addresses)]
    ticket = iroh.EndpointTicket.from_addr(iroh.EndpointAddr(key.public(), None, direct))
    return str(ticket), bytes(key.public().to_bytes()).hex()


def test_a_ticket_naming_more_than_eight_addresses_is_refused_naming_the_field() -> None:
    # F20: each address is dialled; a ticket naming 100 made the server spray UDP at 100 hosts.
    allowed, allowed_id = _ticket(MAX_TICKET_ADDRESSES)
    assert len(peer_address(allowed_id, allowed).direct_addresses()) == MAX_TICKET_ADDRESSES
    ticket, hypernet_id = _ticket(MAX_TICKET_ADDRESSES + 1)
    with pytest.raises(InvalidInput, match="at most 8 direct addresses") as caught:
        peer_address(hypernet_id, ticket)
    assert caught.value.details == {"field": "ticket", "max": 8}

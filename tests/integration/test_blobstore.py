"""The blob store against real files: addresses, verification, crash safety, path checks."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ficc.adapters.blobstore import CHUNK_BYTES, BlobStore, resolve_user_path
from ficc.base.errors import InvalidInput, NotFound, TooLarge

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def files_under(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "store")


@pytest.fixture
def big_data() -> bytes:
    """Larger than two chunks and not a multiple of the chunk size."""
    return bytes(range(256)) * (2 * CHUNK_BYTES // 256) + b"tail-bytes"


# -- importing files -------------------------------------------------------------------------


def test_importing_files_stores_each_under_its_sha256(
    store: BlobStore, tmp_path: Path, big_data: bytes
) -> None:
    sources = {
        "model.gguf": big_data,
        "tokenizer/vocab.json": b'{"a": 1}',
        "empty.txt": b"",
    }
    for name, data in sources.items():
        digest, size = store.import_file(write(tmp_path / "src" / name, data))
        assert (digest, size) == (sha(data), len(data))
        stored = store.root / "blobs" / digest[:2] / digest
        assert stored.read_bytes() == data
        assert store.blob_path(digest) == stored
        assert store.has(digest)
    assert sorted(store.iter_blobs()) == sorted(sha(data) for data in sources.values())
    assert files_under(store.root / "tmp") == []


def test_listing_blobs_ignores_files_that_are_not_blobs(store: BlobStore) -> None:
    digest, _ = store.import_chunks([b"real"])
    write(store.root / "blobs" / "stray-file", b"x")
    write(store.root / "blobs" / digest[:2] / "notes.txt", b"x")
    assert list(store.iter_blobs()) == [digest]


def test_a_stored_blob_is_read_only(store: BlobStore, tmp_path: Path) -> None:
    digest, _ = store.import_file(write(tmp_path / "f", b"content"))
    assert stat.S_IMODE(store.blob_path(digest).stat().st_mode) == 0o444


def test_an_import_with_the_right_expected_digest_succeeds(
    store: BlobStore, tmp_path: Path
) -> None:
    data = b"weights" * 1000
    assert store.import_file(write(tmp_path / "f", data), sha(data)) == (sha(data), len(data))


def test_a_digest_mismatch_is_refused_and_leaves_nothing_behind(
    store: BlobStore, tmp_path: Path, big_data: bytes
) -> None:
    wrong = sha(b"something else")
    with pytest.raises(InvalidInput) as caught:
        store.import_file(write(tmp_path / "f", big_data), wrong, field="paths[0]")
    assert caught.value.details["field"] == "paths[0]"
    assert caught.value.details["actual_sha256"] == sha(big_data)
    assert files_under(store.root) == []


def test_re_importing_a_stored_file_keeps_the_one_blob(store: BlobStore, tmp_path: Path) -> None:
    source = write(tmp_path / "f", b"same bytes")
    digest, _ = store.import_file(source)
    inode = store.blob_path(digest).stat().st_ino
    assert store.import_file(source) == (digest, 10)
    assert store.import_file(source, digest) == (digest, 10)
    assert store.blob_path(digest).stat().st_ino == inode
    assert files_under(store.root) == [store.blob_path(digest)]


def test_re_importing_other_bytes_under_a_stored_digest_is_refused(
    store: BlobStore, tmp_path: Path
) -> None:
    digest, _ = store.import_file(write(tmp_path / "a", b"original"))
    with pytest.raises(InvalidInput, match="not the expected"):
        store.import_file(write(tmp_path / "b", b"impostor"), digest)
    assert store.blob_path(digest).read_bytes() == b"original"


def test_a_file_the_kernel_will_not_copy_is_copied_through_a_buffer(
    store: BlobStore, tmp_path: Path, big_data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    digest, size = store.import_file(write(tmp_path / "f", big_data))
    assert (digest, size) == (sha(big_data), len(big_data))
    assert store.blob_path(digest).read_bytes() == big_data


def test_a_kernel_copy_that_silently_copies_nothing_is_caught_by_a_read(
    store: BlobStore, tmp_path: Path, big_data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "copy_file_range", lambda *_: 0)
    assert store.import_file(write(tmp_path / "f", big_data)) == (sha(big_data), len(big_data))


def test_a_proc_file_that_reports_size_zero_is_imported_whole(store: BlobStore) -> None:
    digest, size = store.import_file(Path("/proc/self/maps"))
    assert size > 0
    assert store.verify(digest)
    assert b"python" in store.blob_path(digest).read_bytes()


def test_importing_a_directory_is_refused(store: BlobStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not a regular file"):
        store.import_file(tmp_path)


def test_importing_a_fifo_is_refused_without_blocking(store: BlobStore, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match="not a regular file"):
        store.import_file(fifo)


def test_importing_a_missing_file_is_refused_naming_the_field(
    store: BlobStore, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as caught:
        store.import_file(tmp_path / "absent", field="paths[2]")
    assert caught.value.details["field"] == "paths[2]"


def test_a_malformed_expected_digest_is_refused_before_reading(
    store: BlobStore, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as caught:
        store.import_file(tmp_path / "absent", "ABC")
    assert caught.value.details["field"] == "expected_sha256"


# -- importing streams -----------------------------------------------------------------------


def test_importing_chunks_stores_their_concatenation(store: BlobStore) -> None:
    chunks = [b"a" * 100, b"", b"b" * CHUNK_BYTES, b"c"]
    data = b"".join(chunks)
    assert store.import_chunks(iter(chunks), sha(data)) == (sha(data), len(data))
    assert store.blob_path(sha(data)).read_bytes() == data


def test_chunks_passing_the_byte_limit_are_too_large_and_leave_nothing(store: BlobStore) -> None:
    with pytest.raises(TooLarge):
        store.import_chunks([b"x" * 60, b"y" * 60], max_bytes=100)
    assert files_under(store.root) == []


def test_an_error_from_the_chunk_source_leaves_nothing(store: BlobStore) -> None:
    def failing() -> Iterator[bytes]:
        yield b"first"
        raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError):
        store.import_chunks(failing())
    assert files_under(store.root) == []


async def test_importing_an_async_stream_stores_it(store: BlobStore) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for index in range(5):
            yield bytes([index]) * 1000

    data = b"".join(bytes([index]) * 1000 for index in range(5))
    assert await store.import_stream(chunks(), sha(data)) == (sha(data), 5000)
    assert store.has(sha(data))


async def test_an_async_stream_with_the_wrong_digest_leaves_nothing(store: BlobStore) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"not what was promised"

    with pytest.raises(InvalidInput):
        await store.import_stream(chunks(), EMPTY_SHA256)
    assert files_under(store.root) == []


async def test_cancelling_an_async_import_leaves_nothing(store: BlobStore) -> None:
    first_chunk_taken = asyncio.Event()
    never = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"x" * CHUNK_BYTES
        first_chunk_taken.set()
        await never.wait()
        yield b"unreachable"

    task = asyncio.create_task(store.import_stream(chunks()))
    await first_chunk_taken.wait()
    assert len(files_under(store.root / "tmp")) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert files_under(store.root) == []


# -- reading, verifying, removing ------------------------------------------------------------


def test_open_blob_reads_the_stored_bytes(store: BlobStore) -> None:
    digest, _ = store.import_chunks([b"hello"])
    with store.open_blob(digest) as handle:
        assert handle.read() == b"hello"
    assert store.size(digest) == 5


def test_a_missing_blob_is_not_found(store: BlobStore) -> None:
    assert not store.has(EMPTY_SHA256)
    with pytest.raises(NotFound):
        store.open_blob(EMPTY_SHA256)
    with pytest.raises(NotFound):
        store.blob_path(EMPTY_SHA256)
    with pytest.raises(NotFound):
        store.verify(EMPTY_SHA256)


@pytest.mark.parametrize("bad", ["../../etc/passwd", "A" * 64, "ab", ""])
def test_a_malformed_digest_never_becomes_a_path(store: BlobStore, bad: str) -> None:
    with pytest.raises(InvalidInput):
        store.has(bad)
    with pytest.raises(InvalidInput):
        store.open_blob(bad)


def test_verify_detects_a_blob_whose_bytes_changed_on_disk(store: BlobStore) -> None:
    digest, _ = store.import_chunks([b"original bytes"])
    assert store.verify(digest)
    path = store.blob_path(digest)
    path.chmod(0o644)
    path.write_bytes(b"rotten bytes!!")
    assert not store.verify(digest)


def test_removing_a_blob_twice_removes_it_once(store: BlobStore) -> None:
    digest, _ = store.import_chunks([b"bye"])
    assert store.remove(digest)
    assert not store.has(digest)
    assert not store.remove(digest)


# -- crash safety ----------------------------------------------------------------------------


def test_a_stale_temp_file_is_never_a_blob_and_is_removed_when_the_store_opens(
    tmp_path: Path,
) -> None:
    store = BlobStore(tmp_path / "store")
    stale = write(store.root / "tmp" / "0123abcd.tmp", b"half an import")
    assert list(store.iter_blobs()) == []
    assert not store.has(sha(b"half an import"))
    BlobStore(store.root)
    assert not stale.exists()


def test_a_temp_file_of_a_live_import_is_kept_by_the_cleaner(store: BlobStore) -> None:
    with store.begin() as writer:
        writer.write(b"in progress")
        assert store.clean_stale_temporaries() == 0
        assert len(files_under(store.root / "tmp")) == 1
        digest, _ = writer.commit()
    assert store.blob_path(digest).read_bytes() == b"in progress"


def test_a_process_killed_mid_import_leaves_only_a_temp_file_that_reopening_removes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from ficc.adapters.blobstore import BlobStore
        writer = BlobStore(Path({str(root)!r})).begin()
        writer.write(b"x" * 3_000_000)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert completed.returncode == -9
    assert len(files_under(root / "tmp")) == 1
    assert files_under(root / "blobs") == []
    store = BlobStore(root)
    assert files_under(root) == []
    assert list(store.iter_blobs()) == []


# -- partial files ---------------------------------------------------------------------------


def test_a_partial_file_written_out_of_order_is_finalized_into_the_store(
    store: BlobStore,
) -> None:
    data = b"0123456789" * 50_000
    store.write_partial("xfr_1.part", 300_000, data[300_000:])
    assert store.partial_size("xfr_1.part") == len(data)
    store.write_partial("xfr_1.part", 0, data[:300_000])
    assert store.partial_names() == ["xfr_1.part"]
    assert store.finalize_partial("xfr_1.part", sha(data), expected_size=len(data)) == (
        sha(data),
        len(data),
    )
    assert store.blob_path(sha(data)).read_bytes() == data
    assert store.partial_names() == []


def test_a_partial_file_survives_reopening_the_store(store: BlobStore) -> None:
    store.write_partial("resume-me", 0, b"first range")
    reopened = BlobStore(store.root)
    assert reopened.partial_size("resume-me") == len(b"first range")


def test_truncating_a_partial_file_drops_an_unconfirmed_range(store: BlobStore) -> None:
    store.write_partial("p", 0, b"confirmed|garbage")
    store.truncate_partial("p", len(b"confirmed"))
    store.write_partial("p", store.partial_size("p"), b"|good")
    assert store.finalize_partial("p", sha(b"confirmed|good"))[0] == sha(b"confirmed|good")


def test_finalizing_a_partial_file_with_the_wrong_digest_removes_it(store: BlobStore) -> None:
    store.write_partial("p", 0, b"corrupted")
    with pytest.raises(InvalidInput, match="not the expected"):
        store.finalize_partial("p", sha(b"expected"))
    assert store.partial_size("p") == 0
    assert files_under(store.root) == []


def test_finalizing_a_partial_file_of_the_wrong_size_removes_it(store: BlobStore) -> None:
    store.write_partial("p", 0, b"short")
    with pytest.raises(InvalidInput, match="expected 6"):
        store.finalize_partial("p", sha(b"short"), expected_size=6)
    assert store.partial_names() == []


def test_finalizing_a_missing_partial_file_is_not_found(store: BlobStore) -> None:
    with pytest.raises(NotFound):
        store.finalize_partial("absent", EMPTY_SHA256)


def test_finalizing_a_partial_file_of_a_stored_blob_keeps_the_one_blob(store: BlobStore) -> None:
    digest, _ = store.import_chunks([b"already here"])
    store.write_partial("p", 0, b"already here")
    assert store.finalize_partial("p", digest) == (digest, 12)
    assert files_under(store.root) == [store.blob_path(digest)]


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", ".hidden", "x" * 129, "nul\x00"])
def test_an_unsafe_partial_name_is_refused(store: BlobStore, bad: str) -> None:
    with pytest.raises(InvalidInput):
        store.write_partial(bad, 0, b"x")
    assert files_under(store.root) == []


def test_a_negative_partial_offset_is_refused(store: BlobStore) -> None:
    with pytest.raises(InvalidInput) as caught:
        store.write_partial("p", -1, b"x")
    assert caught.value.details["field"] == "offset"


# -- paths named by a user -------------------------------------------------------------------


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    return tmp_path / "allowed"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    return write(tmp_path / "outside" / "secret.bin", b"secret")


def test_a_regular_file_inside_an_allowed_root_resolves_to_itself(allowed: Path) -> None:
    source = write(allowed / "models" / "m.gguf", b"gguf")
    assert resolve_user_path(str(source), [allowed]) == source.resolve()


def test_a_relative_path_resolves_against_the_working_directory(
    allowed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write(allowed / "m.gguf", b"gguf")
    monkeypatch.chdir(allowed)
    assert resolve_user_path("m.gguf", [allowed]) == source.resolve()


def test_a_dot_dot_component_is_refused_even_when_it_stays_inside(allowed: Path) -> None:
    write(allowed / "m.gguf", b"gguf")
    (allowed / "sub").mkdir()
    with pytest.raises(InvalidInput, match=r"'\.\.'") as caught:
        resolve_user_path(allowed / "sub" / ".." / "m.gguf", [allowed], field="paths[1]")
    assert caught.value.details["field"] == "paths[1]"


def test_a_file_outside_every_allowed_root_is_refused(allowed: Path, outside: Path) -> None:
    allowed.mkdir()
    with pytest.raises(InvalidInput, match="outside the allowed"):
        resolve_user_path(outside, [allowed])


def test_a_symlink_whose_target_escapes_the_allowed_root_is_refused(
    allowed: Path, outside: Path
) -> None:
    allowed.mkdir()
    (allowed / "innocent.gguf").symlink_to(outside)
    with pytest.raises(InvalidInput, match="outside the allowed") as caught:
        resolve_user_path(allowed / "innocent.gguf", [allowed], field="paths[0]")
    assert caught.value.details["field"] == "paths[0]"


def test_a_symlinked_directory_that_escapes_the_allowed_root_is_refused(
    allowed: Path, outside: Path
) -> None:
    allowed.mkdir()
    (allowed / "linked").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(InvalidInput, match="outside the allowed"):
        resolve_user_path(allowed / "linked" / "secret.bin", [allowed])


def test_a_symlink_that_stays_inside_the_allowed_root_resolves_to_its_target(
    allowed: Path,
) -> None:
    target = write(allowed / "real.gguf", b"gguf")
    (allowed / "alias.gguf").symlink_to(target)
    assert resolve_user_path(allowed / "alias.gguf", [allowed]) == target.resolve()


def test_an_allowed_root_reached_through_a_symlink_still_admits_its_files(
    tmp_path: Path, allowed: Path
) -> None:
    source = write(allowed / "m.gguf", b"gguf")
    (tmp_path / "root-link").symlink_to(allowed, target_is_directory=True)
    assert resolve_user_path(source, [tmp_path / "root-link"]) == source.resolve()


def test_any_root_of_several_may_hold_the_file(tmp_path: Path, outside: Path) -> None:
    assert resolve_user_path(outside, [tmp_path / "other", outside.parent]) == outside.resolve()


def test_without_allowed_roots_any_regular_file_is_accepted(outside: Path) -> None:
    assert resolve_user_path(outside, None) == outside.resolve()


def test_a_directory_is_refused(allowed: Path) -> None:
    allowed.mkdir()
    with pytest.raises(InvalidInput, match="not a regular file"):
        resolve_user_path(allowed, [allowed])


def test_a_fifo_is_refused(allowed: Path) -> None:
    allowed.mkdir()
    os.mkfifo(allowed / "pipe")
    with pytest.raises(InvalidInput, match="not a regular file"):
        resolve_user_path(allowed / "pipe", [allowed])


def test_a_missing_file_is_refused(allowed: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        resolve_user_path(allowed / "absent.gguf", [allowed])


def test_a_dangling_symlink_is_refused(allowed: Path) -> None:
    allowed.mkdir()
    (allowed / "dangling").symlink_to(allowed / "nowhere")
    with pytest.raises(InvalidInput, match="does not exist"):
        resolve_user_path(allowed / "dangling", [allowed])


@pytest.mark.parametrize("bad", ["", "model\x00.gguf"])
def test_an_empty_path_or_one_with_nul_is_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        resolve_user_path(bad)


async def test_a_partial_writer_writes_and_hashes_in_order_and_close_waits_for_it(
    store: BlobStore,
) -> None:
    chunks = [bytes([n]) * (64 * 1024 + n) for n in range(40)]
    hasher = hashlib.sha256()
    writer = store.partial_writer("t.0", hasher, 256 * 1024)  # queues at most 4 chunks
    position = 0
    for chunk in chunks:
        await writer.write(position, chunk)
        position += len(chunk)
    await writer.sync()
    await writer.drain()
    await writer.close()
    whole = b"".join(chunks)
    assert store.read_partial("t.0", 0, len(whole) + 1) == whole
    assert hasher.hexdigest() == sha(whole)


def test_a_partial_writer_refuses_a_bad_name_before_any_thread_starts(store: BlobStore) -> None:
    with pytest.raises(InvalidInput) as refused:
        store.partial_writer("../escape", hashlib.sha256(), 1024)
    assert refused.value.details["field"] == "partial"

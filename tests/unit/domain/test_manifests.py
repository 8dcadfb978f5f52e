"""Manifests: strict validation, safe paths, no URLs, and the canonical SHA-256."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.errors import InvalidInput, TooLarge
from ficc.domain.manifests import (
    _SCHEME_AUTHORITY,
    MAX_FILES,
    MAX_JSON_INTEGER,
    MAX_METADATA_DEPTH,
    MAX_PATH_CHARS,
    Manifest,
    build_manifest,
    canonical_bytes,
    canonical_sha256,
    looks_like_url,
    parse_manifest,
    parse_safe_relative_path,
    parse_sha256,
)

DIGEST_A = "a" * 64
DIGEST_B = "0123456789abcdef" * 4


def golden_manifest() -> Manifest:
    return build_manifest(
        "SmolLM2-135M-Instruct",
        "gguf",
        [("weights/model.gguf", 1048576, DIGEST_A), ("README.md", 12, DIGEST_B)],
        {"license": "apache-2.0", "context_tokens": 8192, "tags": ["chat", "small"]}
        | {"temperature": 0.5},
    )


def valid_json() -> dict[str, Any]:
    return {
        "name": "tiny",
        "format": "gguf",
        "files": [
            {"path": "model.gguf", "size": 10, "sha256": DIGEST_A},
            {"path": "tokenizer/vocab.json", "size": 0, "sha256": DIGEST_B},
        ],
        "metadata": {"family": "llama", "layers": [1, 2.5, None, True], "nested": {"k": "v"}},
    }


def refusal(value: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        parse_manifest(value)
    return caught.value


# -- the canonical SHA-256 -------------------------------------------------------------------


def test_the_canonical_encoding_of_a_fixed_manifest_is_pinned() -> None:
    assert canonical_bytes(golden_manifest()) == (
        b'{"files":[{"path":"README.md","sha256":"' + DIGEST_B.encode() + b'","size":12},'
        b'{"path":"weights/model.gguf","sha256":"' + DIGEST_A.encode() + b'","size":1048576}],'
        b'"format":"gguf","metadata":{"context_tokens":8192,"license":"apache-2.0",'
        b'"tags":["chat","small"],"temperature":0.5},"name":"SmolLM2-135M-Instruct"}'
    )


def test_the_canonical_sha256_of_a_fixed_manifest_is_pinned() -> None:
    assert (
        canonical_sha256(golden_manifest())
        == "32a99421283cafb288c94ab8244f0588060f8e8a79776b0665df54718aad3630"
    )


def test_the_canonical_encoding_follows_rfc_8785_for_numbers_and_key_order() -> None:
    manifest = parse_manifest(
        valid_json() | {"metadata": {"\u00e9": 1.0, "z": 1e21, "a": "\u00e9"}}
    )
    encoded = canonical_bytes(manifest)
    # JCS: 1.0 is written "1", 1e21 "1e+21", keys sorted by UTF-16 code unit, UTF-8 unescaped.
    assert b'"metadata":{"a":"\xc3\xa9","z":1e+21,"\xc3\xa9":1}' in encoded


def test_key_order_and_spacing_of_the_input_do_not_change_the_digest() -> None:
    reordered = {key: valid_json()[key] for key in ("metadata", "files", "format", "name")}
    assert canonical_sha256(parse_manifest(reordered)) == canonical_sha256(
        parse_manifest(valid_json())
    )


def test_any_change_of_content_changes_the_digest() -> None:
    changed = valid_json()
    changed["files"][0]["size"] = 11
    assert canonical_sha256(parse_manifest(changed)) != canonical_sha256(
        parse_manifest(valid_json())
    )


def test_building_from_files_in_another_order_gives_the_same_digest() -> None:
    files = [("b.bin", 1, DIGEST_A), ("a.bin", 2, DIGEST_B)]
    first = build_manifest("m", "gguf", files, {})
    second = build_manifest("m", "gguf", list(reversed(files)), {})
    assert [entry.path for entry in first.files] == ["a.bin", "b.bin"]
    assert canonical_sha256(first) == canonical_sha256(second)


def test_a_parsed_manifest_round_trips_to_the_same_json() -> None:
    assert parse_manifest(valid_json()).to_json() == valid_json()


def test_changing_the_json_given_to_the_parser_does_not_change_the_manifest() -> None:
    source = valid_json()
    manifest = parse_manifest(source)
    before = canonical_sha256(manifest)
    source["metadata"]["nested"]["k"] = "changed"
    manifest.to_json()["metadata"]["family"] = "changed"
    assert canonical_sha256(manifest) == before


def test_total_bytes_sums_the_file_sizes() -> None:
    assert parse_manifest(valid_json()).total_bytes == 10


# -- structure -------------------------------------------------------------------------------


def test_a_manifest_that_is_not_an_object_is_refused() -> None:
    assert refusal(["name"]).details["field"] == "manifest"


def test_an_unknown_top_level_key_is_refused_by_name() -> None:
    error = refusal(valid_json() | {"url": "x"})
    assert error.details["field"] == "url"
    assert "not a known field" in error.message


@pytest.mark.parametrize("key", ["name", "format", "files", "metadata"])
def test_a_missing_top_level_key_is_refused_by_name(key: str) -> None:
    value = valid_json()
    del value[key]
    assert refusal(value).details["field"] == key


def test_an_unknown_key_in_a_file_entry_is_refused_with_its_index() -> None:
    value = valid_json()
    value["files"][1]["mode"] = 0o644
    assert refusal(value).details["field"] == "files[1].mode"


def test_a_missing_key_in_a_file_entry_is_refused_with_its_index() -> None:
    value = valid_json()
    del value["files"][1]["sha256"]
    assert refusal(value).details["field"] == "files[1].sha256"


def test_a_file_entry_that_is_not_an_object_is_refused() -> None:
    value = valid_json()
    value["files"][0] = "model.gguf"
    assert refusal(value).details["field"] == "files[0]"


def test_the_field_prefix_names_the_manifest_inside_a_larger_body() -> None:
    value = valid_json()
    value["files"][1]["path"] = "../x"
    with pytest.raises(InvalidInput) as caught:
        parse_manifest(value, field="manifest")
    assert caught.value.details["field"] == "manifest.files[1].path"


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("name", ""),
        ("name", "   "),
        ("name", 7),
        ("name", None),
        ("name", "x" * 257),
        ("name", "two\nlines"),
        ("format", ""),
        ("format", ["gguf"]),
        ("format", "f" * 65),
        ("format", "gg\x00uf"),
    ],
)
def test_a_name_or_format_that_is_not_a_bounded_non_empty_string_is_refused(
    key: str, bad: object
) -> None:
    assert refusal(valid_json() | {key: bad}).details["field"] == key


def test_a_name_at_the_length_bound_is_accepted() -> None:
    assert parse_manifest(valid_json() | {"name": "n" * 256}).name == "n" * 256


@pytest.mark.parametrize("bad", [[], {}, "model.gguf", None])
def test_files_must_be_a_non_empty_list(bad: object) -> None:
    assert refusal(valid_json() | {"files": bad}).details["field"] == "files"


def test_more_files_than_the_maximum_are_too_large() -> None:
    files = [{"path": f"f{index}", "size": 0, "sha256": DIGEST_A} for index in range(MAX_FILES + 1)]
    with pytest.raises(TooLarge):
        parse_manifest(valid_json() | {"files": files})


def test_two_files_with_the_same_path_are_refused() -> None:
    value = valid_json()
    value["files"].append({"path": "model.gguf", "size": 1, "sha256": DIGEST_B})
    error = refusal(value)
    assert error.details["field"] == "files[2].path"
    assert "files[0].path" in error.message


def test_a_file_under_a_path_that_is_itself_a_file_is_refused() -> None:
    value = valid_json()
    value["files"].append({"path": "model.gguf/inner", "size": 1, "sha256": DIGEST_B})
    assert refusal(value).details["field"] == "files[2].path"


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True, None, MAX_JSON_INTEGER + 1])
def test_a_size_that_is_not_a_non_negative_integer_is_refused(bad: object) -> None:
    value = valid_json()
    value["files"][1]["size"] = bad
    assert refusal(value).details["field"] == "files[1].size"


@pytest.mark.parametrize(
    "bad", ["A" * 64, "a" * 63, "a" * 65, "g" * 64, "", None, 0, " " + "a" * 63]
)
def test_a_sha256_that_is_not_64_lowercase_hex_characters_is_refused(bad: object) -> None:
    value = valid_json()
    value["files"][0]["sha256"] = bad
    assert refusal(value).details["field"] == "files[0].sha256"


def test_parse_sha256_returns_a_valid_digest_unchanged() -> None:
    assert parse_sha256(DIGEST_B) == DIGEST_B


# -- safe relative paths ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "good", ["model.gguf", "a/b/c.bin", "sub dir/ünïcode.txt", "..hidden", "a..b", ".config"]
)
def test_a_safe_relative_path_is_returned_unchanged(good: str) -> None:
    assert parse_safe_relative_path(good) == good


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("", "empty"),
        ("/etc/passwd", "relative"),
        ("..", "'..'"),
        ("../escape", "'..'"),
        ("a/../../b", "'..'"),
        ("a/..", "'..'"),
        (".", "'.'"),
        ("./a", "'.'"),
        ("a/./b", "'.'"),
        ("a//b", "empty"),
        ("a/", "empty"),
        ("a\\b", "'\\'"),
        ("..\\evil", "'\\'"),
        ("a\x00b", "NUL"),
        ("a\nb", "control"),
        ("x" * (MAX_PATH_CHARS + 1), "at most"),
        ("d/" + "x" * 256, "segment"),
        ("https://example.com/model.gguf", "URL"),
    ],
)
def test_an_unsafe_path_is_refused_with_the_reason(bad: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_safe_relative_path(bad, field="files[3].path")
    assert caught.value.details["field"] == "files[3].path"
    assert reason in caught.value.message


@pytest.mark.parametrize("bad", [None, 3, b"model.gguf", ["a"]])
def test_a_path_that_is_not_a_string_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInput, match="must be a string"):
        parse_safe_relative_path(bad)


def test_a_path_segment_is_bounded_in_utf8_bytes_not_characters() -> None:
    assert parse_safe_relative_path("é" * 127 + "x")
    with pytest.raises(InvalidInput):
        parse_safe_relative_path("é" * 128)


def test_an_unsafe_file_path_in_a_manifest_is_refused_naming_the_entry() -> None:
    value = valid_json()
    value["files"][1]["path"] = "/abs/path"
    assert refusal(value).details["field"] == "files[1].path"


# -- no URLs anywhere ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com",
        "HTTPS://EXAMPLE.COM/x",
        "ftp://host/file",
        "file:///etc/passwd",
        "file:/etc/passwd",
        "s3://bucket/key",
        "s3:bucket/key",
        "hf:HuggingFaceTB/SmolLM2",
        "hf://HuggingFaceTB/SmolLM2",
        "gs://bucket/key",
        "git+ssh://git@host/repo",
        "//cdn.example.com/model",
        "see (//host/path)",
        "weights at https://x.io/w, mirrored",
        "www.example.com/model",
    ],
)
def test_text_with_a_scheme_or_authority_looks_like_a_url(url: str) -> None:
    assert looks_like_url(url)


PLAIN_SCHEME_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
"""The scheme rule as first written: the same matches, in time quadratic in a long run."""


PIECES = st.sampled_from(["a", "Z", "0", "9", "+", ".", "-", ":", "/", "://", " ", "_", "é"])


@given(st.lists(PIECES, max_size=12).map("".join))
def test_the_scheme_rule_finds_a_scheme_exactly_where_the_plain_pattern_does(text: str) -> None:
    assert bool(_SCHEME_AUTHORITY.search(text)) == bool(PLAIN_SCHEME_AUTHORITY.search(text))


@pytest.mark.parametrize(
    "text",
    [
        "llama",
        "Apache-2.0",
        "ratio 1:2",
        "a/b//c",
        "time 10:30",
        "profile: chat",
        "Training data: 2T tokens",
        "C:",
        "chat-template",
    ],
)
def test_ordinary_text_does_not_look_like_a_url(text: str) -> None:
    assert not looks_like_url(text)


@pytest.mark.parametrize(
    ("place", "field"),
    [
        ({"name": "http://x.io/m"}, "name"),
        ({"format": "hf:gguf"}, "format"),
        ({"metadata": {"source": "https://huggingface.co/x"}}, "metadata.source"),
        ({"metadata": {"a": {"b": ["ok", "s3://bucket/k"]}}}, "metadata.a.b[1]"),
        ({"metadata": {"mirror": [{"at": "//host/x"}]}}, "metadata.mirror[0].at"),
        ({"metadata": {"https://x.io": 1}}, "metadata.https://x.io"),
    ],
)
def test_a_url_anywhere_in_the_manifest_is_refused_naming_where(
    place: dict[str, Any], field: str
) -> None:
    error = refusal(valid_json() | place)
    assert error.details["field"] == field
    assert "URL" in error.message


def test_a_url_in_a_file_path_is_refused() -> None:
    value = valid_json()
    value["files"][0]["path"] = "hf:org/model.gguf"
    assert refusal(value).details["field"] == "files[0].path"


# -- metadata --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, [], "text", 3])
def test_metadata_must_be_an_object(bad: object) -> None:
    assert refusal(valid_json() | {"metadata": bad}).details["field"] == "metadata"


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"x": float("nan")}, "metadata.x"),
        ({"x": float("inf")}, "metadata.x"),
        ({"x": [2**53]}, "metadata.x[0]"),
        ({"x": -(2**53)}, "metadata.x"),
        ({"x": (1, 2)}, "metadata.x"),
        ({"x": {1, 2}}, "metadata.x"),
        ({"x": b"bytes"}, "metadata.x"),
        ({"x": {3: "int key"}}, "metadata.x"),
    ],
)
def test_metadata_that_jcs_cannot_encode_exactly_is_refused(
    bad: dict[str, Any], field: str
) -> None:
    assert refusal(valid_json() | {"metadata": bad}).details["field"] == field


def test_metadata_nested_deeper_than_the_bound_is_refused() -> None:
    deep: dict[str, Any] = {}
    level = deep
    for _ in range(MAX_METADATA_DEPTH):
        level["d"] = {}
        level = level["d"]
    assert "deeper" in refusal(valid_json() | {"metadata": deep}).message


def test_metadata_nested_to_the_bound_is_accepted() -> None:
    deep: dict[str, Any] = {}
    level = deep
    for _ in range(MAX_METADATA_DEPTH - 1):
        level["d"] = {}
        level = level["d"]
    assert parse_manifest(valid_json() | {"metadata": deep}).metadata == deep


def test_a_manifest_whose_encoding_passes_the_byte_bound_is_too_large() -> None:
    with pytest.raises(TooLarge) as caught:
        parse_manifest(valid_json() | {"metadata": {"notes": ["x" * 1000] * 600}})
    assert caught.value.details["field"] == "manifest"


def test_a_refused_manifest_leaves_its_input_untouched() -> None:
    value = valid_json() | {"extra": 1}
    snapshot = copy.deepcopy(value)
    refusal(value)
    assert value == snapshot


def test_build_manifest_validates_like_parse_manifest() -> None:
    with pytest.raises(InvalidInput) as caught:
        build_manifest("m", "gguf", [("ok.bin", 1, DIGEST_A), ("../evil", 1, DIGEST_B)])
    assert caught.value.details["field"] == "files[0].path"

"""The example model's end tokens, for requests that must run to ``max_tokens``."""

from __future__ import annotations

import functools
import struct
from pathlib import Path
from typing import BinaryIO, Final

END_TOKENS: Final = ("<|endoftext|>", "<|im_end|>")
"""SmolLM2's end-of-text tokens: banned, the model cannot end an answer early."""
TOKENS_KEY: Final = "tokenizer.ggml.tokens"
_STRING, _ARRAY = 8, 9
_FIXED_BYTES: Final = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""GGUF value types of a fixed size (integers, floats, bool), by type number."""


@functools.cache
def end_token_ids(model: Path) -> tuple[int, ...]:
    """The IDs of :data:`END_TOKENS` in ``model``'s vocabulary, read from its GGUF header.

    Only the key-value header is read, up to the token list (a few hundredths of a second); the
    gguf package's reader parses every field and tensor and took 2.5 s on each call.
    """
    with model.open("rb") as file:
        magic, _version, _tensors, fields = struct.unpack("<4sIQQ", file.read(24))
        assert magic == b"GGUF", f"{model} is not a GGUF file"
        for _ in range(fields):
            key = _string(file)
            kind = _unsigned(file, 4)
            if key == TOKENS_KEY:
                assert kind == _ARRAY, "the tokens are an array"
                assert _unsigned(file, 4) == _STRING, "of strings"
                tokens = [_string(file) for _ in range(_unsigned(file, 8))]
                return tuple(tokens.index(name) for name in END_TOKENS)
            _skip(file, kind)
    raise AssertionError(f"{model} has no {TOKENS_KEY}")


def _unsigned(file: BinaryIO, size: int) -> int:
    return int.from_bytes(file.read(size), "little")


def _string(file: BinaryIO) -> str:
    return file.read(_unsigned(file, 8)).decode("utf-8", errors="replace")


def _skip(file: BinaryIO, kind: int) -> None:
    """Read past one value of GGUF type ``kind``."""
    if kind == _STRING:
        file.seek(_unsigned(file, 8), 1)
    elif kind == _ARRAY:
        item_kind, count = _unsigned(file, 4), _unsigned(file, 8)
        if item_kind in _FIXED_BYTES:
            file.seek(_FIXED_BYTES[item_kind] * count, 1)
        else:
            for _ in range(count):
                _skip(file, item_kind)
    else:
        file.seek(_FIXED_BYTES[kind], 1)

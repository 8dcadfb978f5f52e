"""The write-path fix for iroh 1.2.0's generated bindings (iroh-ffi issue 229).

The generated ``_UniffiRustBufferBuilder.write`` copies bytes one at a time in Python
(3–5 MB/s). We replace it with one ``ctypes.memmove`` into the reserved buffer. The endpoint
applies it when it starts; if the generated code no longer has the shape this fix was written
for, it is left alone and a warning says so: bulk transfers are slow, but FICC runs (an iroh
upgrade must not stop it at import).
"""

from __future__ import annotations

import ctypes
import inspect
import logging
import textwrap
from typing import Any, Final

from iroh import iroh_ffi

_EXPECTED_WRITE: Final = textwrap.dedent(
    """\
    def write(self, value):
        with self._reserve(len(value)):
            for i, byte in enumerate(value):
                self.rbuf.data[self.rbuf.len + i] = byte
    """
)
_EXPECTED_FIELDS: Final = [
    ("capacity", ctypes.c_uint64),
    ("len", ctypes.c_uint64),
    ("data", ctypes.POINTER(ctypes.c_char)),
]
_MARK: Final = "_ficc_write_fix"

log = logging.getLogger(__name__)


class WriteFixError(RuntimeError):
    """The patched write met a buffer it cannot copy into."""


def _memmove_write(self: Any, value: Any) -> None:
    """Append ``value`` to the Rust buffer with a single copy."""
    data = value if isinstance(value, bytes) else bytes(value)
    size = len(data)
    with self._reserve(size):
        if size:
            base = ctypes.cast(self.rbuf.data, ctypes.c_void_p).value
            if base is None:
                raise WriteFixError("iroh reserved a null buffer")
            ctypes.memmove(base + self.rbuf.len, data, size)


def apply_write_fix() -> bool:
    """Patch the builder once per process (a second call is a no-op); False, with a warning,
    when the generated code changed shape and was left as it is."""
    builder = getattr(iroh_ffi, "_UniffiRustBufferBuilder", None)
    buffer = getattr(iroh_ffi, "_UniffiRustBuffer", None)
    if builder is None or buffer is None:
        return _left_alone("iroh's generated RustBuffer classes are missing")
    if getattr(builder.write, _MARK, False):
        return True
    try:
        source = textwrap.dedent(inspect.getsource(builder.write))
        fields = [(name, kind) for name, kind in buffer._fields_]
    except (OSError, TypeError, AttributeError, ValueError):
        return _left_alone("iroh's generated _UniffiRustBufferBuilder.write cannot be read")
    if source != _EXPECTED_WRITE or fields != _EXPECTED_FIELDS or not hasattr(builder, "_reserve"):
        return _left_alone("iroh's generated _UniffiRustBufferBuilder.write changed shape")
    setattr(_memmove_write, _MARK, True)
    builder.write = _memmove_write
    return True


def _left_alone(why: str) -> bool:
    return left_alone(log, why, fix="write", cost="bulk writes will be slow")


def left_alone(logger: logging.Logger, why: str, *, fix: str, cost: str) -> bool:
    """Warn through ``logger`` (the fix's module) that ``fix`` is not applied and what that
    costs; False, the answer of a fix that was left alone."""
    logger.warning(
        "%s; the HyperNet %s fix is not applied and %s (review %s for this iroh version)",
        why,
        fix,
        cost,
        logger.name,
    )
    return False

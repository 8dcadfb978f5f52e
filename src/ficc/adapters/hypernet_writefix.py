"""The write-path fix for iroh 1.2.0's generated bindings (iroh-ffi issue 229).

The generated ``_UniffiRustBufferBuilder.write`` copies bytes one at a time in Python
(3–5 MB/s). We replace it with one ``ctypes.memmove`` into the reserved buffer, and refuse to
patch — loudly — if the generated code no longer has the shape this fix was written for.
"""

from __future__ import annotations

import ctypes
import inspect
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


class WriteFixError(RuntimeError):
    """iroh's generated code changed: the fix must be reviewed before FICC runs on it."""


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


def apply_write_fix() -> None:
    """Patch the builder once per process; a second call is a no-op."""
    builder = getattr(iroh_ffi, "_UniffiRustBufferBuilder", None)
    buffer = getattr(iroh_ffi, "_UniffiRustBuffer", None)
    if builder is None or buffer is None:
        raise WriteFixError("iroh's generated RustBuffer classes are missing")
    if getattr(builder.write, _MARK, False):
        return
    source = textwrap.dedent(inspect.getsource(builder.write))
    fields = [(name, kind) for name, kind in buffer._fields_]
    if source != _EXPECTED_WRITE or fields != _EXPECTED_FIELDS or not hasattr(builder, "_reserve"):
        raise WriteFixError(
            "iroh's generated _UniffiRustBufferBuilder.write changed shape; "
            "review ficc.adapters.hypernet_writefix before upgrading iroh"
        )
    setattr(_memmove_write, _MARK, True)
    builder.write = _memmove_write

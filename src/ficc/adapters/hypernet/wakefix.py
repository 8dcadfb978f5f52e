"""The wake-path fix for iroh 1.2.0's generated bindings: no self-pipe write per poll.

Every async call into iroh (each read, each write) polls its Rust future with a continuation
callback, and the generated callback always resumes the awaiting coroutine through
``loop.call_soon_threadsafe``. When the future is ready at once, the callback runs on the
loop's own thread, inside the poll: the thread-safe call then writes to the loop's wake-up
pipe, and the loop must read it back, a pair of system calls and a loop iteration for every
chunk a stream carries. On the loop's thread ``loop.call_soon`` does the same job without
them; from iroh's own threads the thread-safe call stays. The coroutine is still resumed by
the loop (never inside the poll), so a stream whose reads are always ready cannot hold the
loop. Applied like :mod:`~ficc.adapters.hypernet.writefix`: once, and only on the shape it was
written for; otherwise left alone with a warning.

A wake-up from iroh's own threads is a ctypes callback on a thread Python did not start: ctypes
makes a Python thread state for it and frees it after, with its frame stack (a ``mmap`` and a
``munmap`` and their page faults, every wake-up; every chunk of a stream the loop waits for).
The first callback on such a thread keeps its thread state for the thread's life instead (one
more ``PyGILState_Ensure``, never released): iroh's threads are few and live as long as the
process.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import logging
import textwrap
import threading
from typing import Any, Final

from iroh import iroh_ffi

from ficc.adapters.hypernet.writefix import left_alone

_EXPECTED_CALLBACK: Final = textwrap.dedent(
    """\
    @_UNIFFI_RUST_FUTURE_CONTINUATION_CALLBACK
    def _uniffi_continuation_callback(future_ptr, poll_code):
        (eventloop, future) = _UniffiContinuationHandleMap.remove(future_ptr)
        eventloop.call_soon_threadsafe(_uniffi_set_future_result, future, poll_code)
    """
)
_MARK: Final = "_ficc_wake_fix"

log = logging.getLogger(__name__)

_this_thread = threading.local()
"""Held in the thread's Python thread state: set once that state is kept."""
kept_thread_states = 0
"""How many threads' states :func:`_keep_thread_state` kept (one per iroh thread that woke us)."""


def _continue(future_ptr: int, poll_code: int) -> None:
    """Resume the coroutine awaiting ``future_ptr``'s poll, by the cheapest safe way."""
    handles: Any = iroh_ffi._UniffiContinuationHandleMap
    eventloop: asyncio.AbstractEventLoop
    eventloop, future = handles.remove(future_ptr)
    if asyncio._get_running_loop() is eventloop:
        eventloop.call_soon(iroh_ffi._uniffi_set_future_result, future, poll_code)
    else:
        _keep_thread_state()
        eventloop.call_soon_threadsafe(iroh_ffi._uniffi_set_future_result, future, poll_code)


def _keep_thread_state() -> None:
    """Keep the calling thread's Python thread state once the callback returns (see the module
    docstring); a thread whose state is kept already finds its mark and does nothing."""
    global kept_thread_states
    if getattr(_this_thread, "kept", False) or not isinstance(
        threading.current_thread(), threading._DummyThread
    ):
        return  # kept already, or a thread Python started (its state is its own)
    ctypes.pythonapi.PyGILState_Ensure()
    _this_thread.kept = True
    kept_thread_states += 1


def apply_wake_fix() -> bool:
    """Replace the continuation callback once per process (a second call is a no-op); False,
    with a warning, when the generated code changed shape and was left as it is."""
    current: Any = getattr(iroh_ffi, "_uniffi_continuation_callback", None)
    if getattr(current, _MARK, False):
        return True
    kind = getattr(iroh_ffi, "_UNIFFI_RUST_FUTURE_CONTINUATION_CALLBACK", None)
    needed = (
        "_UniffiContinuationHandleMap",
        "_uniffi_set_future_result",
        "_uniffi_rust_call_async",
    )
    if current is None or kind is None or not all(hasattr(iroh_ffi, name) for name in needed):
        return _left_alone("iroh's generated continuation callback is missing")
    try:
        source = inspect.getsource(iroh_ffi)
        caller = inspect.getsource(iroh_ffi._uniffi_rust_call_async)
    except (OSError, TypeError):
        return _left_alone("iroh's generated continuation callback cannot be read")
    if _EXPECTED_CALLBACK not in source or "_uniffi_continuation_callback," not in caller:
        return _left_alone("iroh's generated continuation callback changed shape")
    callback = kind(_continue)
    setattr(callback, _MARK, True)
    # The poll looks the callback up by its global name at each call; the module keeps the
    # ctypes object alive for as long as Rust may call it.
    iroh_ffi._uniffi_continuation_callback = callback
    return True


def _left_alone(why: str) -> bool:
    return left_alone(
        log, why, fix="wake", cost="each stream read and write costs a wake-up of the loop"
    )

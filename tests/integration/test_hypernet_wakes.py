"""Wake-ups from iroh's own threads keep their Python thread state.

Each read the loop waits for is resumed by a ctypes callback on one of iroh's threads; ctypes
would make a thread state for every such callback and free it after. Over real iroh streams
on loopback, a hundred waited-for reads must keep no more thread states than iroh has threads.
"""

from __future__ import annotations

import asyncio

import iroh

from ficc.adapters.hypernet import wakefix
from ficc.adapters.hypernet.binding import claim_event_loop

ALPN = b"ficc-test/wakes"
ROUND_TRIPS = 100
IROH_THREADS_AT_MOST = 8


def _options() -> iroh.EndpointOptions:
    return iroh.EndpointOptions(
        preset=iroh.preset_minimal(),
        bind_addr="127.0.0.1:0",
        alpns=[ALPN],
        relay_mode=iroh.RelayMode.disabled(),
    )


async def test_reads_woken_from_irohs_threads_keep_one_thread_state_per_thread() -> None:
    assert wakefix.apply_wake_fix()
    claim_event_loop()  # iroh resumes its calls on the loop that owns it: this test's
    server, client = await iroh.Endpoint.bind(_options()), await iroh.Endpoint.bind(_options())

    async def accepted() -> iroh.Connection:
        incoming = await server.accept_next()
        assert incoming is not None
        return await (await incoming.accept()).connect()

    accepting = asyncio.ensure_future(accepted())
    connection = await client.connect(server.addr(), ALPN)
    served = await accepting

    async def echo() -> int:
        stream = await served.accept_bi()
        recv, send = stream.recv(), stream.send()
        reads = 0
        while data := await recv.read(1024):  # each waits: the client writes after it
            reads += 1
            await send.write_all(data)
        return reads

    echoing = asyncio.ensure_future(echo())
    stream = await connection.open_bi()
    send, recv = stream.send(), stream.recv()
    before = wakefix.kept_thread_states
    for number in range(ROUND_TRIPS):
        await send.write_all(b"%03d" % number)
        assert await recv.read_exact(3) == b"%03d" % number
    await send.finish()
    reads = await echoing
    kept = wakefix.kept_thread_states - before
    assert reads >= ROUND_TRIPS
    assert kept <= IROH_THREADS_AT_MOST, f"{kept} thread states for {reads} woken reads"
    await client.close()
    await server.close()

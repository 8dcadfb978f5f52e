"""The sans-IO core of ficc.federation/1: bytes in, events out; no socket, no clock."""

ALPN = b"ficc.federation/1"

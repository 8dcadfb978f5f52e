"""An independent driver of ficc.federation/1, written from docs/protocol.md alone: it imports
nothing from ``ficc`` (only ``iroh``, ``cryptography``, ``rfc8785`` and the standard library)."""

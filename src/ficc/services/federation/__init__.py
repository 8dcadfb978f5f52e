"""Pairing, peers and grants: the relationship layer of the federation.

The requester sends an offer to the service's cluster; the service side approves it with a
grant and signs an acceptance receipt; the requester checks the receipt and completes the
pairing on both sides. From then on the service side serves the requester under its grants,
each request checked against the session's proven identity: the TLS-verified HyperNet ID, the
cluster key proven in the handshake, and the pairing generation the session is bound to.
"""

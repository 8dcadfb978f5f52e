"""Remote operations under a grant: one table of what a peer may ask, the grantor's gate and
handlers, and the requester's client."""

"""The JSON the HTTP API and the console show of the typed views services return.

One module per concept. Where the same object also travels to a peer or into a receipt, its
shape is written once beside the view in ``domain/`` and the presenter calls it, so the API,
the console and the wire cannot drift apart.
"""

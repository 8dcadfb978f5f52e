"""Transfers of a model between clusters: verified, resumable, within the grant's allowance.

The requester's side (:mod:`.acquire` drives it, :mod:`.fetch` runs it) and the grantor's side
(:mod:`.serving`, ``models.range``) share nothing but the wire: the operation table names the
grantor's handler without importing the requester.
"""

from ficc.services.transfers.acquire import Transfers
from ficc.services.transfers.fetch import Fetcher
from ficc.services.transfers.serving import RangeServer

__all__ = ["Fetcher", "RangeServer", "Transfers"]

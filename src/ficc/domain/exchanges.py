"""A federated request while it goes, as either side counts it, and the usage record it
ends as: the grantor's tab and the requester's usage are each one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ficc.domain.metering import UsageRecord


@dataclass(kw_only=True)
class Exchange:
    """One request under a grant while it goes: its ID and operation, the service its body
    names, when it started, and its bytes each way (the response's grow while it is sent)."""

    request: str
    operation: str
    service: str | None
    started_at: datetime
    request_bytes: int
    response_bytes: int = 0

    def record(
        self, grant: str, side: str, counts: tuple[int, int], outcome: str, ended_at: datetime
    ) -> UsageRecord:
        """The usage record ``side`` keeps of it: ``counts`` are its prompt and completion
        tokens as that side settled them."""
        prompt_tokens, completion_tokens = counts
        return UsageRecord(
            request=self.request,
            grant=grant,
            side=side,
            operation=self.operation,
            service=self.service,
            started_at=self.started_at,
            ended_at=ended_at,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            request_bytes=self.request_bytes,
            response_bytes=self.response_bytes,
            outcome=outcome,
        )

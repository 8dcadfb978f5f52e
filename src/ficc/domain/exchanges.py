"""A federated request while it goes, as either side counts it, and the usage record it
ends as: the grantor's tab and the requester's usage are each one."""

from __future__ import annotations

from dataclasses import dataclass, fields
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
        tokens as that side settled them. Each of an exchange's fields is the record's field
        of the same name (a subclass's own fields are not)."""
        prompt_tokens, completion_tokens = counts
        mine = {f.name: getattr(self, f.name) for f in fields(Exchange)}
        return UsageRecord(
            **mine,
            grant=grant,
            side=side,
            ended_at=ended_at,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            outcome=outcome,
        )

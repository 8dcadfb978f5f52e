"""Metrics and the federation's access log for each request, in both directions."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

from ficc.adapters import metrics
from ficc.base.errors import FiccError

federation_log = logging.getLogger("ficc.federation.access")


@contextlib.contextmanager
def counted(direction: str, operation: str) -> Iterator[list[str]]:
    """Count one federation request and time it; the outcome is ``ok`` unless the body
    appends an error code or raises (then the error's code)."""
    outcome: list[str] = []
    started = time.perf_counter()
    try:
        yield outcome
    except FiccError as exc:
        outcome.append(exc.code)
        raise
    except asyncio.CancelledError:
        outcome.append("cancelled")
        raise
    finally:
        elapsed = time.perf_counter() - started
        result = metrics.federation_outcome(outcome[0] if outcome else None)
        metrics.FEDERATION_REQUESTS.labels(
            direction=direction, operation=operation, outcome=result
        ).inc()
        metrics.FEDERATION_DURATION.labels(direction=direction, operation=operation).observe(
            elapsed
        )
        # The federation's access log: with the request ID both clusters' lines match.
        federation_log.info(
            "%s %s %s %.1f ms",
            direction,
            operation,
            result,
            elapsed * 1000,
            extra={
                "direction": direction,
                "operation": operation,
                "outcome": result,
                "duration_ms": round(elapsed * 1000, 3),
            },
        )

"""Retrying transient LLM failures: exponential backoff with full jitter, honouring the delay a
server asked for (``Retry-After``).

Only failures that happen *before* the first delta are retried transparently; once output has
streamed, a failure is reported to the caller (retrying would duplicate what the user saw).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from .provider import Provider, ProviderError
from .types import Delta, LLMRequest

__all__ = ["RetryNotice", "RetryPolicy", "stream_with_retries"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before retrying a failed LLM request (exponential back-off with
    jitter, honouring a server's ``Retry-After``)."""

    max_attempts: int = 4
    """Attempts in all (the first try included)."""
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 120.0
    """A server's ``Retry-After`` longer than this is capped."""

    def delay(
        self, attempt: int, error: ProviderError, rng: Callable[[], float] = random.random
    ) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        if error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return float(ceiling / 2 + rng() * ceiling / 2)


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """Yielded (instead of a delta) before sleeping for a retry."""

    attempt: int
    max_attempts: int
    delay: float
    error: ProviderError
    kind: str = "retry"


async def stream_with_retries(
    provider: Provider, request: LLMRequest, policy: RetryPolicy
) -> AsyncIterator[Delta | RetryNotice]:
    """Stream ``request``, retrying retryable failures that happen before any output."""
    attempt = 1
    while True:
        produced = False
        try:
            async for delta in provider.stream(request):
                produced = True
                yield delta
            return
        except ProviderError as exc:
            if produced or not exc.retryable or attempt >= policy.max_attempts:
                raise
            wait = policy.delay(attempt, exc)
            yield RetryNotice(attempt, policy.max_attempts, wait, exc)
            await asyncio.sleep(wait)
            attempt += 1

"""Bounded retries with exponential backoff, for timeline writes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

T = TypeVar("T")
log = logging.getLogger(__name__)


class RetryPolicy(BaseModel):
    attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0

    def run(self, action: Callable[[], T], what: str, retry_on: tuple[type[BaseException], ...] = (OSError,)) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return action()
            except retry_on as exc:
                if attempt == self.attempts:
                    raise
                delay = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
                log.warning(
                    "%s failed (attempt %d of %d): %s; retrying in %.2fs", what, attempt, self.attempts, exc, delay
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

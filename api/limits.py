"""Admission: what keeps the API from slowing the writer that serves it.

The API runs in the job's process, beside the micro-batches it reports on, and every answer it computes
holds the interpreter's lock for a while. So requests are admitted at a bounded rate (all clients
together) and only a few at a time; a request beyond either waits its turn (asleep in the event loop,
costing nothing) for up to ``queue_seconds``, a moment (a page's panels asking together), and is answered
429 with ``Retry-After`` at once when its turn would come later: past its bounds the API refuses rather
than queues. Answering costs the writer too, so a connection that asks again before the ``Retry-After`` it
was given gets its next 429 when that time is up, asleep meanwhile: a client that honours it is refused at
once, one that does not is slowed to one refusal a ``Retry-After``. Answers that are admitted are shared by
clients asking the same thing (``api/read_cache.py``). A body longer than ``max_body_bytes`` is refused (413)
from its ``Content-Length`` before any of it is read, and a body without one (chunked) is refused (411): this
happens before authentication, so nobody can make the server read a large body for nothing.

Answers are ``{"detail", "kind"}`` as every other error's (``api/errors.py``); the dashboard's requests
(under ``/ui``) get the same words as an HTML fragment.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from laketide.api.errors import send_error
from laketide.table.errors import ErrorKind

# a refused body was not read: the connection cannot carry another request
CLOSE = [(b"connection", b"close")]


@dataclass(frozen=True)
class ApiLimits:
    """``coordinator.api_max_rate`` / ``api_max_concurrent`` / ``api_max_body``; ``None`` rate: no limit."""

    max_rate: float | None = 25.0  # requests admitted per second, all clients together
    max_concurrent: int = 2  # requests being answered at once
    max_body_bytes: int = 64 * 1024  # the API's bodies are a few hundred bytes of JSON or a form
    queue_seconds: float = 0.25  # how long a request may wait for its turn before it is answered 429
    burst: int = 8  # requests admitted at once after a quiet spell (a dashboard's panels load together)


class Admission:
    """Pure ASGI middleware in front of the app; one instance per app, used only on the server's event loop
    (its turn-keeping needs no lock: nothing here runs on another thread)."""

    def __init__(self, app: ASGIApp, limits: ApiLimits):
        self.app = app
        self.limits = limits
        self._next_turn = 0.0  # monotonic time at which the next request may start (the rate's schedule)
        self._slots: asyncio.Semaphore | None = None  # made on the loop that serves, at the first request
        # per connection (client address and port) refused: when the Retry-After it was given is up
        self._refused: dict[tuple, float] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        length, chunked = _body_headers(scope)
        if chunked:
            await send_error(send, path, 411, ErrorKind.INVALID, "send the request's body with a Content-Length", CLOSE)
            return
        if length > self.limits.max_body_bytes:
            await send_error(
                send,
                path,
                413,
                ErrorKind.INVALID,
                f"the request's body is larger than the API takes "
                f"({self.limits.max_body_bytes:,} bytes, coordinator.api_max_body)",
                CLOSE,
            )
            return
        wait = self._take_turn()
        if wait is None:
            await self._refuse(scope, send, "the API is answering as many requests as it may beside the writer")
            return
        if wait > 0:
            await asyncio.sleep(wait)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.max_concurrent)
        try:
            await asyncio.wait_for(self._slots.acquire(), self.limits.queue_seconds)
        except TimeoutError:
            await self._refuse(scope, send, "every slot of the API is busy")
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()

    async def _refuse(self, scope: Scope, send: Send, why: str) -> None:
        """429 with ``Retry-After``; to a connection that asks again before its last one is up, when it is."""
        now, retry = time.monotonic(), math.ceil(self.limits.queue_seconds)
        client = tuple(scope.get("client") or ())
        early = self._refused.get(client, now) - now
        if early > 0:
            await asyncio.sleep(early)
        if len(self._refused) >= 4096:  # connections gone: their times are up
            self._refused = {c: t for c, t in self._refused.items() if t > now}
        self._refused[client] = time.monotonic() + retry
        await send_error(
            send, scope.get("path", ""), 429, ErrorKind.BUSY, f"{why}; ask again shortly", _retry_after(retry)
        )

    def _take_turn(self) -> float | None:
        """Seconds until this request's turn under the rate, or ``None`` when that is past the queue's wait."""
        rate = self.limits.max_rate
        if rate is None:
            return 0.0
        now = time.monotonic()
        turn = max(self._next_turn, now - self.limits.burst / rate)
        if turn - now > self.limits.queue_seconds:
            return None
        self._next_turn = turn + 1 / rate
        return max(turn - now, 0.0)


def _body_headers(scope: Scope) -> tuple[int, bool]:
    """The body's declared length (0 without one) and whether it comes chunked, of unknown length."""
    length, chunked = 0, False
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit():
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
    return length, chunked


def _retry_after(seconds: int) -> list[tuple[bytes, bytes]]:
    return [(b"connection", b"keep-alive"), (b"retry-after", str(seconds).encode())]

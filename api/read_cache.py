"""Reads answered once a moment: what many clients asking the same thing cost the writer.

A dashboard redraws its panels every few seconds in every browser that has it open, and scripts poll the same
routes; each answer is computed under the interpreter's lock beside the micro-batch. So a successful ``GET``
is kept for ``ttl`` seconds and served to every request for the same path, query and credentials meanwhile,
and requests that come while it is being computed wait for that one answer rather than compute their own. Any
other request (a change: rollback, savepoint, restore) drops every kept answer when it is done, so what a
client changed is what it reads next. A view is thereby at most ``ttl`` older than the table, against a
dashboard that redraws every 3 seconds.

Pure ASGI middleware behind ``Admission`` (``api/limits.py``): admitted requests are still bounded in rate,
and only the answers that get past that are shared.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# an answer's key: the path, the query, and the credentials it was asked with (an answer is never shared with a
# client that sent others)
Key = tuple[str, bytes, bytes]


@dataclass
class _Kept:
    messages: list[Message]
    until: float


class ReadCache:
    """One instance per app, used only on the server's event loop: its dictionaries need no lock."""

    def __init__(self, app: ASGIApp, ttl: float = 1.0, most: int = 256):
        self.app, self.ttl, self.most = app, ttl, most
        self._kept: dict[Key, _Kept] = {}
        self._computing: dict[Key, asyncio.Future[list[Message] | None]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.ttl <= 0:
            await self.app(scope, receive, send)
            return
        if scope.get("method") != "GET":
            try:
                await self.app(scope, receive, send)
            finally:
                self._kept.clear()  # a change: what was kept may show the table before it
            return
        key = _key(scope)
        kept = self._kept.get(key)
        if kept is not None and kept.until > time.monotonic():
            await _replay(kept.messages, send)
            return
        computing = self._computing.get(key)
        if computing is not None:
            messages = await asyncio.shield(computing)
            if messages is not None:
                await _replay(messages, send)
                return
        await self._compute(key, scope, receive, send)

    async def _compute(self, key: Key, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request, keeping the answer when it is a whole 200 for the others who ask meanwhile."""
        done: asyncio.Future[list[Message] | None] = asyncio.get_running_loop().create_future()
        self._computing[key] = done
        messages: list[Message] = []

        async def keeping(message: Message) -> None:
            messages.append(message)
            await send(message)

        shared = None
        try:
            await self.app(scope, receive, keeping)
            if _whole_success(messages):
                shared = messages
                if len(self._kept) >= self.most:
                    self._forget_stale()
                self._kept[key] = _Kept(messages, time.monotonic() + self.ttl)
        finally:
            self._computing.pop(key, None)
            done.set_result(shared)  # waiters with None compute their own (an error is not shared)

    def _forget_stale(self) -> None:
        now = time.monotonic()
        for key in [k for k, kept in self._kept.items() if kept.until <= now] or list(self._kept):
            del self._kept[key]


def _key(scope: Scope) -> Key:
    credentials = b"".join(
        value for name, value in scope.get("headers", ()) if name in (b"authorization", b"cookie", b"hx-request")
    )
    return scope.get("path", ""), scope.get("query_string", b""), credentials


def _whole_success(messages: list[Message]) -> bool:
    """A 200 whose body came in full (not a stream left open)."""
    if not messages or messages[0].get("type") != "http.response.start" or messages[0].get("status") != 200:
        return False
    last = messages[-1]
    return last.get("type") == "http.response.body" and not last.get("more_body", False)


async def _replay(messages: list[Message], send: Send) -> None:
    for message in messages:
        await send(message)

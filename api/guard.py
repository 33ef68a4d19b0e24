"""What a browser needs told: which Host names the API answers to, and headers that keep its pages to themselves.

A server on the loopback address answers only to loopback names, so a web page elsewhere cannot reach it
through a DNS name rebound to 127.0.0.1 (the token guards changes, not reads). Every answer says
``nosniff``, no referrer, and no framing; the dashboard's pages also carry a Content-Security-Policy
that allows only the server's own scripts (htmx and ``ui.js``, shipped with it) and its own requests.
"""

from __future__ import annotations

import ipaddress

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from laketide.api.errors import send_error
from laketide.table.errors import ErrorKind

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
# htmx sets inline styles on elements it swaps; nothing else inline is allowed
UI_POLICY = (
    b"content-security-policy",
    b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
)


def default_hosts(bind_host: str) -> tuple[str, ...] | None:
    """The Host names a server bound to ``bind_host`` answers to by default: loopback names on a loopback
    address, any (``None``) on another, where the operator names them (``coordinator.api_allowed_hosts``)."""
    try:
        loopback = bind_host == "localhost" or ipaddress.ip_address(bind_host).is_loopback
    except ValueError:
        loopback = False
    return LOOPBACK_NAMES if loopback else None


def _host_name(value: str) -> str:
    """``Host``'s name without its port; ``[::1]:8470`` gives ``::1``."""
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """Pure ASGI middleware: refuses a ``Host`` not in ``allowed`` (``None``: any) with 400, and adds the headers."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...] | None):
        self.app = app
        self.allowed = {name.lower() for name in allowed} if allowed is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"host"), "")
        if self.allowed is not None and _host_name(host).lower() not in self.allowed:
            await send_error(
                send,
                scope.get("path", ""),
                400,
                ErrorKind.INVALID,
                f"this server does not answer to the host name {host!r}; "
                f"ask it by one of {', '.join(sorted(self.allowed))} (coordinator.api_allowed_hosts)",
                HEADERS,
            )
            return
        extra = [*HEADERS, UI_POLICY] if scope.get("path", "").startswith("/ui") else HEADERS

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)

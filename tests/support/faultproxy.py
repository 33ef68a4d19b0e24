"""A small HTTP proxy between a client and an object-store server that misbehaves on purpose: it
answers a share of requests with 503 SlowDown, resets a share of connections, and delays some; with
``drop_headers`` it leaves those request headers out (If-None-Match and If-Match: a store that ignores
conditional writes), and with ``batch_delete = False`` it answers S3's batch delete with 405. With no faults it is a
request counter: ``requests`` counts what reached it, by
kind (``kind_of``)."""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW_DOWN = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>Please reduce your request "
    b"rate.</Message></Error>"
)
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


class FaultProxy:
    """Listens on 127.0.0.1 (a free port); forwards to ``upstream`` ("host:port"). Counts what it did."""

    def __init__(
        self,
        upstream: str,
        slow_down: float = 0.0,
        reset: float = 0.0,
        delay: float = 0.0,
        seed: int = 7,
        drop_headers: tuple[str, ...] = (),
        batch_delete: bool = True,
    ):
        self.upstream = upstream
        self.batch_delete = batch_delete
        self.dropped = HOP_BY_HOP | {h.lower() for h in drop_headers}
        self.slow_down, self.reset, self.delay = slow_down, reset, delay
        self.random = random.Random(seed)
        self.counts = {"forwarded": 0, "slow_down": 0, "reset": 0, "delayed": 0}
        self.requests: dict[str, int] = {}
        self._lock = threading.Lock()  # the handler threads share the random source and the counts
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FaultProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.requests)

    def _draw(self, kind: str) -> str:
        with self._lock:
            self.requests[kind] = self.requests.get(kind, 0) + 1
            roll = self.random.random()
            fault = "slow_down" if roll < self.slow_down else "reset" if roll < self.slow_down + self.reset else None
            if fault is None and self.random.random() < self.delay:
                fault = "delayed"
            self.counts[fault or "forwarded"] += 1
            return fault or "forwarded"

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        fault = self._draw(kind_of(request.command, request.path))
        if not self.batch_delete and request.command == "POST" and request.path.partition("?")[2].startswith("delete"):
            request.send_response(405)
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        if fault == "reset":
            # an abortive close: the client sees its connection reset, not an answer
            request.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            request.close_connection = True
            request.connection.close()
            return
        if fault == "slow_down":
            request.send_response(503)
            request.send_header("Content-Type", "application/xml")
            request.send_header("Content-Length", str(len(SLOW_DOWN)))
            request.end_headers()
            request.wfile.write(SLOW_DOWN)
            return
        if fault == "delayed":
            time.sleep(0.5)
        self._forward(request, body)

    def _forward(self, request: BaseHTTPRequestHandler, body: bytes) -> None:
        host, port = self.upstream.split(":")
        upstream = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in self.dropped}
        upstream.request(request.command, request.path, body=body or None, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        request.send_response(answer.status, answer.reason)
        head = request.command == "HEAD"  # its Content-Length is the object's, with no body
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP and (head or key.lower() != "content-length"):
                request.send_header(key, value)
        if not head:
            request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(data)
        upstream.close()


def kind_of(method: str, path: str) -> str:
    """A request's kind as the stores bill it: a GET that lists (S3's ``list-type``, Azure's ``comp=list``)
    is a LIST, S3's batch delete a DELETE, and the POSTs of a multipart upload PUTs."""
    query = path.partition("?")[2]
    if method == "GET" and ("list-type" in query or "comp=list" in query):
        return "LIST"
    if method == "POST":
        return "DELETE" if query.startswith("delete") else "PUT"
    return method

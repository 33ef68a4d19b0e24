"""Serving the app with uvicorn: in a background thread of the job, or in the foreground (``laketide serve``).

The listening socket is bound before uvicorn starts, so a port in use is a clear ``LaketideError``
naming it and the way out, not uvicorn's log line and exit code.
"""

from __future__ import annotations

import errno
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from laketide.table.errors import ErrorKind, LaketideError


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port=0``: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise LaketideError(
                f"port {port} on {host} is in use by another process; choose another port (0 picks a free one)",
                kind=ErrorKind.CONFLICT,
            ) from None
        raise LaketideError(
            f"cannot listen on {host}:{port} ({exc.strerror}); check the host address and the port",
            kind=ErrorKind.INVALID,
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class ApiServer:
    """uvicorn on a socket bound at construction; ``port=0`` picks a free port, read back from ``address``."""

    def __init__(
        self,
        app: FastAPI,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        sock: socket.socket | None = None,
    ):
        """``sock``: one ``bind`` gave already (a job binds its port before Spark starts, to fail fast)."""
        self.socket = sock or bind(host, port)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off"))
        self.thread = threading.Thread(target=self.run, name="laketide-api", daemon=True)
        self.host = host

    def run(self) -> None:
        """Serve in this thread until stopped (``laketide serve``: until interrupted)."""
        self.server.run(sockets=[self.socket])

    def start(self, timeout: float = 10.0) -> ApiServer:
        """Serve in a daemon thread; returns once it answers."""
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the API server did not start on {self.host}")
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        return self.socket.getsockname()[1]

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()

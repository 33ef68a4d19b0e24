"""Serving the app with uvicorn: in a background thread of the job, or in the foreground."""

from __future__ import annotations

import threading
import time

import uvicorn
from fastapi import FastAPI


class ApiServer:
    """uvicorn in a daemon thread; ``port=0`` picks a free port, read back from ``address``."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0):
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, name="laketide-api", daemon=True)
        self.host = host

    def start(self, timeout: float = 10.0) -> ApiServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the API server did not start on {self.host}")
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

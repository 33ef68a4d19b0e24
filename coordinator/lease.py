"""Leases: one writer per table.

A lease names its holder and carries an epoch that grows with every new
holder. The coordinator checks the lease before every commit and stamps the
epoch into the instant, so a writer that lost its lease cannot commit.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from abc import ABC, abstractmethod
from datetime import datetime, timezone

from pydantic import BaseModel, Field


class LeaseHolder(BaseModel):
    host: str = Field(default_factory=socket.gethostname)
    pid: int = Field(default_factory=os.getpid)
    job_id: str = ""
    api_address: str | None = None
    acquired_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    epoch: int = 0

    def describe(self) -> str:
        api = f", API {self.api_address}" if self.api_address else ""
        return f"{self.job_id or 'a writer'} on {self.host} (pid {self.pid}, epoch {self.epoch}{api}, since {self.acquired_at})"


class LeaseError(RuntimeError):
    pass


class LeaseHeld(LeaseError):
    """Another writer holds the lease."""

    def __init__(self, table: str, holder: LeaseHolder | None):
        self.holder = holder
        who = holder.describe() if holder else "another writer"
        super().__init__(f"table {table} is held by {who}")


class LeaseLost(LeaseError):
    """This writer no longer holds the lease and must not commit."""


class Lease(ABC):
    """The lease of one table. ``check()`` raises ``LeaseLost`` once writing is no longer safe."""

    holder: LeaseHolder | None = None

    @abstractmethod
    def acquire(self, timeout: float = 0.0) -> LeaseHolder: ...

    @abstractmethod
    def release(self) -> None: ...

    @abstractmethod
    def check(self) -> None: ...

    @abstractmethod
    def current_holder(self) -> LeaseHolder | None:
        """Whoever holds the lease now, as seen from storage (may be another process)."""

    @property
    def epoch(self) -> int:
        if self.holder is None:
            raise LeaseLost("the lease is not held")
        return self.holder.epoch

    def __enter__(self) -> Lease:
        if self.holder is None:
            self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class LocalLease(Lease):
    """An exclusive ``flock`` on a file beside the table, for one machine.

    The operating system drops the lock when the holding process dies, so a
    crashed writer never blocks the next one. The file keeps the holder's
    details (and the last epoch) for the next holder and for operators.
    """

    def __init__(self, lock_path: str, table: str, job_id: str = "", api_address: str | None = None):
        self.lock_path = lock_path
        self.table = table
        self.job_id = job_id
        self.api_address = api_address
        self._fd: int | None = None
        self.holder = None

    def _read(self, fd: int) -> LeaseHolder | None:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 1 << 16)
        try:
            return LeaseHolder.model_validate_json(raw) if raw.strip() else None
        except ValueError:
            return None

    def current_holder(self) -> LeaseHolder | None:
        if self.holder is not None:
            return self.holder
        if not os.path.exists(self.lock_path):
            return None
        fd = os.open(self.lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return self._read(fd)
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def acquire(self, timeout: float = 0.0) -> LeaseHolder:
        os.makedirs(os.path.dirname(self.lock_path), exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = self._read(fd)
                    os.close(fd)
                    raise LeaseHeld(self.table, holder) from None
                time.sleep(0.1)
        previous = self._read(fd)
        self.holder = LeaseHolder(job_id=self.job_id, api_address=self.api_address, epoch=(previous.epoch if previous else 0) + 1)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, self.holder.model_dump_json().encode())
        os.fsync(fd)
        self._fd = fd
        return self.holder

    def check(self) -> None:
        if self._fd is None or self.holder is None:
            raise LeaseLost(f"the lease of {self.table} is not held")
        try:
            same_file = os.fstat(self._fd).st_ino == os.stat(self.lock_path).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:
            raise LeaseLost(f"the lease file {self.lock_path} was removed or replaced; another writer may hold {self.table}")

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
        self._fd = None
        self.holder = None


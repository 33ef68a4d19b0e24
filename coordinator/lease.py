"""Leases: one writer per table.

A lease names its holder and carries an epoch that grows with every new
holder. The coordinator checks the lease before every commit and stamps the
epoch into the instant, so a writer that lost its lease cannot commit.
"""

from __future__ import annotations

import fcntl
import logging
import os
import posixpath
import socket
import time
from abc import ABC, abstractmethod
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from laketide.table.errors import ErrorKind, LaketideError

log = logging.getLogger(__name__)


class LeaseHolder(BaseModel):
    host: str = Field(default_factory=socket.gethostname)
    pid: int = Field(default_factory=os.getpid)
    job_id: str = ""
    api_address: str | None = None
    acquired_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    epoch: int = 0

    def describe(self) -> str:
        api = f", API {self.api_address}" if self.api_address else ""
        return (
            f"{self.job_id or 'a writer'} on {self.host} (pid {self.pid}, epoch {self.epoch}{api}, since "
            f"{self.acquired_at})"
        )


class LeaseError(LaketideError, RuntimeError):
    """The lease cannot be taken or kept: its store (ZooKeeper, the lock file) cannot be reached or answered wrongly."""

    kind = ErrorKind.UNAVAILABLE


class LeaseHeld(LeaseError):
    """Another writer holds the lease."""

    kind = ErrorKind.CONFLICT

    def __init__(self, table: str, holder: LeaseHolder | None, way_out: str | None = None):
        self.holder = holder
        who = holder.describe() if holder else "another writer"
        super().__init__(f"table {table} is held by {who}" + (f"; {way_out}" if way_out else ""))


class LeaseLost(LeaseError):
    """This writer no longer holds the lease and must not commit."""

    kind = ErrorKind.LEASE_LOST


class Lease(ABC):
    """The lease of one table. ``check()`` raises ``LeaseLost`` once writing is no longer safe."""

    holder: LeaseHolder | None = None

    @abstractmethod
    def acquire(self, timeout: float = 0.0) -> LeaseHolder: ...

    @abstractmethod
    def release(self) -> None: ...

    @abstractmethod
    def check(self) -> LeaseHolder:
        """The holder this lease is held as; raises ``LeaseLost`` once writing is no longer safe."""

    @abstractmethod
    def announce(self, api_address: str) -> None:
        """Publish the holder's API address once its server listens."""

    @abstractmethod
    def current_holder(self) -> LeaseHolder | None:
        """Whoever holds the lease now, as seen from storage (may be another process)."""

    @abstractmethod
    def advance_epoch(self, floor: int) -> None:
        """Raise the held epoch to at least ``floor`` (the table saw a higher one: the counter was reset)."""

    def loss(self) -> LeaseLost:
        """Why the holding ended, as the error to stop the job with."""
        return LeaseLost(
            f"the lease of {getattr(self, 'table', 'the table')} was lost; the job stopped writing, and nothing "
            "uncommitted stays visible"
        )

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


def holder_seen_through(probe: Lease) -> LeaseHolder | None:
    """Who holds the lease ``probe`` names, asked through a lease made only to look, released after."""
    try:
        return probe.current_holder()
    finally:
        probe.release()


LOCAL_LEASE_FILE = ".hoodie/.laketide/lease"


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

    @classmethod
    def for_table(cls, table_uri: str, job_id: str = "", api_address: str | None = None) -> LocalLease:
        """The lease file every laketide process uses for a table on the local file system."""
        return cls(posixpath.join(table_uri, LOCAL_LEASE_FILE), table_uri, job_id=job_id, api_address=api_address)

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
        self.holder = LeaseHolder(
            job_id=self.job_id, api_address=self.api_address, epoch=(previous.epoch if previous else 0) + 1
        )
        self._fd = fd
        self._publish()
        return self.holder

    def _publish(self) -> None:
        fd, holder = self._fd, self.holder
        if fd is None or holder is None:
            raise LeaseLost(f"the lease of {self.table} is not held")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, holder.model_dump_json().encode())
        os.fsync(fd)

    def announce(self, api_address: str) -> None:
        held = self.check()
        self.api_address = api_address
        self.holder = held.model_copy(update={"api_address": api_address})
        self._publish()

    def advance_epoch(self, floor: int) -> None:
        held = self.check()
        if held.epoch < floor:
            self.holder = held.model_copy(update={"epoch": floor})
            self._publish()

    def check(self) -> LeaseHolder:
        if self._fd is None or self.holder is None:
            raise LeaseLost(f"the lease of {self.table} is not held")
        try:
            same_file = os.fstat(self._fd).st_ino == os.stat(self.lock_path).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:
            raise LeaseLost(
                f"the lease file {self.lock_path} was removed or replaced; another writer may hold {self.table}"
            )
        return self.holder

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
        self._fd = None
        self.holder = None

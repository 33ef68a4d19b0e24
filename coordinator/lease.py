"""Leases: one writer per table.

A lease names its holder and carries an epoch that grows with every new
holder. The coordinator checks the lease before every commit and stamps the
epoch into the instant, so a writer that lost its lease cannot commit.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import posixpath
import socket
import threading
import time
from abc import ABC, abstractmethod
from datetime import UTC, datetime
from urllib.parse import quote

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
    def check(self) -> None: ...

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
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        os.write(self._fd, self.holder.model_dump_json().encode())
        os.fsync(self._fd)

    def announce(self, api_address: str) -> None:
        self.check()
        self.api_address = api_address
        self.holder = self.holder.model_copy(update={"api_address": api_address})
        self._publish()

    def advance_epoch(self, floor: int) -> None:
        self.check()
        if self.holder.epoch < floor:
            self.holder = self.holder.model_copy(update={"epoch": floor})
            self._publish()

    def check(self) -> None:
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

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
        self._fd = None
        self.holder = None


class ZooKeeperLease(Lease):
    """One ephemeral znode per table under ``root``; its data names the holder.

    Taking the lease is one ZooKeeper transaction that creates the ephemeral
    node and bumps the table's persistent epoch counter, so every new holder
    has a higher epoch. The holder may commit only while its session is
    connected and the node is still its own.

    ZooKeeper weather is ridden out: while the connection is SUSPENDED (a
    server restart, a network blip, a leader election) ``check()`` waits for
    it to come back, up to the session timeout, and the holder goes on if its
    session survived. Only LOST (the session expired, so the ephemeral node is
    gone) ends the holding; ``on_lost`` then stops the job. A wait that runs
    out also ends it, since the session may have expired meanwhile.
    """

    def __init__(
        self,
        hosts: str,
        root: str,
        table: str,
        job_id: str = "",
        api_address: str | None = None,
        session_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        on_lost=None,
    ):
        from kazoo.client import KazooClient

        self.hosts = hosts
        self.table = table
        self.job_id = job_id
        self.api_address = api_address
        self.connect_timeout = connect_timeout
        self.session_timeout = session_timeout
        self.on_lost = on_lost
        self._connected = threading.Event()
        self._suspended_at = 0.0
        self.table_node = f"{root.rstrip('/')}/tables/{quote(table, safe='')}"
        self.lease_node = f"{self.table_node}/lease"
        self.epoch_node = f"{self.table_node}/epoch"
        self.holder = None
        self.state = "NEW"
        # Reconnection attempts back off to at most a second (kazoo's default goes up to a minute):
        # after a short outage the session must be found intact before the session timeout runs out.
        retry = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_jitter": 0.1, "max_delay": 1.0}
        self._client = KazooClient(hosts=hosts, timeout=session_timeout, connection_retry=retry)
        self._client.add_listener(self._on_state)

    def _on_state(self, state) -> None:
        from kazoo.client import KazooState

        previous, self.state = self.state, state if isinstance(state, str) else str(state)
        if state == KazooState.CONNECTED:
            self._connected.set()
            if previous == KazooState.SUSPENDED:
                log.warning(
                    "ZooKeeper connection back after %.1fs, session intact: commits to %s go on",
                    time.monotonic() - self._suspended_at,
                    self.table,
                )
            return
        self._connected.clear()
        if state == KazooState.LOST and self.holder is not None:
            log.error("ZooKeeper session expired: the lease of %s is gone; writing stops", self.table)
            if self.on_lost is not None:
                self.on_lost()
        elif state == KazooState.SUSPENDED:
            self._suspended_at = time.monotonic()
            log.warning(
                "ZooKeeper connection suspended: commits to %s wait up to %.0fs for it",
                self.table,
                self.session_timeout,
            )

    def _connect(self) -> None:
        from kazoo.handlers.threading import KazooTimeoutError

        if self._client.connected:
            return
        try:
            self._client.start(timeout=self.connect_timeout)
        except KazooTimeoutError:
            raise LeaseError(
                f"cannot reach ZooKeeper at {self.hosts} within {self.connect_timeout:.0f}s; "
                "coordinator.lease = 'zookeeper' never falls back to the local lease"
            ) from None
        self.state = "CONNECTED"
        self._connected.set()
        self._client.ensure_path(self.table_node)
        if self._client.exists(self.epoch_node) is None:
            from kazoo.exceptions import NodeExistsError

            with contextlib.suppress(NodeExistsError):
                self._client.create(self.epoch_node, b"0")

    def current_holder(self) -> LeaseHolder | None:
        from kazoo.exceptions import NoNodeError

        self._connect()
        try:
            data, _ = self._client.get(self.lease_node)
        except NoNodeError:
            return None
        return LeaseHolder.model_validate_json(data)

    def _try_take(self) -> LeaseHolder | None:
        from kazoo.exceptions import NodeExistsError, RolledBackError

        raw, stat = self._client.get(self.epoch_node)
        holder = LeaseHolder(job_id=self.job_id, api_address=self.api_address, epoch=int(raw or b"0") + 1)
        tx = self._client.transaction()
        tx.create(self.lease_node, holder.model_dump_json().encode(), ephemeral=True)
        tx.set_data(self.epoch_node, str(holder.epoch).encode(), version=stat.version)
        results = tx.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            return None
        if any(isinstance(r, (RolledBackError, Exception)) for r in results):
            return None  # another taker bumped the epoch first: look again
        return holder

    def acquire(self, timeout: float = 0.0) -> LeaseHolder:
        import threading

        self._connect()
        deadline = time.monotonic() + timeout
        while True:
            holder = self._try_take()
            if holder is not None:
                self.holder = holder
                return holder
            gone = threading.Event()
            if self._client.exists(self.lease_node, watch=lambda event, gone=gone: gone.set()) is None:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseHeld(self.table, self.current_holder())
            gone.wait(min(remaining, 1.0))

    def announce(self, api_address: str) -> None:
        self.check()
        self.api_address = api_address
        self.holder = self.holder.model_copy(update={"api_address": api_address})
        self._client.set(self.lease_node, self.holder.model_dump_json().encode())

    def advance_epoch(self, floor: int) -> None:
        self.check()
        raw, stat = self._client.get(self.epoch_node)
        if int(raw or b"0") < floor:
            # versioned: a concurrent change of the counter makes this fail rather than go backwards
            self._client.set(self.epoch_node, str(floor).encode(), version=stat.version)
        if self.holder.epoch < floor:
            self.holder = self.holder.model_copy(update={"epoch": floor})
            self._client.set(self.lease_node, self.holder.model_dump_json().encode())

    def check(self) -> None:
        from kazoo.exceptions import ConnectionLoss, SessionExpiredError

        deadline = time.monotonic() + self.session_timeout
        while True:
            if self.holder is None:
                raise LeaseLost(f"the lease of {self.table} is not held")
            if self.state == "LOST":
                raise LeaseLost(f"the ZooKeeper session for {self.table} expired; another writer may hold the lease")
            if not self._connected.wait(max(0.0, deadline - time.monotonic())):
                raise LeaseLost(
                    f"ZooKeeper was unreachable for the whole session timeout ({self.session_timeout:.0f}s); "
                    f"the session may have expired and another writer may hold {self.table}"
                )
            try:
                stat = self._client.exists(self.lease_node)
            except ConnectionLoss:
                continue  # suspended again between the wait and the read: wait again, within the same deadline
            except SessionExpiredError:
                raise LeaseLost(
                    f"the ZooKeeper session for {self.table} expired; another writer may hold the lease"
                ) from None
            if stat is None or stat.ephemeralOwner != self._client.client_id[0]:
                raise LeaseLost(
                    f"the lease node of {self.table} is no longer this writer's; another writer may hold it"
                )
            return

    def release(self) -> None:
        from kazoo.exceptions import KazooException

        if self.holder is not None and self._client.connected:
            try:
                stat = self._client.exists(self.lease_node)
                if stat is not None and stat.ephemeralOwner == self._client.client_id[0]:
                    self._client.delete(self.lease_node)
            except KazooException:
                pass
        self.holder = None
        self._client.stop()
        self._client.close()

"""The ZooKeeper lease: one ephemeral znode per table, an epoch counter bumped in the same transaction.

For tables whose writers share a ZooKeeper ensemble (``coordinator.lease = "zookeeper"``); ``lease.py`` has the
lease's contract and the local lease, ``storage_lease.py`` the lease object on an object store.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from typing import Any, cast
from urllib.parse import quote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from laketide.coordinator.lease import Lease, LeaseError, LeaseHeld, LeaseHolder, LeaseLost

log = logging.getLogger(__name__)


# Reconnection attempts back off to at most a second (kazoo's default goes up to a minute): after a short outage
# the session must be found intact before the session timeout runs out.
RECONNECT = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_jitter": 0.1, "max_delay": 1.0}


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
        client: KazooClient,
        root: str,
        table: str,
        job_id: str = "",
        api_address: str | None = None,
        session_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        on_lost=None,
    ):
        """``client``: not started yet (``acquire`` starts it, ``release`` stops it), made with ``session_timeout``
        as its timeout; ``connect_to`` makes both."""
        self.hosts = ",".join(f"{host}:{port}" for host, port in client.hosts or ())
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
        self._client = client
        self._client.add_listener(self._on_state)

    @classmethod
    def connect_to(cls, hosts: str, root: str, table: str, session_timeout: float = 10.0, **settings) -> ZooKeeperLease:
        """The lease of ``table`` on the ensemble at ``hosts`` (``host:port,...``), through a client of its own."""
        client = KazooClient(hosts=hosts, timeout=session_timeout, connection_retry=RECONNECT)
        return cls(client, root, table, session_timeout=session_timeout, **settings)

    def _on_state(self, state) -> None:
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
        if self._client.connected:
            return
        try:
            self._client.start(timeout=math.ceil(self.connect_timeout))  # whole seconds, as kazoo takes them
        except KazooTimeoutError:
            raise LeaseError(
                f"cannot reach ZooKeeper at {self.hosts} within {self.connect_timeout:.0f}s; "
                "coordinator.lease = 'zookeeper' never falls back to the local lease"
            ) from None
        self.state = "CONNECTED"
        self._connected.set()
        self._client.ensure_path(self.table_node)
        if self._client.exists(self.epoch_node) is None:
            with contextlib.suppress(NodeExistsError):
                self._client.create(self.epoch_node, b"0")

    def current_holder(self) -> LeaseHolder | None:
        self._connect()
        try:
            data, _ = self._get(self.lease_node)
        except NoNodeError:
            return None
        return LeaseHolder.model_validate_json(data)

    def _try_take(self) -> LeaseHolder | None:
        raw, stat = self._get(self.epoch_node)
        holder = LeaseHolder(job_id=self.job_id, api_address=self.api_address, epoch=int(raw or b"0") + 1)
        tx = self._client.transaction()
        tx.create(self.lease_node, holder.model_dump_json().encode(), ephemeral=True)
        tx.set_data(self.epoch_node, str(holder.epoch).encode(), version=stat.version)
        results = tx.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            return None
        if any(isinstance(r, Exception) for r in results):
            # another taker bumped the epoch first (a BadVersionError, the rest rolled back): look again
            return None
        return holder

    def acquire(self, timeout: float = 0.0) -> LeaseHolder:
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
        held = self.check()
        self.api_address = api_address
        self.holder = held.model_copy(update={"api_address": api_address})
        self._client.set(self.lease_node, self.holder.model_dump_json().encode())

    def advance_epoch(self, floor: int) -> None:
        held = self.check()
        raw, stat = self._get(self.epoch_node)
        if int(raw or b"0") < floor:
            # versioned: a concurrent change of the counter makes this fail rather than go backwards
            self._client.set(self.epoch_node, str(floor).encode(), version=stat.version)
        if held.epoch < floor:
            self.holder = held.model_copy(update={"epoch": floor})
            self._client.set(self.lease_node, self.holder.model_dump_json().encode())

    def _get(self, path: str) -> tuple[bytes, Any]:
        """A node's data and stat: kazoo's ``get``, whose result its code leaves untyped."""
        return cast("tuple[bytes, Any]", self._client.get(path))

    def _owns(self, stat: Any) -> bool:
        """Whether a node's ``stat`` (``None``: no node) says this session owns it."""
        session = self._client.client_id
        return stat is not None and session is not None and stat.ephemeralOwner == session[0]

    def check(self) -> LeaseHolder:
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
            if not self._owns(stat):
                raise LeaseLost(
                    f"the lease node of {self.table} is no longer this writer's; another writer may hold it"
                )
            return self.holder

    def release(self) -> None:
        if self.holder is not None and self._client.connected:
            try:
                stat = self._client.exists(self.lease_node)
                if self._owns(stat):
                    self._client.delete(self.lease_node)
            except KazooException:
                pass
        self.holder = None
        self._client.stop()
        self._client.close()

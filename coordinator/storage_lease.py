"""A lease kept in the table's own object store: no lock service needed (``coordinator.lease = "storage"``).

As Apache Hudi's ``StorageBasedLockProvider`` (RFC-91) does, the lease is one object,
``.hoodie/.laketide/lease.json``, naming the holder, its epoch and when it expires:
- it is taken with a create-if-absent PUT, or, once expired, with a PUT conditioned on the ETag the
  taker read, so of two takers exactly one wins; each new holder takes the next epoch;
- the holder renews it every ``ttl / 3`` with a PUT conditioned on its own last ETag, in a heartbeat
  thread; a renewal that finds another version means the lease was taken over;
- release writes it expired, so the next writer takes it at once.

A store that ignores the conditions (some S3-compatible servers do) would let two takers both win, so
the first ``acquire`` of a lease proves both on a scratch object (``probe_conditional_writes``) and a
store that fails is refused, naming what it lacks and the way out.

Clocks: expiry is a wall-clock time that the holder writes and any taker compares with its own
clock, so the hosts' clocks must agree to well within ``ttl / 3`` (NTP gives milliseconds). The
holder stops counting itself the holder ``ttl / 3`` before the expiry it wrote: a heartbeat that is
late (the store slow, the process paused) costs the holding, never a second holder. A holder paused
past its expiry and taken over is stopped by the commit fence (``coordinator.fence``): the new holder
has the next epoch, and nothing of the old one completes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable

from laketide.coordinator.lease import Lease, LeaseHeld, LeaseHolder, LeaseLost
from laketide.table.errors import ErrorKind, Invalid, first_line
from laketide.table.storage.io import FileIO
from laketide.table.storage.object_io import ObjectStoreFileIO

log = logging.getLogger(__name__)
LEASE_OBJECT = ".hoodie/.laketide/lease.json"
PROBE_DIR = ".hoodie/.laketide/probe"


CREATE_IF_ABSENT = "create-if-absent (a PUT with If-None-Match: *)"


def probe_conditional_writes(io: ObjectStoreFileIO, replace: bool = True) -> None:
    """Raise ``Invalid`` unless the store honours a create-if-absent PUT (If-None-Match: *), which the commit fence
    needs under every lease, and (``replace``, for the storage lease) a PUT on a stale ETag (If-Match): a second
    create and a stale replace of one scratch object must both fail. The scratch object is deleted after."""
    path = f"{PROBE_DIR}/{uuid.uuid4().hex}"
    lacks = []
    try:
        if io.create_versioned(path, b"first") is None:
            raise Invalid(
                f"the object store of {io.base_path} did not create the new object {path}; check the table's "
                "path and credentials"
            )
        if io.create_versioned(path, b"second") is not None:
            lacks.append(CREATE_IF_ABSENT)
        if replace:
            found = io.read_versioned(path)
            current = found[1] if found is not None else ""
            if io.replace_versioned(path, b"third", current) is None:
                lacks.append("replace-if-match (a PUT with If-Match on the current ETag failed)")
            elif io.replace_versioned(path, b"fourth", current) is not None:
                lacks.append("replace-if-match (a PUT with If-Match on a stale ETag succeeded)")
    finally:
        io.delete(path)
    if not lacks:
        return
    lacking = f"the object store of {io.base_path} does not honour conditional writes: it lacks {' and '.join(lacks)}."
    if lacks[0] is CREATE_IF_ABSENT:
        raise Invalid(
            f"{lacking} The commit fence needs create-if-absent under every lease (a paused writer must never "
            "complete an instant after a takeover), so no laketide table can live on this store: use a store "
            "that honours them (AWS S3, MinIO, Azure Blob, GCS), or a local or NFS path. Nothing was written."
        )
    raise Invalid(
        f"{lacking} The storage lease needs it to keep one writer per table; on this store use coordinator.lease = "
        "'zookeeper' (with coordinator.zookeeper), whose commit fence needs create-if-absent only. Nothing was written."
    )


class StorageLease(Lease):
    """The lease object of one table on an object store; ``on_lost`` is called (once) when the holding ends."""

    def __init__(
        self,
        io: FileIO,
        job_id: str = "",
        api_address: str | None = None,
        ttl: float = 30.0,
        on_lost: Callable[[], None] | None = None,
        probe: bool = True,
    ):
        """``probe``: prove the store's conditional writes before the first take (``probe_conditional_writes``);
        ``False`` when the caller has just done so."""
        if not isinstance(io, ObjectStoreFileIO):
            raise Invalid(
                "coordinator.lease = 'storage' needs a table on an object store (s3://, gs://, az://); "
                f"{io.base_path} is not. Use 'local' or 'zookeeper'."
            )
        self.io = io
        self.table = io.base_path
        self.job_id = job_id
        self.api_address = api_address
        self.ttl = ttl
        self._on_lost = on_lost or (lambda: None)
        self._e_tag: str | None = None
        self._valid_until = 0.0  # wall clock: past this, this process no longer counts itself the holder
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards the ETag and validity between the heartbeat and the caller
        self._heartbeat: threading.Thread | None = None
        self._probed = not probe  # the store's conditional writes, proven once by the first acquire
        self._unreachable: str | None = None  # why the heartbeat could not renew, when the store was what failed
        self.holder = None

    # -- reading ---------------------------------------------------------

    def _read(self) -> tuple[dict | None, str | None]:
        found = self.io.read_versioned(LEASE_OBJECT)
        if found is None:
            return None, None
        body, e_tag = found
        try:
            return json.loads(body), e_tag
        except ValueError:
            return {"expires_at": 0, "holder": None}, e_tag  # unreadable: treated as expired, and replaced

    def current_holder(self) -> LeaseHolder | None:
        if self.holder is not None and not self._lost.is_set():
            return self.holder
        state, _ = self._read()
        if state is None or state.get("holder") is None or state["expires_at"] <= time.time():
            return None
        return LeaseHolder.model_validate(state["holder"])

    # -- taking and keeping ---------------------------------------------

    def acquire(self, timeout: float = 0.0) -> LeaseHolder:
        if not self._probed:
            probe_conditional_writes(self.io)
            self._probed = True
        deadline = time.monotonic() + timeout
        while True:
            state, e_tag = self._read()
            if state is None or state["expires_at"] <= time.time():
                if self._take(state, e_tag):
                    return self.check()
                continue  # another taker won the race: read again
            if time.monotonic() >= deadline:
                raise LeaseHeld(
                    self.table, LeaseHolder.model_validate(state["holder"]) if state.get("holder") else None
                )
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))

    def _take(self, state: dict | None, e_tag: str | None) -> bool:
        previous = state["holder"]["epoch"] if state and state.get("holder") else 0
        holder = LeaseHolder(job_id=self.job_id, api_address=self.api_address, epoch=previous + 1)
        expires = time.time() + self.ttl
        body = self._body(holder, expires)
        new_tag = (
            self.io.create_versioned(LEASE_OBJECT, body)
            if e_tag is None
            else self.io.replace_versioned(LEASE_OBJECT, body, e_tag)
        )
        if new_tag is None:
            return False
        with self._lock:
            self.holder, self._e_tag, self._valid_until = holder, new_tag, expires - self.ttl / 3
        self._lost.clear()
        self._stop.clear()
        self._heartbeat = threading.Thread(target=self._beat, name="laketide-lease-heartbeat", daemon=True)
        self._heartbeat.start()
        log.info("lease object %s/%s taken at epoch %d", self.table, LEASE_OBJECT, holder.epoch)
        return True

    def _body(self, holder: LeaseHolder, expires: float) -> bytes:
        return json.dumps({"holder": holder.model_dump(), "expires_at": expires}).encode()

    def _renew(self) -> bool:
        """One conditional renewal; ``False`` when the object is another holder's now."""
        with self._lock:
            holder, e_tag = self.holder, self._e_tag
        if holder is None or e_tag is None:
            return False
        expires = time.time() + self.ttl
        new_tag = self.io.replace_versioned(LEASE_OBJECT, self._body(holder, expires), e_tag)
        if new_tag is None:
            return False
        with self._lock:
            self._e_tag, self._valid_until = new_tag, expires - self.ttl / 3
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if self._renew():
                    continue
                log.error("the lease of %s was taken over by another writer", self.table)
            except Exception as error:  # the store unreachable: keep trying until the holding runs out
                log.warning("renewing the lease of %s failed; retrying", self.table, exc_info=True)
                if time.time() < self._valid_until:
                    continue
                self._unreachable = f"{type(error).__name__}: {first_line(error)}"
                log.error("the lease of %s could not be renewed before it ran out", self.table)
            self._lose()
            return

    def _lose(self) -> None:
        if not self._lost.is_set():
            self._lost.set()
            self._on_lost()

    def check(self) -> LeaseHolder:
        if self.holder is None:
            raise LeaseLost(f"the lease of {self.table} is not held")
        if self._lost.is_set() or time.time() >= self._valid_until:
            self._lose()
            raise self.loss()
        return self.holder

    def loss(self) -> LeaseLost:
        if self._unreachable is not None:
            return LeaseLost(
                f"the object store of {self.table} could not be reached to renew the lease within {self.ttl:.0f}s "
                f"({self._unreachable}); the job stopped writing, and nothing uncommitted stays visible. Check "
                "that the store "
                "is reachable and its credentials valid; the next run recovers",
                kind=ErrorKind.UNAVAILABLE,
            )
        return LeaseLost(f"the lease of {self.table} ran out or was taken over; this writer must not commit")

    def announce(self, api_address: str) -> None:
        held = self.check()
        self.api_address = api_address
        with self._lock:
            self.holder = held.model_copy(update={"api_address": api_address})
        if not self._renew():
            raise LeaseLost(f"the lease of {self.table} was taken over")

    def advance_epoch(self, floor: int) -> None:
        held = self.check()
        if held.epoch < floor:
            with self._lock:
                self.holder = held.model_copy(update={"epoch": floor})
            if not self._renew():
                raise LeaseLost(f"the lease of {self.table} was taken over")

    def release(self) -> None:
        """Stop the heartbeat and write the lease expired (if it is still this holder's), so the next writer takes it
        at once."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=self.ttl)
        with self._lock:
            holder, e_tag = self.holder, self._e_tag
            self.holder, self._e_tag = None, None
        if holder is not None and e_tag is not None and not self._lost.is_set():
            try:
                self.io.replace_versioned(LEASE_OBJECT, self._body(holder, 0), e_tag)
            except Exception:  # it expires on its own
                log.warning(
                    "could not release the lease of %s; it expires in %.0fs", self.table, self.ttl, exc_info=True
                )

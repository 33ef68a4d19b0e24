"""Which lease a table's writers take, recorded once in the table.

Two writers that take different leases (one ZooKeeper's, one the table's lock file or lease object) both
"hold" the table. So the first writer records its choice (``LEASE_CHOICE``: the kind, and for ZooKeeper its
connect string and root) and every later writer, CLI command and API server takes the same lease: the CLI
without ``--zookeeper`` on a table recorded for ZooKeeper uses the recorded one, and a job or command whose
settings name another lease is refused, naming the recorded one and the way out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal, get_args

from laketide.table.errors import Invalid
from laketide.table.storage.io import FileIO, InstantFileExists

LEASE_CHOICE = ".hoodie/.laketide/lease-choice.json"


class LeaseMismatch(Invalid):
    """The lease asked for is not the one the table's writers take (exit code 2)."""


LeaseKind = Literal["local", "storage", "zookeeper"]


@dataclass(frozen=True)
class LeaseChoice:
    kind: LeaseKind
    zookeeper: str | None = None  # the connect string, for "zookeeper"
    root: str | None = None  # the root path of laketide's nodes, for "zookeeper"

    def describe(self) -> str:
        if self.kind == "zookeeper":
            return f"the ZooKeeper lease at {self.zookeeper} (root {self.root})"
        return {
            "local": "the local lease (a lock file beside the table)",
            "storage": "the storage lease (a lease object in the table)",
        }[self.kind]

    def settings(self) -> str:
        if self.kind == "zookeeper":
            return (
                f"coordinator.lease = 'zookeeper', coordinator.zookeeper = '{self.zookeeper}', "
                f"coordinator.zookeeper_root = '{self.root}'"
            )
        return f"coordinator.lease = '{self.kind}'"

    @classmethod
    def read(cls, io: FileIO) -> LeaseChoice | None:
        try:
            data = json.loads(io.read_bytes(LEASE_CHOICE))
        except FileNotFoundError:
            return None
        except ValueError:
            raise Invalid(
                f"{io.full_path(LEASE_CHOICE)} is not the JSON laketide writes; with no writer running, delete it "
                "and the next writer records its lease again"
            ) from None
        kind = data.get("kind")
        if kind not in get_args(LeaseKind):
            raise Invalid(
                f"{io.full_path(LEASE_CHOICE)} names the lease {kind!r}, which laketide does not know; with no writer "
                "running, delete it and the next writer records its lease again"
            )
        return cls(kind, data.get("zookeeper"), data.get("root"))

    def record(self, io: FileIO) -> None:
        """Record this choice unless one is recorded: the first writer's wins, and a later one must agree."""
        try:
            io.write_atomic(LEASE_CHOICE, json.dumps(asdict(self)).encode())
        except InstantFileExists:
            self.agree(LeaseChoice.read(io), io)

    def agree(self, recorded: LeaseChoice | None, io: FileIO) -> None:
        """Raise ``LeaseMismatch`` unless ``recorded`` (if any) is this choice."""
        if recorded is None or recorded == self:
            return
        raise LeaseMismatch(
            f"the writers of {io.full_path('')} take {recorded.describe()} (recorded in {LEASE_CHOICE}), but "
            "this asks for "
            f"{self.describe()}: two leases would let two writers hold the table. Set {recorded.settings()}; to "
            "change the table's "
            f"lease, stop every writer and delete {io.full_path(LEASE_CHOICE)}"
        )

"""What several commands take: the table, its lease, the running job's API, ``--json``."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Annotated

import typer

from laketide.service import TOKEN_ENV

# the root's ``--storage-option`` pairs, set once per invocation before its command runs
STORAGE_OPTIONS: ContextVar[Mapping[str, str]] = ContextVar("storage_options", default=MappingProxyType({}))
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
ZkOpt = Annotated[str | None, typer.Option("--zookeeper", help="ZooKeeper hosts, when the table's lease lives there")]
ZkRootOpt = Annotated[str, typer.Option("--zookeeper-root", help="ZooKeeper root of laketide's leases")]
ApiOpt = Annotated[str | None, typer.Option("--api", help="the running job's API (default: the lease holder's)")]
TokenOpt = Annotated[str | None, typer.Option(help=f"API bearer token (default: ${TOKEN_ENV})")]
TableArg = Annotated[str, typer.Argument(help="table path or URI")]


def lease_for(table, zookeeper: str | None, zookeeper_root: str, job_id: str = "laketide-ops"):
    """The table's lease where it lives: the one its writers recorded (``coordinator.lease_choice``); else
    ZooKeeper when hosts are given, the lease object of a table on an object store, or the table's lock file.
    ``--zookeeper`` that disagrees with the recorded lease is refused."""
    from laketide.coordinator import LocalLease, ZooKeeperLease
    from laketide.coordinator.lease_choice import LeaseChoice
    from laketide.coordinator.storage_lease import StorageLease

    recorded = LeaseChoice.read(table.io)
    if recorded is not None:
        if zookeeper:
            LeaseChoice("zookeeper", zookeeper, zookeeper_root).agree(recorded, table.io)
        elif recorded.kind == "zookeeper":
            zookeeper, zookeeper_root = recorded.zookeeper, recorded.root or zookeeper_root
    if zookeeper:
        return ZooKeeperLease.connect_to(zookeeper, zookeeper_root, table.uri, job_id=job_id, connect_timeout=10.0)
    if not table.io.is_local:
        return StorageLease(table.io, job_id=job_id)
    return LocalLease.for_table(table.uri, job_id=job_id)


def current_holder(table, zookeeper: str | None, zookeeper_root: str):
    from laketide.coordinator.lease import holder_seen_through

    return holder_seen_through(lease_for(table, zookeeper, zookeeper_root))


def storage_pairs(pairs: list[str]) -> dict[str, str]:
    """``--storage-option KEY=VALUE`` pairs as a dict."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(
                f"{pair!r} is not KEY=VALUE, e.g. --storage-option aws_region=eu-west-1", param_hint="--storage-option"
            )
        options[key.strip()] = value
    return options


def open_table(path: str):
    """The table at ``path``, its store reached with the ``--storage-option`` pairs of this invocation."""
    from laketide.table import FileIO, Table

    return Table.open(path, FileIO.for_uri(path, STORAGE_OPTIONS.get()))

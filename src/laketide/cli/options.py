"""What several commands take: the table, its lease, the running job's API, ``--json``."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from laketide.service import TOKEN_ENV

JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
ZkOpt = Annotated[Optional[str], typer.Option("--zookeeper", help="ZooKeeper hosts, when the table's lease lives there")]
ZkRootOpt = Annotated[str, typer.Option("--zookeeper-root", help="ZooKeeper root of laketide's leases")]
ApiOpt = Annotated[Optional[str], typer.Option("--api", help="the running job's API (default: the lease holder's)")]
TokenOpt = Annotated[Optional[str], typer.Option(help=f"API bearer token (default: ${TOKEN_ENV})")]
TableArg = Annotated[str, typer.Argument(help="table path or URI")]


def lease_for(table, zookeeper: str | None, zookeeper_root: str, job_id: str = "laketide-ops"):
    """The table's lease where it lives: ZooKeeper when hosts are given, else the lease object of a table
    on an object store, else the table's lock file."""
    from laketide.coordinator import LocalLease, ZooKeeperLease
    from laketide.coordinator.storage_lease import StorageLease

    if zookeeper:
        return ZooKeeperLease(zookeeper, zookeeper_root, table.uri, job_id=job_id, connect_timeout=10.0)
    if not table.io.is_local:
        return StorageLease(table.io, job_id=job_id)
    return LocalLease.for_table(table.uri, job_id=job_id)


def current_holder(table, zookeeper: str | None, zookeeper_root: str):
    probe = lease_for(table, zookeeper, zookeeper_root)
    try:
        return probe.current_holder()
    finally:
        probe.release()


def open_table(path: str):
    from laketide.table import Table

    return Table.open(path)

"""Writing test tables through the product: ``BatchWriter``, the core the streaming job and ``laketide.write``
share (state index, blooms, markers, fence), on a coordinator the test chooses."""

from __future__ import annotations

import pyarrow as pa
from readback import hudi_read, rows

from laketide.config import JobConfig
from laketide.coordinator import Coordinator, LocalLease
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.writer.batch_writer import BatchWriter
from laketide.writer.job.session import quarantine_path
from laketide.writer.micro_batch import LoadedBatch, StagedWrite


def batch_writer(table: Table, coordinator: Coordinator, **write) -> BatchWriter:
    config = JobConfig.model_validate(
        {
            "table": {"path": table.uri, "record_key": table.config.record_key_fields},
            "write": {"index_shards": 2, "parallelism": 2, **write},
        }
    )
    index = StateIndex.open(
        table.io, config.write.index_shards, config.global_index(bool(table.config.partition_fields))
    )
    return BatchWriter(config, table, coordinator, index, quarantine_path(config))


def _loaded(writer: BatchWriter, records: list[dict], schema: pa.Schema) -> LoadedBatch:
    data = pa.Table.from_pylist(records, schema=schema)
    return LoadedBatch(writer.driver_batch(data), data.schema, data.schema)


def stage(
    table: Table, coordinator: Coordinator, batch_id: int, records: list[dict], schema: pa.Schema, **write
) -> StagedWrite | None:
    """One micro-batch begun and written, its files marked, not committed: as a writer leaves it that dies before its
    commit."""
    writer = batch_writer(table, coordinator, **write)
    try:
        return writer.stage(batch_id, _loaded(writer, records, schema))
    finally:
        writer.close()


def upsert(
    table: Table,
    coordinator: Coordinator,
    batch_id: int,
    records: list[dict],
    schema: pa.Schema,
    commit: bool = True,
    **write,
) -> str | None:
    """One micro-batch through begin, the stages and commit (``write``: settings of the write section). Returns
    the instant, or None on replay."""
    if not commit:
        staged = stage(table, coordinator, batch_id, records, schema, **write)
        return staged.instant if staged else None
    writer = batch_writer(table, coordinator, **write)
    try:
        report = writer.run(batch_id, lambda: _loaded(writer, records, schema))
    finally:
        writer.close()
    return report.instant


# the orders ``laketide.write`` is given in its tests: a table of both partition and ordering fields, with deletes
ORDERS_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("ts", pa.int64()),
        ("region", pa.string()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)
# the table settings a new orders table takes
NEW_ORDERS = {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "name": "orders"}


def orders(lines: list[dict]) -> pa.Table:
    """Order rows (``streaming.row``'s) as Arrow, deletes marked false unless a line says otherwise."""
    return pa.Table.from_pylist([{"_hoodie_is_deleted": False, **line} for line in lines], ORDERS_SCHEMA)


HISTORY_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string())])


def history(path, width: int, version: int = 6):
    """Three commits of ``width`` rows each (keys overlap), then a dangling instant; the lease free again; a table of
    ``version``.

    Returns (table, instants, hudi-rs rows after each commit, dangling instant).
    """
    table = Table.create(str(path), "t", ["id"], ["region"], "v", version=version)
    lease = LocalLease.for_table(table.uri, job_id="writer")
    lease.acquire()
    coordinator = Coordinator(table, lease, "w")
    instants, states = [], []
    for n in range(3):
        records = [{"id": i, "v": n, "region": "us" if i % 2 else "eu"} for i in range(n, n + width)]
        instants.append(upsert(table, coordinator, n, records, HISTORY_SCHEMA))
        states.append(rows(hudi_read(table.uri), "id", ["id", "v", "region"]))
    dangling = upsert(table, coordinator, 9, [{"id": 77, "v": 9, "region": "us"}], HISTORY_SCHEMA, commit=False)
    lease.release()
    return table, instants, states, dangling


def state_at(path, as_of=None) -> list[dict]:
    """The rows hudi-rs reads of ``path`` (``as_of`` an instant), sorted by key."""
    return rows(hudi_read(path, as_of=as_of), "id", ["id", "v", "region"])


def rewritten_history(path, commits: int = 6):
    """``commits`` commits that each update every key (so every file group gets a new version each time).

    Returns (table, coordinator, the lease held, instants, hudi-rs rows as of each instant).
    """
    table = Table.create(str(path), "t", ["id"], ["region"], "v")
    lease = LocalLease.for_table(table.uri, job_id="writer")
    lease.acquire()
    coordinator = Coordinator(table, lease, "w")
    instants = [
        upsert(
            table,
            coordinator,
            n,
            [{"id": i, "v": n, "region": ("us", "eu")[i % 2]} for i in range(6 + n)],
            HISTORY_SCHEMA,
        )
        for n in range(commits)
    ]
    reads = {t: state_at(path, as_of=t) for t in instants}
    return table, coordinator, lease, instants, reads


def base_files(table: Table) -> set[str]:
    """The paths of every base file of ``table``."""
    return {e.path for e in table.io.walk() if e.name.endswith(".parquet") and not e.path.startswith(".hoodie")}

"""``laketide.write``: upsert a table from Python, without Spark, as delta-rs's ``write_deltalake`` does.

One call is one instant, written the way the streaming job writes a micro-batch the driver holds: the
same state index and bloom filters find each key's file group, the same markers, fence and lease guard
the commit, and the same table services (cleaning, compaction, archival, the Delta mirror) run after
it. A later streaming job on the table finds these keys through the index, so its changes update them.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import pyarrow as pa
from obstore.exceptions import BaseError as ObstoreError

from laketide.config import ConfigError, JobConfig
from laketide.config.routes import refuse_database_job
from laketide.table import FileIO, Table, TableNotFound
from laketide.table.errors import Invalid
from laketide.table.storage.store_requests import store_failure
from laketide.writer.job.session import JobParts, WriterSession, check_table, quarantine_path
from laketide.writer.micro_batch import LoadedBatch
from laketide.writer.preflight import check_quarantine_path
from laketide.writer.report import BatchReport

log = logging.getLogger("laketide.write")
WRITER_ID = "laketide-write"


def write(
    table_uri: str,
    data: Any,
    *,
    operation: Literal["upsert", "insert", "bulk_insert"] = "upsert",
    record_key: str | list[str] | None = None,
    partition_by: str | list[str] | None = None,
    ordering_field: str | None = None,
    table_type: Literal["COPY_ON_WRITE", "MERGE_ON_READ"] | None = None,
    name: str | None = None,
    settings: dict[str, Any] | None = None,
    writer_id: str = WRITER_ID,
) -> BatchReport:
    """Write ``data`` (a pyarrow Table or RecordBatchReader, a Polars or pandas DataFrame) into the Hudi
    table at ``table_uri`` as one instant, creating the table on first write.

    ``record_key``, ``partition_by``, ``ordering_field``, ``table_type`` and ``name`` describe a new table;
    an existing table's own settings win, and a job setting that disagrees is refused. ``settings`` takes
    any other section of the job's configuration, as in the TOML file (``{"write": {...}, "coordinator":
    {"lease": "zookeeper", ...}, "clean": {...}}``). ``writer_id`` names the writer in each commit; writes
    under one id are numbered one after another.

    Takes the table's lease (waiting ``coordinator.lease_wait`` seconds for a job that holds it) and
    returns what the write did (``BatchReport``: inserts, updates, deletes, late and quarantined rows).
    Raises a ``LaketideError``: ``Invalid`` for bad settings or data, ``Conflict`` when the lease stays held.
    """
    try:
        return _write(
            data, table_uri, operation, record_key, partition_by, ordering_field, table_type, name, settings, writer_id
        )
    except ObstoreError as error:  # what the store failed that no step told apart: still one of laketide's errors
        raise store_failure(error, table_uri) from error


def _write(
    data,
    table_uri: str,
    operation,
    record_key,
    partition_by,
    ordering_field,
    table_type,
    name,
    settings,
    writer_id: str,
) -> BatchReport:
    rows = _arrow(data)
    config = _config(table_uri, operation, record_key, partition_by, ordering_field, table_type, name, settings)
    refuse_database_job(config)
    opened = check_table(config)  # the table first: a store or bucket that is wrong is named by the table's path
    check_quarantine_path(quarantine_path(config), config.storage.io_options)
    session = WriterSession(
        config,
        writer_id,
        job_id=f"{writer_id}-api",
        opened=opened,
        source=rows.schema,
        parts=JobParts(streaming=False),
    )
    with session as job:
        batch_id = job.coordinator.committed_batches().get(writer_id, -1) + 1
        writer = job.writer
        report = writer.write(
            batch_id, lambda: LoadedBatch(writer.driver_batch(rows), _in_utc(rows.schema), rows.schema)
        )
        writer.announce(report)
        job.finish(ended_by_itself=True)
        return report


def _config(
    table_uri: str, operation: str, record_key, partition_by, ordering_field, table_type, name, settings: dict | None
) -> JobConfig:
    sections = dict(settings or {})
    table = {"path": table_uri, **sections.pop("table", {})}
    for key, value in (
        ("record_key", record_key),
        ("partition_by", partition_by),
        ("ordering_field", ordering_field),
        ("type", table_type),
        ("name", name),
    ):
        if value is not None:
            table[key] = [value] if key in ("record_key", "partition_by") and isinstance(value, str) else value
    if "record_key" not in table:
        table = {**_settings_of_existing(table_uri, sections.get("storage", {}).get("options")), **table}
    given = sections.get("write", {}).get("operation", operation)
    if given != operation:
        raise Invalid(
            f"laketide.write settings: write.operation = '{given}' is not this call's operation ('{operation}'): "
            "pass it as operation= (upsert, insert, bulk_insert); a delete_partition runs through the job or the CLI"
        )
    sections["write"] = {**sections.get("write", {}), "operation": operation}
    try:
        return JobConfig.model_validate({"table": table, **sections})
    except ValueError as exc:
        raise ConfigError(f"laketide.write settings: {exc}") from None


def _settings_of_existing(table_uri: str, options: dict[str, str] | None) -> dict[str, Any]:
    """An existing table's own settings, so that writing to it needs none; a new table needs its record key."""
    try:
        existing = Table.open(table_uri, FileIO.for_uri(table_uri, options)).config
    except TableNotFound:
        raise Invalid(
            f"no table at {table_uri} yet: laketide.write needs record_key (the column or columns that identify "
            "a record) to create it"
        ) from None
    return {
        "record_key": existing.record_key_fields,
        "partition_by": existing.partition_fields,
        "ordering_field": existing.ordering_field,
        "name": existing.name,
    }


def _arrow(data: Any) -> pa.Table:
    """The rows as one Arrow table: Arrow as it is, Polars through ``to_arrow``, pandas without its index."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "to_arrow"):  # Polars, DuckDB relations
        return data.to_arrow()
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    raise Invalid(
        "laketide.write takes a pyarrow Table or RecordBatchReader, a Polars or a pandas DataFrame, not "
        f"{type(data).__name__}"
    )


def _in_utc(schema: pa.Schema) -> pa.Schema:
    """The schema the table's evolves by: a timestamp with a zone is an instant, kept in UTC as Spark keeps it."""
    fields = [
        f.with_type(pa.timestamp(f.type.unit, tz="UTC")) if pa.types.is_timestamp(f.type) and f.type.tz else f
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)

"""Checks a job passes before it writes anything: the table, the job's settings, the source schema.

``table_config_for`` either returns the table settings the job will write
with, or raises ``JobRefused`` naming the table property or config key and
what is supported. It only reads: a refused job leaves the table, the
checkpoint and the lease untouched.
"""

from __future__ import annotations

import logging
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.config import TableSection
from laketide.table.errors import Invalid
from laketide.table.format.metadata_table import metadata_partitions
from laketide.table.format.properties import (
    EVENT_TIME,
    MERGE_STRATEGY_ID,
    TableConfig,
    default_merge_mode,
)
from laketide.table.format.schema import (
    IS_DELETED,
    META_COLUMNS,
    RECORD_KEY,
    SchemaError,
    check_avro_names,
    evolve,
    storage_schema,
)
from laketide.table.format.timeline import WRITTEN_VERSIONS
from laketide.table.format.view import FileSystemView
from laketide.table.storage.io import FileIO
from laketide.table.table import Table

log = logging.getLogger(__name__)

SUPPORTED_KEY_GENERATORS = {
    "org.apache.hudi.keygen.SimpleKeyGenerator",
    "org.apache.hudi.keygen.ComplexKeyGenerator",
    "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
}


class JobRefused(Invalid):
    """The job cannot write this table with this configuration; nothing was written."""


def check_quarantine_path(path: str, options: dict[str, str] | None = None) -> None:
    """``write.quarantine_path`` must be a directory the job can create and write in.

    Found at start rather than at the first bad row, mid-batch: the probe file
    written and deleted here is the only thing a refused job leaves (with the
    directory, when it had to create it).
    """
    _check_writable_folder(
        "write.quarantine_path", path, options, "rows that cannot be written go there, so the job needs it"
    )


def check_exchange_dir(path: str | None, options: dict[str, str] | None = None) -> None:
    """``write.exchange_dir``, when set, must be a directory the job can create and write in: found at start
    rather than at the first micro-batch Spark's tasks write. Unset, it is under the table."""
    if path is not None:
        _check_writable_folder("write.exchange_dir", path, options, "Spark's tasks hand a micro-batch's rows on there")


def _check_writable_folder(setting: str, path: str, options: dict[str, str] | None, why: str) -> None:
    try:
        io = FileIO.for_uri(path, options)
        if io.is_file(""):
            raise JobRefused(
                f"{setting} = {path!r} is a file, not a directory; point it at a directory (it is created if missing)"
            )
        probe = f".laketide-write-check-{uuid.uuid4().hex}"
        io.write_bytes(probe, b"")
        io.delete(probe)
    except (OSError, ValueError) as exc:
        if isinstance(exc, JobRefused):
            raise
        raise JobRefused(
            f"{setting} = {path!r} cannot be written ({exc}); {why}: point it at a writable directory, or fix "
            "its permissions or mount"
        ) from None


def check_writable(table: TableConfig, uri: str) -> None:
    """Refuse a table whose type, version or layout laketide does not write yet."""
    props = table.extra
    problems = []
    if table.version not in WRITTEN_VERSIONS:
        problems.append(
            f"hoodie.table.version = {table.version}; laketide writes table versions "
            + " and ".join(str(v) for v in WRITTEN_VERSIONS)
            + (
                " (it reads version 9: Hudi 1.1's downgrade, CALL downgrade_table(table => ..., to_version => "
                "'EIGHT'), makes the table one laketide writes)"
                if table.version == 9
                else ""
            )
        )
    if not table.populate_meta_fields and table.table_type == "MERGE_ON_READ":
        problems.append(
            "hoodie.populate.meta.fields = false on a merge-on-read table; laketide writes tables without meta "
            "columns as copy-on-write only (their log records carry no key that every reader makes the same way)"
        )
    if table.base_file_format != "parquet":
        problems.append(
            f"hoodie.table.base.file.format = {table.base_file_format.upper()}; laketide writes PARQUET only"
        )
    if table.key_generator not in SUPPORTED_KEY_GENERATORS:
        problems.append(
            f"hoodie.table.keygenerator.class = {table.key_generator}; laketide writes keys of "
            + ", ".join(sorted(g.rsplit(".", 1)[1] for g in SUPPORTED_KEY_GENERATORS))
        )
    if table.merge_mode not in MERGE_STRATEGY_ID:
        problems.append(
            f"the table merges records with {table.merge_mode}; laketide supports EVENT_TIME_ORDERING and "
            "COMMIT_TIME_ORDERING"
        )
    if partitions := metadata_partitions(props):
        problems.append(
            f"the table has Hudi's metadata table (partitions {', '.join(partitions)}), which laketide does not "
            "keep up to date, "
            f"so it would go stale. Set hoodie.metadata.enable=false on the table's Hudi writers, then run "
            f"`laketide metadata drop {uri}` (what Hudi does when the metadata table is disabled)"
        )
    if props.get("hoodie.table.timeline.timezone", "UTC").upper() != "UTC":
        problems.append(
            f"hoodie.table.timeline.timezone = {props['hoodie.table.timeline.timezone']}; laketide writes UTC "
            "instants only"
        )
    if problems:
        raise JobRefused(f"laketide cannot write the table at {uri}:\n  " + "\n  ".join(problems))


def complex_key_encoding(table: Table, view: FileSystemView) -> bool:
    """Whether the table's keys are ``field:value`` pairs, for a one-field ``ComplexKeyGenerator`` read from its data.

    Hudi writes ``field:value`` by default; tables written by Hudi 0.14.1 to
    1.0.2 carry the bare value (HUDI-7001). Writing the other form than the
    table holds would turn every update into a duplicate, so the table's own
    keys decide, as Hudi lets a table's recorded encoding win over its default.
    """
    config = table.config
    if not config.complex_key or len(config.record_key_fields) != 1 or not config.populate_meta_fields:
        return config.complex_key
    for file_slice in view.latest_slices():
        if file_slice.base_file is not None:
            with table.io.open_input(file_slice.base_file.path) as f:
                keys = pq.ParquetFile(f).read_row_group(0, columns=[RECORD_KEY])[RECORD_KEY]
            if len(keys):
                prefixed = keys[0].as_py().startswith(f"{config.record_key_fields[0]}:")
                if not prefixed:
                    log.warning(
                        "%s holds bare record keys under ComplexKeyGenerator (HUDI-7001); writing them the same way",
                        table.uri,
                    )
                return prefixed
    return True


def _agree(key: str, wanted, prop: str, actual, uri: str) -> None:
    if wanted is not None and wanted != actual:
        raise JobRefused(
            f"table.{key} = {wanted!r}, but the table at {uri} has {prop} = {actual!r}. The table's setting wins: "
            f"set table.{key} = {actual!r} or leave it out."
        )


def settled_config(job: TableSection, existing: TableConfig | None, uri: str) -> TableConfig:
    """The table settings to write with: the table's own, after checking the job agrees with them."""
    if existing is None:
        if not job.record_key:
            raise JobRefused(
                f"there is no table at {uri} yet, and table.record_key is not set: give the column or columns that "
                'identify a record (table.record_key = ["id"]) to create it'
            )
        created = TableConfig(
            name=job.name or "laketide_table",
            table_type=job.type or "COPY_ON_WRITE",
            record_key_fields=list(job.record_key),
            partition_fields=list(job.partition_by or []),
            ordering_field=job.ordering_field,
            merge_mode=job.merge_mode or default_merge_mode(job.ordering_field),
            hive_style_partitioning=bool(job.hive_style_partitioning),
            urlencode_partitions=job.urlencode_partitions if job.urlencode_partitions is not None else True,
            version=job.version or 6,
        )
        check_writable(created, uri)
        return created
    check_writable(existing, uri)
    _agree("version", job.version, "hoodie.table.version", existing.version, uri)
    _agree("name", job.name, "hoodie.table.name", existing.name, uri)
    _agree("type", job.type, "hoodie.table.type", existing.table_type, uri)
    _agree("record_key", job.record_key, "hoodie.table.recordkey.fields", existing.record_key_fields, uri)
    _agree("partition_by", job.partition_by, "hoodie.table.partition.fields", existing.partition_fields, uri)
    _agree("ordering_field", job.ordering_field, "hoodie.table.precombine.field", existing.ordering_field, uri)
    _agree("merge_mode", job.merge_mode, "hoodie.record.merge.mode", existing.merge_mode, uri)
    _agree(
        "hive_style_partitioning",
        job.hive_style_partitioning,
        "hoodie.datasource.write.hive_style_partitioning",
        existing.hive_style_partitioning,
        uri,
    )
    _agree(
        "urlencode_partitions",
        job.urlencode_partitions,
        "hoodie.datasource.write.partitionpath.urlencode",
        existing.urlencode_partitions,
        uri,
    )
    return existing


def spark_type(dtype: pa.DataType) -> str:
    """The Spark SQL name of an Arrow type, as users write it in source.schema (Arrow's own name without Spark)."""
    try:
        from pyspark.sql.pandas.types import from_arrow_type

        return from_arrow_type(dtype).simpleString()
    except (ImportError, TypeError, NotImplementedError):
        return str(dtype)


def _is_key_type(dtype: pa.DataType) -> bool:
    return (
        pa.types.is_boolean(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_decimal(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_date32(dtype)
        or pa.types.is_timestamp(dtype)
    )


def _is_ordering_type(dtype: pa.DataType) -> bool:
    return _is_key_type(dtype) and not pa.types.is_boolean(dtype)


def check_fields(table: TableConfig, source: pa.Schema, config_key: dict[str, str]) -> None:
    """Key, ordering and partition fields exist in the source and have types they can have."""
    names = set(source.names)
    usable = "boolean, integer, float, double, decimal, string, date, timestamp"

    def check(field: str, key: str, role: str, allowed, kinds: str) -> None:
        if field not in names:
            raise JobRefused(
                f"{key}: {role} field {field!r} is not a column of the source schema ({', '.join(source.names)})"
            )
        dtype = source.field(field).type
        if not allowed(dtype):
            raise JobRefused(
                f"{key}: {role} field {field!r} is {spark_type(dtype)}; {role} fields must be one of {kinds}"
            )

    for field in table.record_key_fields:
        check(field, config_key["record_key"], "record key", _is_key_type, usable)
    for field in table.partition_fields:
        check(field, config_key["partition_by"], "partition", _is_key_type, usable)
        if table.hive_style_partitioning and field[0] in "._":
            raise JobRefused(
                f"{config_key['partition_by']}: partition field {field!r} would make hidden '{field}=...' directories"
            )
    if table.ordering_field:
        check(
            table.ordering_field,
            config_key["ordering_field"],
            "ordering",
            _is_ordering_type,
            usable.replace("boolean, ", ""),
        )
    if IS_DELETED in names and not pa.types.is_boolean(source.field(IS_DELETED).type):
        raise JobRefused(
            f"source.schema: {IS_DELETED} marks deletes and must be BOOLEAN, not "
            f"{spark_type(source.field(IS_DELETED).type)}"
        )
    clashes = sorted(names & set(META_COLUMNS))
    if clashes:
        raise JobRefused(f"source.schema: {', '.join(clashes)} are Hudi's meta columns; the source may not carry them")


def check_schema(source: pa.Schema, current: pa.Schema | None) -> pa.Schema:
    """The table schema once the source's rows are written; refuses what Hudi cannot store or evolve to."""
    try:
        check_avro_names(source)
        storage_schema(source)
        return evolve(current, source)
    except SchemaError as exc:
        raise JobRefused(f"source.schema: {exc}") from None


def table_config_for(
    job: TableSection,
    existing: TableConfig | None,
    current_schema: pa.Schema | None,
    source: pa.Schema | None,
    uri: str,
) -> TableConfig:
    """Every check, in the order a user would fix them; returns the settings to write with. ``source``: ``None``
    when the columns come from change events, which are checked as each micro-batch brings them."""
    table = settled_config(job, existing, uri)
    keys = {
        "record_key": "table.record_key",
        "partition_by": "table.partition_by",
        "ordering_field": "table.ordering_field",
    }
    if existing is not None:
        keys = {k: f"{v} (from the table's hoodie.properties)" for k, v in keys.items()}
    if source is not None:
        check_fields(table, source, keys)
        check_schema(source, current_schema)
    if table.merge_mode == EVENT_TIME and not table.ordering_field:
        raise JobRefused("table.merge_mode = EVENT_TIME_ORDERING needs table.ordering_field")
    return table

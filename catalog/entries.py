"""What a catalog holds of a table, as Apache Hudi's sync registers it, made from the table alone (no catalog
call): one entry for a copy-on-write table, ``<name>_ro`` and ``<name>_rt`` for merge-on-read, and one partition
entry per partition.

The fields are those of Hudi's Hive sync (``hudi-sync/hudi-hive-sync``): ``HiveSyncTool.syncHoodieTable`` names
the tables and says which reads as optimized; ``HMSDDLExecutor.createTable`` makes an EXTERNAL table at the base
path with the columns less the partition fields, the partition keys typed as their columns are (``string`` where
the column is not stored), ``ParquetHiveSerDe`` with ``serialization.format = 1``; ``HoodieInputFormatUtils``
names the input and output formats; ``SparkDataSourceTableUtils`` adds Spark's data source properties and the
``path`` and ``hoodie.query.as.ro.table`` serde properties; ``HMSDDLExecutor.addPartitionsToTable`` places a
partition at ``<base>/<partition path>`` with the values the extractor ``HoodieSyncConfig`` infers for the table
takes from its path (``partition_entry``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa

from laketide.catalog.hive_types import hive_type, spark_schema_json
from laketide.table.format.properties import TableConfig
from laketide.table.format.schema import with_meta_schema

SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
INPUT_FORMAT = "org.apache.hudi.hadoop.HoodieParquetInputFormat"
REALTIME_INPUT_FORMAT = "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"
OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
# HiveSyncTool's suffixes of a merge-on-read table's two entries
READ_OPTIMIZED_SUFFIX, SNAPSHOT_SUFFIX = "_ro", "_rt"
# the table parameters that record how far the entry is synced (HoodieHiveSyncClient.updateLastCommitTimeSynced)
LAST_SYNCED = "last_commit_time_sync"
LAST_COMPLETION_SYNCED = "last_commit_completion_time_sync"
# hoodie.datasource.hive_sync.schema_string_length_thresh: Spark's schema is split into parts of at most this
SCHEMA_PART_CHARS = 4000
# a Delta table's entry: the formats Spark gives a data-source table Hive cannot read itself
# (``HiveExternalCatalog.newSparkSQLSpecificMetastoreTable``), so a Hive reader never takes the folder for parquet
DELTA_INPUT_FORMAT = "org.apache.hadoop.mapred.SequenceFileInputFormat"
DELTA_OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat"
DELTA_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"


@dataclass(frozen=True)
class TableEntry:
    """One table of a catalog: its columns and partition keys as (name, Hive type), where its files are and how they
    are read, and its parameters."""

    name: str
    location: str
    columns: list[tuple[str, str]]
    partition_keys: list[tuple[str, str]]
    input_format: str
    output_format: str = OUTPUT_FORMAT
    serde: str = SERDE
    serde_parameters: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)

    def same_definition(self, other: TableEntry) -> bool:
        """Whether ``other`` declares the same columns, keys, location and formats (the sync state aside)."""
        return (
            self.columns == other.columns
            and self.partition_keys == other.partition_keys
            and self.location == other.location
            and (self.input_format, self.output_format, self.serde)
            == (other.input_format, other.output_format, other.serde)
        )


@dataclass(frozen=True)
class PartitionEntry:
    values: tuple[str, ...]
    location: str


def catalog_location(uri: str) -> str:
    """Where a catalog says the table is: its URI (``s3://bucket/orders``), a local path as Hadoop names it
    (``file:/data/orders``), as the metastore itself stores one."""
    return uri if "://" in uri or uri.startswith("file:") else f"file:{uri}"


def table_entries(
    config: TableConfig, schema: pa.Schema, location: str, name: str, support_timestamp: bool = False
) -> list[TableEntry]:
    """The entries Hudi's sync keeps for a table whose data schema is ``schema``, stored at ``location`` (a
    ``catalog_location``)."""
    stored = with_meta_schema(schema) if config.populate_meta_fields else schema
    partition_fields = list(config.partition_fields)
    types = {f.name: hive_type(f.type, support_timestamp) for f in stored}
    # the metastore keeps column names in lower case, as Hive resolves them (Glue too); Spark's own schema
    # property keeps their case
    columns = [(f.name.lower(), types[f.name]) for f in stored if f.name not in partition_fields]
    keys = [(p.lower(), types.get(p, "string")) for p in partition_fields]
    spark = _spark_properties(stored, partition_fields)
    if config.table_type == "MERGE_ON_READ":
        made = [
            (name + READ_OPTIMIZED_SUFFIX, INPUT_FORMAT, True),
            (name + SNAPSHOT_SUFFIX, REALTIME_INPUT_FORMAT, False),
        ]
    else:
        made = [(name, INPUT_FORMAT, False)]
    return [
        TableEntry(
            entry_name,
            location,
            columns,
            keys,
            input_format,
            serde_parameters={
                "path": location,
                "hoodie.query.as.ro.table": str(read_optimized).lower(),
                "serialization.format": "1",
            },
            parameters={"EXTERNAL": "TRUE", **spark},
        )
        for entry_name, input_format, read_optimized in made
    ]


def delta_entry(schema: pa.Schema, location: str, name: str, support_timestamp: bool = False) -> TableEntry:
    """The entry of the table's Delta mirror (its ``_delta_log`` beside the Hudi timeline): what Delta readers take
    for a Delta table, Spark's provider ``delta`` and the ``table_type = DELTA`` Athena reads Delta tables by.
    Delta keeps the partitions and the schema in its log, so the entry has no partition keys; its columns (the
    mirror's: meta columns included) are for engines that list them."""
    stored = with_meta_schema(schema)
    return TableEntry(
        name,
        location,
        [(f.name.lower(), hive_type(f.type, support_timestamp)) for f in stored],
        [],
        DELTA_INPUT_FORMAT,
        DELTA_OUTPUT_FORMAT,
        DELTA_SERDE,
        serde_parameters={"path": location, "serialization.format": "1"},
        parameters={"EXTERNAL": "TRUE", "spark.sql.sources.provider": "delta", "table_type": "DELTA"},
    )


def _spark_properties(schema: pa.Schema, partition_fields: list[str]) -> dict[str, str]:
    text = spark_schema_json(schema, partition_fields)
    parts = [text[i : i + SCHEMA_PART_CHARS] for i in range(0, len(text), SCHEMA_PART_CHARS)]
    properties = {"spark.sql.sources.provider": "hudi", "spark.sql.sources.schema.numParts": str(len(parts))}
    properties |= {f"spark.sql.sources.schema.part.{i}": part for i, part in enumerate(parts)}
    if partition_fields:
        properties["spark.sql.sources.schema.numPartCols"] = str(len(partition_fields))
        properties |= {f"spark.sql.sources.schema.partCol.{i}": p for i, p in enumerate(partition_fields)}
    return properties


def partition_entry(config: TableConfig, location: str, partition: str) -> PartitionEntry:
    """The partition at relative path ``partition``, with its values as the extractor Hudi's sync infers for the
    table reads them (``HoodieSyncConfig.META_SYNC_PARTITION_EXTRACTOR_CLASS``): one field, the whole path
    (``SinglePartPartitionValueExtractor``) or what follows ``field=`` (``HiveStylePartitionValueExtractor``);
    several, each level's value after any ``field=`` (``MultiPartKeysValueExtractor``). They are decoded where the
    paths are URL-encoded (``HMSDDLExecutor`` unescapes them when ``hoodie.datasource.write.partitionpath.urlencode``
    is on)."""
    if len(config.partition_fields) == 1:
        values = (partition.split("=", 1)[1] if config.hive_style_partitioning and "=" in partition else partition,)
    else:
        values = tuple(level.split("=", 1)[1] if "=" in level else level for level in partition.split("/"))
    if config.urlencode_partitions:
        values = tuple(unquote(v) for v in values)
    if len(values) != len(config.partition_fields):
        raise ValueError(f"partition path '{partition}' has {len(values)} levels for fields {config.partition_fields}")
    return PartitionEntry(values, f"{location.rstrip('/')}/{partition}")

"""A database micro-batch too big for the driver (a snapshot: ``op = r`` events by the million), split by table in
Spark's tasks, and each table's part decoded and written by them as a single-table job's tasks path writes its
micro-batch (``pipeline.MicroBatchReader.changes_on_tasks``), under the table's own instant.

The split follows ``changes.routes.route`` exactly, in two steps. The tasks parse each record's value for the
source table its row change names (``named_sources``), and the records with those names are kept for the
micro-batch (memory, then disk). The driver collects each named table's first record, by topic, partition and
offset, to learn which table each topic's events go to (a message that names none goes with its topic, as on the
driver) and each one's label; then every record gets its table's label, and each table reads its part from what
was kept, by label. Kafka's partitions stay the tasks' partitions (nothing is shuffled), so a task still holds
every event of its keys. Records of no table (rare: messages of a topic no table is known for) and a failed
table's records come to the driver, to be counted, set aside or quarantined as there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from laketide.config.routes import SourceTable
from laketide.spark.pipeline import MicroBatchReader
from laketide.writer.changes.events import Messages, parse_messages
from laketide.writer.changes.routes import SOURCE_FIELDS, named_sources
from laketide.writer.changes.schema_registry import unframed
from laketide.writer.job.database import Database, DatabaseTable
from laketide.writer.micro_batch import LoadedBatch

# what the query hands each micro-batch: the records as Kafka gave them (the key names a new table's record key)
RECORD_COLUMNS = ("key", "value", "topic", "partition", "offset")
NAMED = tuple(f"_lt_source_{name}" for name in SOURCE_FIELDS)  # the source table a record's row change names
LABEL = "_lt_label"
KEY_SAMPLE = 100  # records whose Kafka keys a new table's record key is read from
_SEP, _NONE = "\u0001", "\u0000"  # a source table's fields joined, and a field it lacks


class DatabaseTasks:
    """The tasks path of a database job: a ``MicroBatchReader`` per table (its exchange, its prepare settings),
    made at the table's first micro-batch here. Used by the micro-batch thread."""

    def __init__(self, spark: SparkSession, database: Database):
        self.spark, self.database = spark, database
        self._readers: dict[str, MicroBatchReader] = {}

    def split(self, df: DataFrame, batch_id: int) -> TasksSplit:
        """Micro-batch ``batch_id``'s records (Spark's rows of ``RECORD_COLUMNS``), to be split when first asked."""
        return TasksSplit(self, df, batch_id)

    def reader(self, table: DatabaseTable) -> MicroBatchReader:
        if table.label not in self._readers:
            self._readers[table.label] = MicroBatchReader(self.spark, table.job.writer)
        return self._readers[table.label]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


class TasksSplit:
    """One micro-batch's records by table, kept in Spark (``writer.job.split.Split``); ``close`` lets them go."""

    def __init__(self, tasks: DatabaseTasks, df: DataFrame, batch_id: int):
        self._tasks, self._df, self._batch_id = tasks, df, batch_id
        self._named: DataFrame | None = None
        self._labelled: DataFrame | None = None
        self._tables: dict[str, SourceTable] = {}
        self._unrouted = False

    def tables(self) -> dict[str, SourceTable]:
        if self._labelled is None:
            self._route()
        return self._tables

    def _route(self) -> None:
        database = self._tasks.database
        # on disk, not in memory first: a million 4 KB events cached with MEMORY_AND_DISK ran a 1 GB heap out in
        # Spark's in-memory column builder (local[2], where the executor is the driver's JVM)
        self._named = _with_sources(self._df.select(*RECORD_COLUMNS)).persist(StorageLevel.DISK_ONLY)
        firsts = (
            self._named.where(F.col(NAMED[2]).isNotNull())
            .groupBy("topic", *NAMED)
            .agg(F.min(F.struct("partition", "offset")).alias("first"))
            .collect()
        )
        named: dict[str, str] = {}
        ordered = sorted(firsts, key=lambda r: (r["topic"] or "", r["first"]["partition"], r["first"]["offset"]))
        for row in ordered:
            db, schema, table = (row[c] for c in NAMED)
            source = SourceTable(table, schema, db, row["topic"])
            if row["topic"] is not None:  # a topic goes with the first table its events named
                database.topics_seen.setdefault(row["topic"], source)
            named[_joined(db, schema, table, row["topic"])] = self._add(source)
        unnamed = self._named.where(F.col(NAMED[2]).isNull()).groupBy("topic").count().collect()
        by_topic: dict[str, str] = {}
        for row in unnamed:
            source = database.topics_seen.get(row["topic"])
            if source is None:
                self._unrouted = True
            else:
                by_topic[row["topic"]] = self._add(source)
        self._labelled = self._named.withColumn(LABEL, _label(named, by_topic))

    def _add(self, source: SourceTable) -> str:
        label = self._tasks.database.label_of(source)
        self._tables.setdefault(label, self._tasks.database.routes.key(source))
        return label

    def _of(self, label: str | None) -> DataFrame:
        assert self._labelled is not None, "the tables are asked for first"
        column = F.col(LABEL)
        return self._labelled.where(column.isNull() if label is None else column == label)

    def keys(self, label: str) -> pa.Array:
        return self._of(label).select("key").limit(KEY_SAMPLE).toArrow()["key"].combine_chunks()

    def loader(self, table: DatabaseTable) -> Callable[[], LoadedBatch]:
        part = self._of(table.label).select("value", "topic", "partition", "offset")
        reader = self._tasks.reader(table)
        return lambda: reader.changes_on_tasks(part, self._batch_id, table.decoder)

    def records(self, label: str) -> pa.Table:
        return self._of(label).select(*RECORD_COLUMNS).toArrow()

    def unrouted(self) -> tuple[pa.Table, Messages] | None:
        if not self._unrouted:
            return None
        records = self._of(None).select(*RECORD_COLUMNS).toArrow()
        return records, parse_messages(unframed(records["value"].combine_chunks()))

    def close(self) -> None:
        if self._named is not None:
            self._named.unpersist()


def _with_sources(records: DataFrame) -> DataFrame:
    """``records`` with the source table each one's row change names (``NAMED``), found by Spark's tasks."""

    def named(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            sources = named_sources(batch.column("value")) if batch.num_rows else [pa.nulls(0, pa.string())] * 3
            yield pa.RecordBatch.from_arrays([*batch.columns, *sources], names=[*batch.schema.names, *NAMED])

    schema = StructType([*records.schema.fields, *(StructField(name, StringType()) for name in NAMED)])
    return records.mapInArrow(named, schema)


def _joined(*fields: str | None) -> str:
    return _SEP.join(_NONE if f is None else f for f in fields)


def _label(named: dict[str, str], by_topic: dict[str, str]) -> Column:
    """Each record's table: the one its row change names, else its topic's; null for neither."""
    fields = [F.coalesce(F.col(c), F.lit(_NONE)) for c in (*NAMED, "topic")]
    return F.when(F.col(NAMED[2]).isNotNull(), _lookup(named, F.concat_ws(_SEP, *fields))).otherwise(
        _lookup(by_topic, F.col("topic"))
    )


def _lookup(mapping: dict[str, str], key: Column) -> Column:
    if not mapping:
        return F.lit(None).cast("string")
    return F.try_element_at(F.create_map(*[F.lit(x) for pair in sorted(mapping.items()) for x in pair]), key)

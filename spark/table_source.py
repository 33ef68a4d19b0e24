"""laketide tables as a Spark source: ``spark.readStream.format("laketide").load(path)``, and ``spark.read`` too.

Shaped like Flink's FLIP-27 source: a split enumerator on the driver and
split readers in the tasks. Offsets are instants. For a micro-batch over
``(start, end]`` the enumerator takes the commits completed in that window and
makes one split per file slice they changed, resolved as of ``end``: its files,
which of its log blocks are visible, and which commit times to keep. A reader
reads its split's slice (merged, for merge-on-read) and keeps the rows those
commits wrote, so re-reading a window after a restart gives the same rows:
with Spark's checkpointed offsets, a downstream query sees each change once.

Options:
- ``start``: ``earliest`` (the default: the first micro-batch is the whole table
  as of its end, the later ones the changes), ``latest`` (changes committed from
  now on), or an instant (changes committed after it);
- ``max_instants_per_trigger``: at most this many commits per micro-batch;
- ``fallback_to_full_scan``: when the window starts before what the cleaner and
  archival kept, read the whole table as of the window's end instead of
  failing (its rows may then repeat ones already read);
- batch reads: ``as_of`` (time travel), or ``start`` and ``end`` for the changes between.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from laketide.table import Table
from laketide.table.errors import Invalid
from laketide.table.format.clean import retained_by_last_clean
from laketide.table.format.instant import parse_instant_time
from laketide.table.format.schema import COMMIT_TIME, with_meta_schema
from laketide.table.format.view import FileSlice, Visibility
from laketide.table.reading.log_merge import MergeRule
from laketide.table.reading.reader import check_incremental, commits_in_window, read_slices, slices_up_to
from laketide.table.storage.io import FileIO

NAME = "laketide"
EARLIEST = "earliest"
LATEST = "latest"


class StartCleaned(Invalid):
    """The window starts before the commits the table still holds."""


STORAGE_PREFIX = "storage."


@dataclass(frozen=True)
class SliceSplit(InputPartition):
    """One file slice to read: its files as of the window's end, which instants' log blocks count
    then, and the commit times whose rows to keep (all rows when ``commit_times`` is None)."""

    table_uri: str
    slice: FileSlice
    visible: Visibility
    commit_times: tuple[str, ...] | None
    rule: MergeRule
    storage_options: dict[str, str] = field(default_factory=dict)  # how a task reaches an object store


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """The reader's ``storage.<key>`` options: object_store's keys for a table on an object store
    (``.option("storage.aws_region", "eu-west-1")``); what is not given comes from the environment."""
    return {k[len(STORAGE_PREFIX) :]: v for k, v in dict(options).items() if k.lower().startswith(STORAGE_PREFIX)}


def read_split(split: SliceSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    rows = read_slices(
        FileIO.for_uri(split.table_uri, split.storage_options), [split.slice], True, split.visible, split.rule
    )
    if rows.num_columns == 0:
        return
    if split.commit_times is not None:
        rows = rows.filter(pc.is_in(rows[COMMIT_TIME], value_set=pa.array(split.commit_times, pa.string())))
    # files written before a column was added lack it
    columns = [
        rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in schema
    ]
    yield from pa.Table.from_arrays(columns, schema=schema).to_batches()


class SplitEnumerator:
    """The driver's side: which instants a micro-batch covers, and the splits that read them."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None):
        self.table = Table.open(uri, FileIO.for_uri(uri, storage_options))

    def refresh(self) -> None:
        self.table = Table.open(self.table.uri, self.table.io)

    def readable_commits(self, start: str | None = None) -> list[str]:
        """Completed writes after ``start``, up to the first write still in flight: a commit that
        completes later must not fall behind an offset already handed out. (A compaction in flight
        holds nothing back: it adds no change of its own.)"""
        timeline = self.table.timeline
        in_flight = [i.timestamp for i in timeline.pending() if i.is_write]
        horizon = min(in_flight) if in_flight else None
        return [
            timeline.visible_time(i)
            for i in commits_in_window(timeline, start, None)
            if horizon is None or timeline.visible_time(i) < horizon
        ]

    def latest(self) -> str | None:
        commits = self.readable_commits()
        return commits[-1] if commits else None

    def end_after(self, start: str | None, max_instants: int | None, target: str | None = None) -> str | None:
        """The end of the next window after ``start``: at most ``max_instants`` commits, none past ``target``.
        A first window (no ``start``) reads the whole table, so it ends no earlier than the cleaner's
        earliest retained commit, whose files are all still there."""
        retained = retained_by_last_clean(self.table.timeline) if start is None else None
        commits = [
            c
            for c in self.readable_commits(start)
            if (target is None or c <= target) and (retained is None or c >= retained)
        ]
        if not commits:
            return start
        return commits[min(len(commits), max_instants) - 1] if max_instants else commits[-1]

    def _check_window(self, start: str | None, end: str, full_scan_when_cleaned: bool) -> str | None:
        """``start``, or None (the whole table as of ``end``) when the commits after it were archived and the
        full scan is allowed. Reading as of ``end`` needs its file versions, which the cleaner keeps from its
        earliest retained commit on."""
        retained = retained_by_last_clean(self.table.timeline)
        if retained is not None and end < retained:
            raise StartCleaned(
                f"{self.table.uri} no longer holds the files of the table as of {end}: the cleaner kept commits "
                f"from {retained} on. "
                "Restart the query (a new checkpoint) from a newer instant"
            )
        archived_from = self.table.timeline.start
        if start is not None and archived_from is not None and start < archived_from:
            if not full_scan_when_cleaned:
                raise StartCleaned(
                    f"the commits after {start} are no longer all on the active timeline of {self.table.uri} "
                    "(it starts at "
                    f"{archived_from}). Restart the query from a newer instant, or set "
                    "fallback_to_full_scan=true to read the "
                    "whole table once"
                )
            return None
        return start

    def splits(
        self, start: str | None, end: str, full_scan_when_cleaned: bool = False, as_of_instant: bool = False
    ) -> list[SliceSplit]:
        """The splits of ``(start, end]``, ``end`` an offset (a visible time, ``slices_up_to``); ``start`` None reads
        the whole table as of ``end``, or as of the instant time ``end`` (``as_of_instant``: time travel, by instant
        time in every table version)."""
        if start is not None:
            check_incremental(self.table.config, self.table.uri)
        start = self._check_window(start, end, full_scan_when_cleaned)
        view = self.table.file_system_view()
        timeline = view.timeline
        rule, uri, options = self.table.merge_rule, self.table.uri, self.table.io.options
        latest, visible = (view.latest_slices(end), view.visibility(end)) if as_of_instant else slices_up_to(view, end)
        if start is None:
            return [SliceSplit(uri, s, visible, None, rule, options) for s in latest]
        admitted = commits_in_window(timeline, start, end)
        if not admitted:
            return []
        touched = set().union(*(timeline.commit_metadata(i).file_ids() for i in admitted))
        times = tuple(sorted(i.timestamp for i in admitted))
        return [
            SliceSplit(uri, s, visible, times, rule, options) for s in latest if (s.partition, s.file_id) in touched
        ]


class _Planning:
    """A reader's enumerator lives on the driver: it is left out when Spark ships the reader to its tasks."""

    path: str
    storage_options: Mapping[str, str] = MappingProxyType({})
    _enumerator: SplitEnumerator | None = None

    @property
    def enumerator(self) -> SplitEnumerator:
        if self._enumerator is None:
            self._enumerator = SplitEnumerator(self.path, self.storage_options)
        return self._enumerator

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_enumerator": None}


class LaketideStreamReader(_Planning, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, path: str, options: dict, schema: pa.Schema):
        self.path = path
        self.storage_options = storage_options(options)
        self.schema = schema
        self.start = options.get("start", EARLIEST)
        self.max_instants = (
            int(options["max_instants_per_trigger"]) if options.get("max_instants_per_trigger") else None
        )
        self.full_scan = options.get("fallback_to_full_scan", "false").lower() == "true"
        self.target: str | None = None

    def initialOffset(self) -> dict:
        if self.start == EARLIEST:
            return {"instant": EARLIEST}
        if self.start == LATEST:
            return {"instant": self.enumerator.latest() or EARLIEST}
        return {"instant": parse_instant_time(self.start)}

    def prepareForTriggerAvailableNow(self) -> None:
        self.enumerator.refresh()
        self.target = self.enumerator.latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        # no built-in limit counts instants; ReadMaxFiles carries the number of commits
        return ReadMaxFiles(self.max_instants) if self.max_instants else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self.enumerator.refresh()
        begin = None if start["instant"] == EARLIEST else start["instant"]
        cap = limit.max_files if isinstance(limit, ReadMaxFiles) else None
        end = self.enumerator.end_after(begin, cap, self.target)
        return {"instant": end or EARLIEST}

    def reportLatestOffset(self) -> dict | None:
        latest = self.enumerator.latest()
        return {"instant": latest} if latest else None

    def partitions(self, start: dict, end: dict) -> list[SliceSplit]:
        if start["instant"] == end["instant"] or end["instant"] == EARLIEST:
            return []
        self.enumerator.refresh()
        begin = None if start["instant"] == EARLIEST else start["instant"]
        return self.enumerator.splits(begin, end["instant"], self.full_scan)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SliceSplit), "Spark hands back the splits partitions() made"
        yield from read_split(partition, self.schema)

    def commit(self, end: dict) -> None:
        pass


class LaketideBatchReader(_Planning, DataSourceReader):
    def __init__(self, path: str, options: dict, schema: pa.Schema):
        self.path = path
        self.storage_options = storage_options(options)
        self.schema = schema
        self.options = options

    def partitions(self) -> list[SliceSplit]:
        options, enumerator = self.options, self.enumerator
        end = (
            parse_instant_time(options.get("end") or options["as_of"])
            if options.get("end") or options.get("as_of")
            else enumerator.latest()
        )
        if end is None:
            return []
        start = parse_instant_time(options["start"]) if options.get("start") else None
        full_scan = options.get("fallback_to_full_scan", "false").lower() == "true"
        as_of = bool(options.get("as_of")) and not options.get("end") and start is None
        return enumerator.splits(start, end, full_scan, as_of_instant=as_of)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SliceSplit), "Spark hands back the splits partitions() made"
        yield from read_split(partition, self.schema)


class LaketideDataSource(DataSource):
    """``format("laketide")``: the table's rows with Hudi's meta columns, in its current schema."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise Invalid('format("laketide") needs the table path: .load("/path/to/table")')
        return path

    def _table(self) -> Table:
        path = self._path()
        return Table.open(path, FileIO.for_uri(path, storage_options(self.options)))

    def _arrow_schema(self, table: Table | None = None) -> pa.Schema:
        schema = (table or self._table()).schema()
        if schema is None:
            raise Invalid(f"{self._path()} has no committed schema yet: nothing to read")
        return with_meta_schema(schema)

    def schema(self):
        return from_arrow_schema(self._arrow_schema())

    def reader(self, schema) -> LaketideBatchReader:
        return LaketideBatchReader(self._path(), dict(self.options), self._arrow_schema())

    def streamReader(self, schema) -> LaketideStreamReader:
        table = self._table()
        check_incremental(table.config, table.uri)  # a stream reads incrementally after its first micro-batch
        return LaketideStreamReader(self._path(), dict(self.options), self._arrow_schema(table))

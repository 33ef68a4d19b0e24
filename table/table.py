"""``Table``: open or create a Hudi table and read it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.format.commit import SCHEMA_KEY
from laketide.table.format.instant import parse_instant_time
from laketide.table.format.properties import (
    EVENT_TIME,
    PROPERTIES_FILE,
    TableConfig,
    default_merge_mode,
    format_properties,
)
from laketide.table.format.properties_file import TableNotFound, has_timeline, read_properties
from laketide.table.format.schema import avro_schema_json, data_schema, schema_from_avro
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView
from laketide.table.lru import LruCache
from laketide.table.reading import reader
from laketide.table.reading.log_merge import MergeRule
from laketide.table.reading.view_sync import ViewSync
from laketide.table.storage.io import FileIO

if TYPE_CHECKING:
    from laketide.table.inspect import InspectTable

__all__ = ["SharedCaches", "Table", "TableNotFound"]


@dataclass
class SharedCaches:
    """What tables opened again and again on one path (a server opens one per request) share: the metadata
    of completed commits, and file-system views by the timeline they show, kept current by one ``ViewSync``.
    ``views`` and ``sync`` guard themselves; ``commit_details`` is only read and written by single dict
    operations."""

    commit_details: dict = field(default_factory=dict)
    views: LruCache = field(default_factory=lambda: LruCache(2))
    # held while a view is made, so that requests arriving together make it once, not once each
    listing: threading.Lock = field(default_factory=threading.Lock)
    sync: ViewSync | None = None  # where the views come from (made at the first view, under ``listing``)


class Table:
    def __init__(self, io: FileIO, config: TableConfig, shared: SharedCaches | None = None):
        self.io = io
        self.config = config
        self._shared = shared
        # completed writes' metadata, shared by every timeline this table loads (and by every table opened
        # with the same ``SharedCaches``: a server that opens the table per request reads each commit once)
        self._commit_details: dict = shared.commit_details if shared is not None else {}

    @classmethod
    def open(cls, path: str, io: FileIO | None = None, shared: SharedCaches | None = None) -> Table:
        io = io or FileIO.for_uri(path)
        return cls(io, TableConfig.from_properties(read_properties(io)), shared)

    @classmethod
    def create(
        cls,
        path: str,
        name: str,
        record_key: Sequence[str],
        partition_by: Sequence[str] = (),
        ordering_field: str | None = None,
        hive_style_partitioning: bool = False,
        schema: pa.Schema | None = None,
        io: FileIO | None = None,
        version: int = 6,
    ) -> Table:
        """Create an empty copy-on-write table of ``version`` with Hudi's defaults for these keys."""
        config = TableConfig(
            name=name,
            version=version,
            record_key_fields=list(record_key),
            partition_fields=list(partition_by),
            ordering_field=ordering_field,
            merge_mode=default_merge_mode(ordering_field),
            hive_style_partitioning=hive_style_partitioning,
            urlencode_partitions=True,
        )
        return cls.create_from_config(path, config, schema, io)

    @classmethod
    def create_from_config(
        cls, path: str, config: TableConfig, schema: pa.Schema | None = None, io: FileIO | None = None
    ) -> Table:
        io = io or FileIO.for_uri(path)
        if io.is_file(PROPERTIES_FILE) or has_timeline(io):
            raise FileExistsError(f"a Hudi table already exists at {io.full_path('')}")
        if schema is not None:
            config = config.model_copy(update={"create_schema": avro_schema_json(data_schema(schema), config.name)})
        io.makedirs(".hoodie")
        if config.version >= 8:  # the timeline and its history have their own folders
            io.makedirs(config.history_dir)
        io.write_atomic(PROPERTIES_FILE, format_properties(config.to_properties()).encode())
        return cls(io, config)

    @property
    def uri(self) -> str:
        return self.io.full_path("")

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def inspect(self) -> InspectTable:
        """Typed views of the instants, file groups, partitions and savepoints (``table/inspect/__init__.py``)."""
        from laketide.table.inspect import InspectTable

        return InspectTable(self)

    @property
    def timeline(self) -> Timeline:
        """The timeline as it is on storage now."""
        return Timeline.load(self.io, self.config, self._commit_details)

    def schema(self, timeline: Timeline | None = None) -> pa.Schema | None:
        """The table's data schema: the Avro schema of its latest write, as Hudi's readers take it.

        Falls back to ``hoodie.table.create.schema``, then to the parquet schema
        of a base file (tables whose commits carry no schema); ``None`` while empty.
        """
        timeline = timeline or self.timeline
        for instant in reversed(timeline.completed_writes()):
            avro = timeline.commit_metadata(instant).extra_metadata.get(SCHEMA_KEY)
            if avro:
                return data_schema(schema_from_avro(avro))
        if self.config.create_schema:
            return data_schema(schema_from_avro(self.config.create_schema))
        for file_slice in self.file_system_view(timeline).latest_slices():
            if file_slice.base_file is not None:
                with self.io.open_input(file_slice.base_file.path) as f:
                    return data_schema(pq.read_schema(f))
        return None

    def file_system_view(self, timeline: Timeline | None = None) -> FileSystemView:
        timeline = timeline or self.timeline
        if self._shared is None:
            return FileSystemView.load(self.io, timeline)
        # the data files a view shows change only with the timeline (a write, clean, rollback or compaction
        # completes as an instant): one view serves every request until the timeline moves, and the next is
        # the last one with the new instants applied (``ViewSync``), not a new listing
        key = tuple((i.timestamp, i.action, i.state) for i in timeline.instants)
        with self._shared.listing:
            view = self._shared.views.get(key)
            if view is None:
                if self._shared.sync is None:
                    self._shared.sync = ViewSync(self)
                view = self._shared.sync.view(timeline)
                self._shared.views.put(key, view)
        return view

    def snapshot(self, as_of: str | None = None) -> pa.Table:
        """Every live row as of ``as_of`` (default: the latest completed instant); see ``parse_instant_time``."""
        as_of = parse_instant_time(as_of) if as_of is not None else None
        return reader.snapshot(
            self.io, self.file_system_view(), as_of, self.config.populate_meta_fields, self.merge_rule
        )

    def read_optimized(self, as_of: str | None = None) -> pa.Table:
        """The rows of the base files alone: for merge-on-read, each file group as of its last compaction."""
        as_of = parse_instant_time(as_of) if as_of is not None else None
        return reader.read_optimized(self.io, self.file_system_view(), as_of, self.config.populate_meta_fields)

    @property
    def merge_rule(self) -> MergeRule:
        config = self.config
        return MergeRule(config.ordering_field if config.merge_mode == EVENT_TIME else None)

    def incremental(self, start: str | None = None, end: str | None = None) -> pa.Table:
        """Rows committed in ``(start, end]``; either bound in any form ``parse_instant_time`` takes."""
        start = parse_instant_time(start) if start is not None else None
        end = parse_instant_time(end) if end is not None else None
        reader.check_incremental(self.config, self.uri)
        return reader.incremental(self.io, self.file_system_view(), start, end, self.merge_rule)

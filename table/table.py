"""``Table``: open or create a Hudi table and read it."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from laketide.table import reader
from laketide.table.io import FileIO
from laketide.table.properties import PROPERTIES_FILE, TableConfig, format_properties, parse_properties
from laketide.table.schema import avro_schema_json, data_schema
from laketide.table.timeline import Timeline
from laketide.table.view import FileSystemView


class TableNotFound(FileNotFoundError):
    pass


class Table:
    def __init__(self, io: FileIO, config: TableConfig):
        self.io = io
        self.config = config

    @classmethod
    def open(cls, path: str, io: FileIO | None = None) -> Table:
        io = io or FileIO.for_uri(path)
        if not io.exists(PROPERTIES_FILE):
            raise TableNotFound(f"no Hudi table at {io.full_path('')}: {PROPERTIES_FILE} is missing")
        return cls(io, TableConfig.from_properties(parse_properties(io.read_text(PROPERTIES_FILE))))

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
    ) -> Table:
        """Create an empty version 6 copy-on-write table (or open the one already there with the same keys)."""
        io = io or FileIO.for_uri(path)
        if io.exists(PROPERTIES_FILE):
            table = cls.open(path, io)
            table._check_compatible(record_key, partition_by)
            return table
        config = TableConfig(
            name=name,
            record_key_fields=list(record_key),
            partition_fields=list(partition_by),
            ordering_field=ordering_field,
            hive_style_partitioning=hive_style_partitioning,
            create_schema=avro_schema_json(data_schema(schema), name) if schema is not None else None,
        )
        io.makedirs(".hoodie")
        io.write_atomic(PROPERTIES_FILE, format_properties(config.to_properties()).encode())
        return cls(io, config)

    def _check_compatible(self, record_key: Sequence[str], partition_by: Sequence[str]) -> None:
        if list(record_key) != self.config.record_key_fields or list(partition_by) != self.config.partition_fields:
            raise ValueError(
                f"table {self.uri} has record key {self.config.record_key_fields} and partitions "
                f"{self.config.partition_fields}; the job asks for {list(record_key)} and {list(partition_by)}"
            )

    @property
    def uri(self) -> str:
        return self.io.full_path("")

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def timeline(self) -> Timeline:
        """The timeline as it is on storage now."""
        return Timeline.load(self.io, self.config)

    def file_system_view(self, timeline: Timeline | None = None) -> FileSystemView:
        return FileSystemView.load(self.io, timeline or self.timeline)

    def snapshot(self, as_of: str | None = None) -> pa.Table:
        """Every live row as of instant ``as_of`` (default: the latest completed one)."""
        return reader.snapshot(self.io, self.file_system_view(), as_of, self.config.populate_meta_fields)

    def incremental(self, start: str | None = None, end: str | None = None) -> pa.Table:
        """Rows committed in ``(start, end]``."""
        return reader.incremental(self.io, self.file_system_view(), start, end, self.config.populate_meta_fields)

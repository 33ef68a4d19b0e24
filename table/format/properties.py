"""``.hoodie/hoodie.properties``: Java properties text and the typed table config."""

from __future__ import annotations

import posixpath
import zlib
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from laketide.table.format.keygen import VirtualKeys

PROPERTIES_FILE = ".hoodie/hoodie.properties"

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (comments, escapes, continuation lines)."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_entry(logical)
        props[key] = value
        logical = ""
    if logical:
        key, value = _split_entry(logical)
        props[key] = value
    return props


def _split_entry(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n and line[i] not in "=: \t":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    while i < n and line[i] in " \t":
        i += 1
    if i < n and line[i] in "=:":
        i += 1
    while i < n and line[i] in " \t":
        i += 1
    return _unescape(key), _unescape(line[i:])


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and i + 6 <= len(s):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _escape(s: str, is_key: bool) -> str:
    out = []
    for i, c in enumerate(s):
        if c == " " and (is_key or i == 0):
            out.append("\\ ")
        elif c in "\\=:#!":
            out.append("\\" + c)
        elif c in "\t\n\r\f":
            out.append("\\" + {v: k for k, v in _ESCAPES.items()}[c])
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def format_properties(props: dict[str, str], now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    lines = ["#Updated at " + now.isoformat(), "#" + now.strftime("%a %b %d %H:%M:%S UTC %Y")]
    lines += [f"{_escape(k, True)}={_escape(v, False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def table_checksum(database: str, table_name: str) -> int:
    """Hudi's ``hoodie.table.checksum``: CRC32 of ``<database>.<table name>``."""
    return zlib.crc32(f"{database}.{table_name}".encode())


EVENT_TIME = "EVENT_TIME_ORDERING"
COMMIT_TIME = "COMMIT_TIME_ORDERING"
MergeMode = Literal["EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"]
# What Hudi records for each mode: the payload class a version 6 reader merges with, and the
# merge strategy id of Hudi 1.x (HoodieRecordMerger's *_BASED_MERGE_STRATEGY_UUID).
PAYLOAD_CLASS = {
    EVENT_TIME: "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
    COMMIT_TIME: "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
}
MERGE_STRATEGY_ID = {
    EVENT_TIME: "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
    COMMIT_TIME: "ce9acb64-bde0-424c-9b91-f6ebba25356d",
}


def default_merge_mode(ordering_field: str | None) -> MergeMode:
    """Hudi 1.x's default: event time when there is an ordering field, commit time otherwise."""
    return EVENT_TIME if ordering_field else COMMIT_TIME


def _merge_mode(props: dict[str, str], ordering_field: str | None) -> str:
    """The table's merge mode: recorded, or implied by its payload class, or Hudi's default."""
    if "hoodie.record.merge.mode" in props:
        return props["hoodie.record.merge.mode"].upper()
    payload = props.get("hoodie.compaction.payload.class")
    if payload:
        modes = {cls: mode for mode, cls in PAYLOAD_CLASS.items()}
        return modes.get(payload, f"CUSTOM ({payload})")
    return default_merge_mode(ordering_field)


def _split_fields(value: str | None) -> list[str]:
    return [f for f in (value or "").split(",") if f]


# hoodie.table.keygenerator.type of a version 8 table, by key generator class (Hudi's KeyGeneratorType)
_KEY_GENERATOR_TYPES = {
    "SimpleKeyGenerator": "SIMPLE",
    "ComplexKeyGenerator": "COMPLEX",
    "NonpartitionedKeyGenerator": "NON_PARTITION",
    "TimestampBasedKeyGenerator": "TIMESTAMP",
    "CustomKeyGenerator": "CUSTOM",
}


# hoodie.table.type as Hudi writes it, and as older writers abbreviated it
_TABLE_TYPES: dict[str, Literal["COPY_ON_WRITE", "MERGE_ON_READ"]] = {
    "COPY_ON_WRITE": "COPY_ON_WRITE",
    "COW": "COPY_ON_WRITE",
    "MERGE_ON_READ": "MERGE_ON_READ",
    "MOR": "MERGE_ON_READ",
}


class TableConfig(BaseModel):
    """The keys of ``hoodie.properties`` that laketide reads and writes."""

    name: str
    table_type: Literal["COPY_ON_WRITE", "MERGE_ON_READ"] = "COPY_ON_WRITE"
    version: int = 6
    record_key_fields: list[str] = Field(default_factory=list)
    partition_fields: list[str] = Field(default_factory=list)
    ordering_field: str | None = None
    merge_mode: str = COMMIT_TIME
    hive_style_partitioning: bool = False
    urlencode_partitions: bool = False
    populate_meta_fields: bool = True
    base_file_format: str = "parquet"
    database: str = "default"
    create_schema: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)

    @property
    def timeline_layout_version(self) -> int:
        return 1 if self.version < 8 else 2

    @property
    def timeline_dir(self) -> str:
        if self.version < 8:
            return ".hoodie"
        return ".hoodie/" + self.extra.get("hoodie.timeline.path", "timeline")

    @property
    def history_dir(self) -> str:
        """Version 8: the LSM history archived instants go to (``hoodie.timeline.history.path``, under the timeline)."""
        return posixpath.join(self.timeline_dir, self.extra.get("hoodie.timeline.history.path", "history"))

    @property
    def archive_dir(self) -> str:
        """Where archived instants go (``hoodie.archivelog.folder``, under ``.hoodie``)."""
        return ".hoodie/" + self.extra.get("hoodie.archivelog.folder", "archived")

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> TableConfig:
        missing = [k for k in ("hoodie.table.name", "hoodie.table.type", "hoodie.table.version") if k not in props]
        if missing:
            raise ValueError(f"hoodie.properties lacks required keys: {', '.join(missing)}")
        table_type = _TABLE_TYPES.get(props["hoodie.table.type"].upper())
        if table_type is None:
            raise ValueError(
                f"hoodie.table.type {props['hoodie.table.type']!r} is neither COPY_ON_WRITE nor MERGE_ON_READ"
            )
        keygen = props.get("hoodie.table.keygenerator.class", "") + props.get("hoodie.table.keygenerator.type", "")
        partitions = _split_fields(props.get("hoodie.table.partition.fields"))
        if "NonpartitionedKeyGenerator" in keygen or "NON_PARTITION" in keygen:
            partitions = []
        ordering = props.get("hoodie.table.ordering.fields") or props.get("hoodie.table.precombine.field")
        return cls(
            name=props["hoodie.table.name"],
            table_type=table_type,
            version=int(props["hoodie.table.version"]),
            record_key_fields=_split_fields(props.get("hoodie.table.recordkey.fields")),
            partition_fields=partitions,
            ordering_field=ordering or None,
            merge_mode=_merge_mode(props, ordering or None),
            hive_style_partitioning=props.get("hoodie.datasource.write.hive_style_partitioning", "false") == "true",
            urlencode_partitions=props.get("hoodie.datasource.write.partitionpath.urlencode", "false") == "true",
            populate_meta_fields=props.get("hoodie.populate.meta.fields", "true") == "true",
            base_file_format=props.get("hoodie.table.base.file.format", "parquet").lower(),
            database=props.get("hoodie.database.name", "default"),
            create_schema=props.get("hoodie.table.create.schema"),
            extra=props,
        )

    @property
    def key_generator(self) -> str:
        """The key generator class the table records, or the one its key and partition fields imply."""
        return self.extra.get("hoodie.table.keygenerator.class") or self._key_generator()

    @property
    def complex_key(self) -> bool:
        """Whether keys are ``field:value`` pairs (``ComplexKeyGenerator``), whatever the number of key fields."""
        return self.key_generator.endswith("ComplexKeyGenerator")

    @property
    def virtual_keys(self) -> VirtualKeys | None:
        """How stored rows get their keys when the table has no meta columns (None when it has them)."""
        if self.populate_meta_fields:
            return None
        return VirtualKeys(tuple(self.record_key_fields), self.complex_key)

    def _key_generator(self) -> str:
        if len(self.record_key_fields) > 1 or len(self.partition_fields) > 1:
            return "org.apache.hudi.keygen.ComplexKeyGenerator"
        if self.partition_fields:
            return "org.apache.hudi.keygen.SimpleKeyGenerator"
        return "org.apache.hudi.keygen.NonpartitionedKeyGenerator"

    def to_properties(self) -> dict[str, str]:
        props = dict(self.extra)
        props.update(
            {
                "hoodie.table.name": self.name,
                "hoodie.table.type": self.table_type,
                "hoodie.table.version": str(self.version),
                "hoodie.timeline.layout.version": str(self.timeline_layout_version),
                "hoodie.table.recordkey.fields": ",".join(self.record_key_fields),
                "hoodie.table.partition.fields": ",".join(self.partition_fields),
                "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style_partitioning).lower(),
                "hoodie.datasource.write.partitionpath.urlencode": str(self.urlencode_partitions).lower(),
                "hoodie.datasource.write.drop.partition.columns": "false",
                "hoodie.populate.meta.fields": str(self.populate_meta_fields).lower(),
                "hoodie.table.base.file.format": self.base_file_format.upper(),
                "hoodie.database.name": self.database,
                "hoodie.archivelog.folder": "archived",
                "hoodie.table.timeline.timezone": "UTC",
                "hoodie.table.checksum": str(table_checksum(self.database, self.name)),
            }
        )
        props.setdefault("hoodie.table.keygenerator.class", self._key_generator())
        if self.ordering_field:
            props["hoodie.table.precombine.field"] = self.ordering_field
        if self.merge_mode in PAYLOAD_CLASS:
            props["hoodie.record.merge.mode"] = self.merge_mode
            props["hoodie.compaction.payload.class"] = PAYLOAD_CLASS[self.merge_mode]
            props["hoodie.record.merge.strategy.id"] = MERGE_STRATEGY_ID[self.merge_mode]
        if self.create_schema:
            props["hoodie.table.create.schema"] = self.create_schema
        if self.version >= 8:
            props.update(self._version_8_properties(props))
        return props

    def _version_8_properties(self, props: dict[str, str]) -> dict[str, str]:
        """What a version 8 table records besides (``HoodieTableConfig`` of Hudi 1.0; a table made version 8 keeps
        the version it began at)."""
        return {
            "hoodie.table.initial.version": props.get("hoodie.table.initial.version", str(self.version)),
            "hoodie.timeline.path": props.get("hoodie.timeline.path", "timeline"),
            "hoodie.timeline.history.path": props.get("hoodie.timeline.history.path", "history"),
            "hoodie.table.keygenerator.type": _KEY_GENERATOR_TYPES.get(
                props["hoodie.table.keygenerator.class"].rsplit(".", 1)[-1], "SIMPLE"
            ),
        }

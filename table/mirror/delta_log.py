"""A Delta Lake transaction log (``_delta_log/``) naming a table's parquet files.

The log is written the way the Delta protocol (PROTOCOL.md in delta-io/delta)
describes it: one JSON file of actions per version, ``{version:020}.json``,
written only if absent; a parquet checkpoint of the whole state every
``CHECKPOINT_INTERVAL`` versions with ``_last_checkpoint`` pointing at it.
Paths are relative to the table root, as Apache XTable writes them for Hudi
tables. Schemas are Delta's (Spark's) JSON form of the Arrow schema the
parquet files store; stats come from the parquet footers.
"""

from __future__ import annotations

import json
import posixpath
import re
import urllib.parse
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.storage.io import FileIO

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = posixpath.join(LOG_DIR, "_last_checkpoint")
CHECKPOINT_INTERVAL = 10
_VERSION_FILE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


def commit_path(version: int) -> str:
    return posixpath.join(LOG_DIR, f"{version:020d}.json")


def checkpoint_path(version: int) -> str:
    return posixpath.join(LOG_DIR, f"{version:020d}.checkpoint.parquet")


# -- schema -------------------------------------------------------------------


def relative_uri(path: str) -> str:
    """A table-relative file path as the relative URI Delta's ``add.path`` holds."""
    return urllib.parse.quote(path, safe="/=:@!$&'()*+,;-._~")


@dataclass
class LogState:
    """The table as of one version: its live files, metadata and protocol, and the last commitInfo."""

    version: int = -1
    files: dict[str, dict] = field(default_factory=dict)  # add.path -> add action
    removed: dict[str, dict] = field(default_factory=dict)  # tombstones since the last checkpoint
    metadata: dict | None = None
    protocol: dict | None = None
    commit_info: dict | None = None

    def apply(self, version: int, actions: list[dict]) -> None:
        for action in actions:
            if "add" in action:
                self.files[action["add"]["path"]] = action["add"]
                self.removed.pop(action["add"]["path"], None)
            elif "remove" in action:
                self.files.pop(action["remove"]["path"], None)
                self.removed[action["remove"]["path"]] = action["remove"]
            elif "metaData" in action:
                self.metadata = action["metaData"]
            elif "protocol" in action:
                self.protocol = action["protocol"]
            elif "commitInfo" in action:
                self.commit_info = action["commitInfo"]
        self.version = version


def new_metadata(
    name: str, schema: dict, partition_columns: list[str], created_ms: int, table_id: str | None = None
) -> dict:
    return {
        "id": table_id or str(uuid.uuid4()),
        "name": name,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": partition_columns,
        "configuration": {},
        "createdTime": created_ms,
    }


class DeltaLog:
    """Reads and appends the versions of one table's Delta log through ``FileIO``."""

    def __init__(self, io: FileIO):
        self.io = io

    def versions(self) -> list[int]:
        if not self.io.exists(LOG_DIR):
            return []
        found = (_VERSION_FILE.match(e.name) for e in self.io.list_dir(LOG_DIR) if not e.is_dir)
        return sorted(int(m.group(1)) for m in found if m)

    def read_version(self, version: int) -> list[dict]:
        return [json.loads(line) for line in self.io.read_text(commit_path(version)).splitlines() if line.strip()]

    def _last_checkpoint(self) -> int | None:
        if not self.io.is_file(LAST_CHECKPOINT):
            return None
        return int(json.loads(self.io.read_text(LAST_CHECKPOINT))["version"])

    def state(self) -> LogState:
        """The latest state: the last checkpoint, then every version after it."""
        state = LogState()
        start = self._last_checkpoint()
        if start is not None:
            state = self._read_checkpoint(start)
        for version in self.versions():
            if version > state.version:
                state.apply(version, self.read_version(version))
        return state

    def write_version(self, version: int, actions: list[dict]) -> None:
        """Append one version; it fails if the version exists (Delta's mutual exclusion on commit files)."""
        body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
        self.io.write_atomic(commit_path(version), body.encode(), overwrite=False)

    # -- checkpoints --------------------------------------------------------

    def write_checkpoint(self, state: LogState) -> None:
        if state.metadata is None or state.protocol is None:
            raise ValueError(f"version {state.version} of the Delta log has no metaData or protocol to checkpoint")
        rows = [{"protocol": state.protocol}, {"metaData": _checkpoint_metadata(state.metadata)}]
        rows += [{"add": _checkpoint_add(a)} for a in state.files.values()]
        rows += [{"remove": _checkpoint_remove(r)} for r in state.removed.values()]
        table = pa.Table.from_pylist(rows, schema=_checkpoint_schema(state.protocol))
        with self.io.open_output(checkpoint_path(state.version)) as out:
            pq.write_table(table, out)
        self.io.write_atomic(
            LAST_CHECKPOINT, json.dumps({"version": state.version, "size": len(rows)}).encode(), overwrite=True
        )

    def _read_checkpoint(self, version: int) -> LogState:
        with self.io.open_input(checkpoint_path(version)) as f:
            rows = pq.read_table(f).to_pylist()
        state = LogState(version=version)
        for row in rows:
            if row.get("add"):
                add = {k: v for k, v in row["add"].items() if v is not None}
                add["partitionValues"] = dict(add.get("partitionValues") or [])
                state.files[add["path"]] = add
            elif row.get("remove"):
                remove = {k: v for k, v in row["remove"].items() if v is not None}
                remove["partitionValues"] = dict(remove.get("partitionValues") or [])
                state.removed[remove["path"]] = remove
            elif row.get("metaData"):
                meta = dict(row["metaData"])
                meta["format"] = {
                    "provider": meta["format"]["provider"],
                    "options": dict(meta["format"].get("options") or []),
                }
                meta["configuration"] = dict(meta.get("configuration") or [])
                state.metadata = meta
            elif row.get("protocol"):
                state.protocol = {k: v for k, v in row["protocol"].items() if v is not None}
        return state

    def delete_before(self, version: int) -> int:
        """Delete the commit and checkpoint files of versions below ``version`` (a checkpoint's): the log's
        retention."""
        deleted = 0
        for entry in self.io.list_dir(LOG_DIR):
            m = _VERSION_FILE.match(entry.name) or _CHECKPOINT_FILE.match(entry.name)
            if m and int(m.group(1)) < version:
                deleted += self.io.delete(entry.path)
        return deleted


_MAP = pa.map_(pa.string(), pa.string())


def _checkpoint_schema(protocol: dict | None) -> pa.Schema:
    protocol_fields = [pa.field("minReaderVersion", pa.int32()), pa.field("minWriterVersion", pa.int32())]
    if protocol and "readerFeatures" in protocol:
        protocol_fields += [
            pa.field("readerFeatures", pa.list_(pa.string())),
            pa.field("writerFeatures", pa.list_(pa.string())),
        ]
    return pa.schema(
        [
            pa.field("protocol", pa.struct(protocol_fields)),
            pa.field(
                "metaData",
                pa.struct(
                    [
                        pa.field("id", pa.string()),
                        pa.field("name", pa.string()),
                        pa.field("description", pa.string()),
                        pa.field("format", pa.struct([pa.field("provider", pa.string()), pa.field("options", _MAP)])),
                        pa.field("schemaString", pa.string()),
                        pa.field("partitionColumns", pa.list_(pa.string())),
                        pa.field("configuration", _MAP),
                        pa.field("createdTime", pa.int64()),
                    ]
                ),
            ),
            pa.field(
                "add",
                pa.struct(
                    [
                        pa.field("path", pa.string()),
                        pa.field("partitionValues", _MAP),
                        pa.field("size", pa.int64()),
                        pa.field("modificationTime", pa.int64()),
                        pa.field("dataChange", pa.bool_()),
                        pa.field("stats", pa.string()),
                    ]
                ),
            ),
            pa.field(
                "remove",
                pa.struct(
                    [
                        pa.field("path", pa.string()),
                        pa.field("deletionTimestamp", pa.int64()),
                        pa.field("dataChange", pa.bool_()),
                        pa.field("extendedFileMetadata", pa.bool_()),
                        pa.field("partitionValues", _MAP),
                        pa.field("size", pa.int64()),
                    ]
                ),
            ),
        ]
    )


def _pairs(mapping: dict | None) -> list[tuple[str, str | None]]:
    return list((mapping or {}).items())


def _checkpoint_metadata(meta: dict) -> dict:
    return {
        **meta,
        "format": {**meta["format"], "options": _pairs(meta["format"].get("options"))},
        "configuration": _pairs(meta.get("configuration")),
    }


def _checkpoint_add(add: dict) -> dict:
    return {**add, "partitionValues": _pairs(add.get("partitionValues"))}


def _checkpoint_remove(remove: dict) -> dict:
    return {**remove, "partitionValues": _pairs(remove.get("partitionValues"))}

"""The archived timeline of a version 8 table: Hudi 1.x's LSM history under ``.hoodie/timeline/history/``.

As Hudi 1.0 lays it out (``hudi-common/.../common/table/timeline/LSMTimeline.java``, the writer
``LSMTimelineWriter``, and the "LSM Timeline" section of Hudi's 1.0 storage format spec):

- ``<min instant>_<max completion>_<layer>.parquet``: one row per archived action, ``HoodieLSMTimelineInstant``
  (``hudi-common/src/main/avro/HoodieLSMTimelineInstant.avsc``): its instant and completion times, its action,
  the completed file's bytes as ``metadata`` and the requested file's (its plan) as ``plan``;
- ``manifest_<N>``: the JSON list of the files (name and length) snapshot ``N`` is made of;
- ``_version_``: the number of the current snapshot, replaced once its manifest is written.

Each archival adds a file to layer 0 and a snapshot. Once layer 0 holds ``LAYER_FILES`` files they are merged into
one file of layer 1 (and so on up: Hudi's universal compaction), and only the files and manifests of the newest
``KEPT_SNAPSHOTS`` snapshots stay, so the history's file count stays bounded however long the table lives. A crash
at any point leaves a current snapshot whole: the files of one not yet named by ``_version_`` are never read.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from laketide.table.format.instant import Instant, State
from laketide.table.storage.io import FileIO

VERSION_FILE = "_version_"
LAYER_FILES = 10  # files a layer holds before they are merged into one of the next (Hudi's default)
KEPT_SNAPSHOTS = 3  # snapshots whose files stay, for readers that loaded an older one (Hudi keeps 3)
_MANIFEST = re.compile(r"^manifest_(\d+)$")
_FILE = re.compile(r"^(\d+)_(\d+)_(\d+)\.parquet$")

# HoodieLSMTimelineInstant.avsc, which Hudi's parquet-avro reader resolves against
AVRO_SCHEMA = {
    "type": "record",
    "name": "HoodieLSMTimelineInstant",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "instantTime", "type": ["null", "string"], "default": None},
        {"name": "completionTime", "type": ["null", "string"], "default": None},
        {"name": "action", "type": ["null", "string"], "default": None},
        {"name": "metadata", "type": ["null", "bytes"], "default": None},
        {"name": "plan", "type": ["null", "bytes"], "default": None},
        {"name": "version", "type": "int", "default": 1},
    ],
}
SCHEMA = pa.schema(
    [
        ("instantTime", pa.string()),
        ("completionTime", pa.string()),
        ("action", pa.string()),
        ("metadata", pa.binary()),
        ("plan", pa.binary()),
        pa.field("version", pa.int32(), nullable=False),
    ],
    metadata={"parquet.avro.schema": json.dumps(AVRO_SCHEMA)},
)


@dataclass(frozen=True)
class HistoryEntry:
    """One archived action: its completed file's bytes (``metadata``) and its requested file's (``plan``)."""

    instant_time: str
    completion_time: str
    action: str
    metadata: bytes | None = None
    plan: bytes | None = None

    @property
    def instant(self) -> Instant:
        return Instant(self.instant_time, self.action, State.COMPLETED, self.completion_time)


class LsmHistory:
    """The LSM history at ``path`` (a table's ``.hoodie/timeline/history``), read and appended to."""

    def __init__(self, io: FileIO, path: str):
        self.io = io
        self.path = path

    def snapshot(self) -> int:
        """The current snapshot's number (``_version_``, or the newest manifest when it is unreadable); -1: none."""
        try:
            return int(self.io.read_bytes(self._at(VERSION_FILE)).decode().strip())
        except (FileNotFoundError, ValueError):
            return max(self._manifests(), default=-1)

    def files(self, snapshot: int | None = None) -> list[str]:
        """The file names of a snapshot (default: the current one), oldest first."""
        snapshot = self.snapshot() if snapshot is None else snapshot
        if snapshot < 0:
            return []
        manifest = json.loads(self.io.read_bytes(self._at(f"manifest_{snapshot}")))
        return sorted(entry["fileName"] for entry in manifest.get("files", []))

    def entries(self) -> list[HistoryEntry]:
        """Every archived action of the current snapshot, oldest first."""
        found = [entry for name in self.files() for entry in self._read(name)]
        return sorted(found, key=lambda e: (e.instant_time, e.action))

    def last_file_instants(self) -> set[Instant]:
        """The actions of the newest file of layer 0: what the last archival wrote."""
        layer0 = [name for name in self.files() if _layer(name) == 0]
        if not layer0:
            return set()
        newest = max(layer0, key=lambda name: _FILE.match(name)[2])  # type: ignore[index]
        return {entry.instant for entry in self._read(newest)}

    def append(self, entries: Iterable[HistoryEntry]) -> str | None:
        """Add ``entries`` as a new file of layer 0 and a snapshot that holds it; then merge a full layer and drop
        what no kept snapshot names. The new file's path, or ``None`` when there is nothing to add."""
        entries = sorted(entries, key=lambda e: (e.instant_time, e.action))
        if not entries:
            return None
        self.io.makedirs(self.path)
        name = self._write(entries, 0)
        current = self.files()
        self._publish([*current, name])
        self._merge_full_layers()
        self._drop_unreferenced()
        return self._at(name)

    def _write(self, entries: list[HistoryEntry], layer: int) -> str:
        low = min(e.instant_time for e in entries)
        high = max(e.completion_time for e in entries)
        name = f"{low}_{high}_{layer}.parquet"
        table = pa.Table.from_pylist(
            [
                {
                    "instantTime": e.instant_time,
                    "completionTime": e.completion_time,
                    "action": e.action,
                    "metadata": e.metadata,
                    "plan": e.plan,
                    "version": 1,
                }
                for e in entries
            ],
            SCHEMA,
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        self.io.write_atomic(self._at(name), buffer.getvalue(), overwrite=True)
        return name

    def _publish(self, names: list[str]) -> None:
        """A new snapshot of ``names``: its manifest first, then ``_version_`` naming it."""
        snapshot = max([self.snapshot(), *self._manifests()], default=-1) + 1
        manifest = {"files": [{"fileName": n, "fileLen": self.io.size(self._at(n))} for n in sorted(names)]}
        self.io.write_atomic(self._at(f"manifest_{snapshot}"), json.dumps(manifest, indent=2).encode())
        self.io.write_atomic(self._at(VERSION_FILE), str(snapshot).encode(), overwrite=True)

    def _merge_full_layers(self) -> None:
        layer = 0
        while True:
            names = self.files()
            full = sorted(n for n in names if _layer(n) == layer)
            if len(full) < LAYER_FILES:
                return
            merged = self._write([e for n in full for e in self._read(n)], layer + 1)
            self._publish([n for n in names if n not in full] + [merged])
            layer += 1

    def _drop_unreferenced(self) -> None:
        """Files and manifests no kept snapshot names (the newest ``KEPT_SNAPSHOTS``)."""
        manifests = sorted(self._manifests())
        kept = manifests[-KEPT_SNAPSHOTS:]
        named = {name for snapshot in kept for name in self.files(snapshot)}
        for entry in self.io.list_dir(self.path):
            gone_manifest = (m := _MANIFEST.match(entry.name)) is not None and int(m[1]) not in kept
            gone_file = _FILE.match(entry.name) is not None and entry.name not in named
            if not entry.is_dir and (gone_manifest or gone_file):
                self.io.delete(entry.path)

    def _read(self, name: str) -> list[HistoryEntry]:
        rows = pq.read_table(io.BytesIO(self.io.read_bytes(self._at(name)))).to_pylist()
        return [
            HistoryEntry(r["instantTime"], r["completionTime"], r["action"], r.get("metadata"), r.get("plan"))
            for r in rows
        ]

    def _manifests(self) -> list[int]:
        """The snapshot numbers of the manifests there (a folder not yet made lists empty)."""
        return [int(m[1]) for e in self.io.list_dir(self.path) if (m := _MANIFEST.match(e.name)) is not None]

    def _at(self, name: str) -> str:
        return posixpath.join(self.path, name)


def _layer(name: str) -> int:
    m = _FILE.match(name)
    return int(m[3]) if m else 0

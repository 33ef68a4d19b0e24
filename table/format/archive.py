"""The archived timeline: instants moved out of ``.hoodie/`` into Hudi log files.

As Hudi's ``TimelineArchiverV1`` writes it for table versions up to 8:
``.hoodie/archived/.commits_.archive.<version>_1-0-1``, each file one or
more Avro data blocks of ``HoodieArchivedMetaEntry`` records (one record per
timeline file: requested, inflight and completed), built as
``MetadataConversionUtils.createMetaWrapper`` builds them. Each archival adds
one block to the newest file until it reaches ``MAX_FILE_BYTES``, then starts
the next version (Hudi's log writer appends where the storage can, and rolls
over past a size threshold).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from laketide.table.format import avro_models
from laketide.table.format.commit import CommitMetadata
from laketide.table.format.commit_avro import commit_record
from laketide.table.format.instant import (
    CLEAN,
    COMMIT,
    COMPACTION,
    DELTA_COMMIT,
    REPLACE_COMMIT,
    ROLLBACK,
    SAVEPOINT,
    Instant,
    State,
)
from laketide.table.format.logfile import CorruptLog, avro_data_block, avro_records, read_blocks
from laketide.table.storage.io import FileIO

ENTRY = "HoodieArchivedMetaEntry"
MAX_FILE_BYTES = 8 * 2**20
WRITE_TOKEN = "1-0-1"  # HoodieLogFormat.UNKNOWN_WRITE_TOKEN
_FILE = re.compile(r"^\.commits_\.archive\.(\d+)_[\d-]+$")
_STAT_FIELDS = tuple(f["name"] for f in avro_models.DEFINITIONS["HoodieWriteStat"]["fields"])


def archive_file_name(version: int) -> str:
    return f".commits_.archive.{version}_{WRITE_TOKEN}"


def archive_file_version(name: str) -> int | None:
    match = _FILE.match(name)
    return int(match.group(1)) if match else None


def _avro_commit(body: bytes, replace: bool) -> dict:
    """Commit metadata as Hudi converts its JSON to the Avro record (unknown JSON fields dropped)."""
    return commit_record(CommitMetadata.from_bytes(body), replace, _STAT_FIELDS, compacted=False)


def archived_entry(instant: Instant, body: bytes) -> dict:
    """The ``HoodieArchivedMetaEntry`` of one timeline file."""
    entry = {
        "commitTime": instant.timestamp,
        "actionType": instant.action,
        "actionState": instant.state.value,
        "version": 1,
    }
    if instant.is_completed and not body:
        return entry  # a completed file left empty by a crash: Hudi archives it bare too
    action, state = instant.action, instant.state
    if action in (COMMIT, DELTA_COMMIT):
        entry["hoodieCommitMetadata"] = _avro_commit(body, replace=False)
    elif action == REPLACE_COMMIT and state is State.COMPLETED:
        entry["hoodieReplaceCommitMetadata"] = _avro_commit(body, replace=True)
    elif action == REPLACE_COMMIT and state is State.REQUESTED and body:
        entry["hoodieRequestedReplaceMetadata"] = avro_models.read_container(body, "HoodieRequestedReplaceMetadata")
    elif action == CLEAN and state is State.COMPLETED:
        entry["hoodieCleanMetadata"] = avro_models.read_container(body, "HoodieCleanMetadata")
    elif action == CLEAN and body:
        entry["hoodieCleanerPlan"] = avro_models.read_container(body, "HoodieCleanerPlan")
    elif action == ROLLBACK and state is State.COMPLETED:
        entry["hoodieRollbackMetadata"] = avro_models.read_container(body, "HoodieRollbackMetadata")
    elif action == COMPACTION and body:
        entry["hoodieCompactionPlan"] = avro_models.read_container(body, "HoodieCompactionPlan")
    elif action == SAVEPOINT:
        entry["hoodieSavePointMetadata"] = avro_models.read_container(body, "HoodieSavepointMetadata")
    return entry


def archived_instant(entry: dict) -> Instant:
    """The timeline file an archived entry stands for."""
    return Instant(entry["commitTime"], entry["actionType"], State(entry.get("actionState") or State.COMPLETED.value))


@dataclass(frozen=True)
class ArchivedInstant:
    instant: Instant
    entry: dict

    @property
    def extra_metadata(self) -> dict[str, str]:
        meta = self.entry.get("hoodieCommitMetadata") or self.entry.get("hoodieReplaceCommitMetadata") or {}
        return meta.get("extraMetadata") or {}


class ArchivedTimeline:
    """The archive log files of a table, read and appended to."""

    def __init__(self, io: FileIO, archive_dir: str):
        self.io = io
        self.dir = archive_dir

    def files(self) -> list[tuple[int, str]]:
        """(version, path) of every archive file, oldest first."""
        found = []
        for entry in self.io.list_dir(self.dir):
            version = archive_file_version(entry.name)
            if version is not None and not entry.is_dir:
                found.append((version, entry.path))
        return sorted(found)

    def read_file(self, path: str) -> list[ArchivedInstant]:
        out = []
        for block in read_blocks(self.io.read_bytes(path)):
            out += [
                ArchivedInstant(archived_instant(entry), entry)
                for entry in avro_records(block, avro_models.schema(ENTRY))
            ]
        return out

    def instants(self) -> list[ArchivedInstant]:
        """Every archived timeline file, oldest archival first. A torn last file (a crash while writing) is skipped."""
        out = []
        for _, path in self.files():
            try:
                out += self.read_file(path)
            except CorruptLog:
                continue
        return out

    def last_block_instants(self) -> set[Instant]:
        """The instants of the newest block: what the last archival wrote."""
        files = self.files()
        if not files:
            return set()
        try:
            blocks = list(read_blocks(self.io.read_bytes(files[-1][1])))
        except CorruptLog:
            return set()
        return {archived_instant(entry) for entry in avro_records(blocks[-1], avro_models.schema(ENTRY))}

    def append(self, entries: Iterable[dict], max_file_bytes: int = MAX_FILE_BYTES) -> str | None:
        """Add ``entries`` as one block; its file's path, or ``None`` when there is nothing to write.

        The block goes at the end of the newest archive file while that stays
        under ``max_file_bytes`` (as Hudi's log writer appends blocks), else
        into the next version, so the number of files grows with the bytes
        archived, not with the archivals. The file is rewritten whole and
        renamed into place: a crash leaves the old file or the new one, never
        a torn block.
        """
        entries = list(entries)
        if not entries:
            return None
        block = avro_data_block(ENTRY, entries).to_bytes()
        files = self.files()
        if files and self.io.size(files[-1][1]) + len(block) <= max_file_bytes:
            path = files[-1][1]
            current = self.io.read_bytes(path)
            try:
                list(read_blocks(current))
            except CorruptLog:
                pass  # a torn file another writer left: start the next version instead
            else:
                self.io.write_atomic(path, current + block, overwrite=True)
                return path
        version = files[-1][0] + 1 if files else 1
        path = posixpath.join(self.dir, archive_file_name(version))
        self.io.makedirs(self.dir)
        self.io.write_atomic(path, block, overwrite=False)
        return path

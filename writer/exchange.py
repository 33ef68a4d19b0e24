"""Rows handed from one stage's tasks to the next through files: the shuffle of Spark's tasks path.

A task writes what it hands on as one Arrow IPC file, a run of record batches for each destination task,
and answers with a ``Handoff``: the file and each batch's destination. The driver collects the answers,
a few numbers per task, and gives them to the next stage, whose tasks read only their own batches: the
IPC file's footer locates each batch, so that is a memory map on a local disk and a few range reads on
an object store.

Spark's shuffle of Arrow parts moved every byte from the Python worker into the JVM and back out, twice
per hop: on ``local[2]``, two hops of a 1M-row micro-batch took 1.7 s (1.5 s as a Python RDD), through
files 0.6 to 0.7 s, Spark's scheduling of the stages included (``bench/tasks_path.py``'s floors). The JVM then holds no
rows, only the tasks' answers.

Files are named by task attempt, and only the attempts whose answers reached the driver are read, so a
retried task never reads what a failed attempt half wrote. The files live on storage every executor
reaches (``write.exchange_dir``), so losing an executor loses none of them. A micro-batch's folder is
deleted when the micro-batch ends, and the job deletes what a crash left when it starts.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from laketide.table.storage.io import FileIO

# what a task answers per file it wrote
HANDOFF_FIELDS = [pa.field("path", pa.string()), pa.field("dests", pa.list_(pa.int32()))]
# the record batches a file holds, at most this many rows each: a reader takes its batches, not the file
BATCH_ROWS = 1 << 17


@dataclass(frozen=True)
class Handoff:
    """One file a task wrote: its path under the micro-batch's folder and the destination of each record batch in it."""

    path: str
    dests: tuple[int, ...]

    def to_row(self) -> dict:
        return {"path": self.path, "dests": list(self.dests)}

    @classmethod
    def from_row(cls, row: dict) -> Handoff:
        return cls(row["path"], tuple(row["dests"]))


class Exchange:
    """The folder (any URI ``FileIO`` opens) through which one micro-batch's stages hand rows on.

    Pickled into every task: it holds only the folder's URI and the storage options, and opens its
    ``FileIO`` where it is used."""

    def __init__(self, root: str, options: dict[str, str]):
        self.root = root.rstrip("/")
        self.options = dict(options)

    @classmethod
    def for_batch(cls, exchange_dir: str, batch_id: int, options: dict[str, str]) -> Exchange:
        """A new folder for micro-batch ``batch_id``: a replayed micro-batch never reads its failed run's files."""
        return cls(posixpath.join(exchange_dir.rstrip("/"), f"batch-{batch_id}-{uuid.uuid4().hex[:12]}"), options)

    def _io(self) -> FileIO:
        return FileIO.for_uri(self.root, self.options)

    @property
    def on_disk(self) -> bool:
        """Whether the folder is on a disk (local, or shared as NFS is) that tasks memory-map: reading
        a file's batches then costs nothing, however many tasks read it; on an object store each read is sent."""
        return self._io().is_local

    def writer(self, name: str) -> HandoffWriter:
        """A file ``name`` to hand rows on in, destination by destination."""
        return HandoffWriter(self._io(), name)

    def put(self, name: str, parts: Iterable[tuple[int, pa.Table]]) -> Handoff | None:
        """Write each (destination, rows) of ``parts`` to the file ``name``; ``None`` when none has rows."""
        writer = self.writer(name)
        try:
            for dest, rows in parts:
                writer.put(dest, rows)
        finally:
            handoff = writer.close()
        return handoff

    def tables(self, handoffs: Iterable[Handoff], dest: int | None) -> list[pa.Table]:
        """Every batch each of ``handoffs`` sent to ``dest`` (``None``: to any): a table per file, none for
        a file without such batches."""
        io = self._io()
        tables = []
        for handoff in handoffs:
            mine = [i for i, d in enumerate(handoff.dests) if dest is None or d == dest]
            if mine:
                source = pa.memory_map(io.full_path(handoff.path)) if io.is_local else io.open_input(handoff.path)
                reader = pa.ipc.open_file(source)
                tables.append(pa.Table.from_batches([reader.get_batch(i) for i in mine]))
        return tables

    def take(self, handoffs: Iterable[Handoff], dest: int | None) -> pa.Table | None:
        """Every batch the ``handoffs`` sent to ``dest`` (``None``: to any), as one table; ``None`` when there are
        none."""
        tables = self.tables(handoffs, dest)
        return pa.concat_tables(tables) if tables else None

    def delete(self) -> None:
        """Delete the folder and every file in it: the micro-batch ended, or a crash left it."""
        io = self._io()
        io.delete_dir("")


class HandoffWriter:
    """One task's file of rows for the next stage, written a destination's rows at a time. Object stores
    get lz4 inside the file, which halves the bytes sent; a local disk does not (two hops of a 1M-row
    micro-batch took 1.02 s with it, 0.76 s without)."""

    def __init__(self, io: FileIO, name: str):
        self.io, self.name = io, name
        self.dests: list[int] = []
        self._sink = self._writer = None

    def put(self, dest: int, rows: pa.Table) -> None:
        for batch in rows.to_batches(max_chunksize=BATCH_ROWS):
            if not batch.num_rows:
                continue
            if self._writer is None:
                self._sink = self.io.open_output(self.name)
                options = pa.ipc.IpcWriteOptions(compression=None if self.io.is_local else "lz4")
                self._writer = pa.ipc.new_file(self._sink, rows.schema, options=options)
            self._writer.write_batch(batch)
            self.dests.append(dest)

    def close(self) -> Handoff | None:
        """Finish the file; where it went, or ``None`` when no rows were put (and no file written)."""
        try:
            if self._writer is not None:
                self._writer.close()
        finally:
            if self._sink is not None:
                self._sink.close()
        return Handoff(self.name, tuple(self.dests)) if self.dests else None

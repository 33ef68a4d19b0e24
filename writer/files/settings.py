"""What the data files of an instant are written with: the plan's settings every file shares (``FileSettings``),
and one write task's part in the instant (``TaskFiles``: its number, its attempt's token, its sequence numbers, the
columns its new files dictionary-encode)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.index.bloom import BloomSpec
from laketide.index.hashing import compiled
from laketide.table.format.encoding import BASE_FILE_CODEC, LOG_BLOCK_CODEC
from laketide.table.format.files import write_token
from laketide.table.format.keygen import VirtualKeys


@dataclass(frozen=True)
class FileSettings:
    """From the instant's plan: the table's schema (without the meta columns) and its Avro form, the bloom filters
    new base files carry, the ordering field under event-time ordering (a stored row with a higher value wins; a
    delete then carries its ordering value), the codecs of base files and log blocks, a change feed's stand-in for
    a value it did not send (replaced by the stored value, ``table.unchanged``), and the key columns a table
    without meta columns leaves virtual (``VirtualKeys``)."""

    table_schema: pa.Schema
    avro_schema: str
    bloom: BloomSpec = field(default_factory=BloomSpec)
    ordering_field: str | None = None
    compression: str = BASE_FILE_CODEC
    log_compression: str = LOG_BLOCK_CODEC
    placeholder: str | None = None
    virtual_keys: VirtualKeys | None = None


class SequenceNumbers:
    """The ``_hoodie_commit_seqno`` values of one write task: ``{instant}_{task}_{n}``, ``n`` counting on across
    every file the task writes, so they are unique within the instant (Hudi runs one Spark partition per file
    group and counts there). They are made for many rows at once and sliced per file: made per file, they cost
    about a tenth of a small log file's write. One per task, used by one thread. ``expected``: the rows the task
    writes, made at once (grown by doubling, they were made twice over: 6% of a write task at 100M keys)."""

    def __init__(self, instant_time: str, task_partition: int, expected: int = 0):
        self.prefix = f"{instant_time}_{task_partition}_"
        self.used = 0
        self._made = self._make(expected) if expected else pa.nulls(0, pa.string())

    def _make(self, n: int) -> pa.Array:
        if compiled is not None:  # written straight into the array's buffers: a fifth of Arrow's cast and join
            offsets, data = compiled.numbered(self.prefix.encode(), 0, n)
            return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
        return pc.binary_join_element_wise(self.prefix, pc.cast(pa.array(np.arange(n)), pa.string()), "")

    def next(self, n: int) -> pa.Array:
        """The next ``n`` sequence numbers."""
        if self.used + n > len(self._made):
            self._made = self._make(max(self.used + n, 2 * len(self._made), 1024))
        taken = self._made.slice(self.used, n)
        self.used += n
        return taken


class TaskFiles:
    """One write task's part in an instant: ``task``, its number; ``token``, this attempt's write token in the file
    names (each attempt has its own, so a retried or speculative one never writes another's file; default, the
    task's); its sequence numbers, shared by the file groups it writes (``expected``: how many rows it writes,
    made at once); ``dictionary``, the columns its new base files dictionary-encode, when decided for the whole
    task (a merge keeps the encodings of the file it replaces). Used by the task's one thread."""

    def __init__(
        self,
        instant_time: str,
        task: int,
        token: str | None = None,
        expected: int = 0,
        dictionary: list[str] | None = None,
    ):
        self.instant_time, self.task, self.token, self.dictionary = instant_time, task, token, dictionary
        self.seqnos = SequenceNumbers(instant_time, task, expected)

    @property
    def write_token(self) -> str:
        return self.token or write_token(self.task)

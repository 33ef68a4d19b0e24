"""A database micro-batch's records split by table, wherever they are: on the driver (``DriverSplit``), or in
Spark's tasks (the adapter's, ``spark/database_tasks.py``), which a snapshot too big for the driver needs.

``Database.write_split`` asks a split which tables have records, the Kafka keys a new table's record key is read
from, and for each table a loader its writer calls (unless the table committed the micro-batch already); records a
failed table leaves, and those of no table, come to the driver to be set aside or counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa

from laketide.config.routes import SourceTable
from laketide.writer.changes.events import Messages
from laketide.writer.changes.routes import Routed
from laketide.writer.micro_batch import LoadedBatch

if TYPE_CHECKING:
    from laketide.writer.job.database import DatabaseTable


class Split(Protocol):
    def tables(self) -> dict[str, SourceTable]:
        """The label of each table with records in the micro-batch, and the source table it holds."""
        ...

    def keys(self, label: str) -> pa.Array:
        """Kafka keys of table ``label``'s records (the first that names columns is a new table's record key)."""
        ...

    def loader(self, table: DatabaseTable) -> Callable[[], LoadedBatch]:
        """What table ``table``'s writer calls for its part of the micro-batch, decoded and prepared."""
        ...

    def records(self, label: str) -> pa.Table:
        """Table ``label``'s records on the driver (Kafka's columns), to set aside when the table failed."""
        ...

    def unrouted(self) -> tuple[pa.Table, Messages] | None:
        """The records of no table on the driver, with their values parsed; ``None`` when there are none."""
        ...


class DriverSplit:
    """A micro-batch read on the driver: ``records`` (contiguous), routed, and each label's positions."""

    def __init__(self, records: pa.Table, routed: Routed, by_table: dict[str, tuple[SourceTable, np.ndarray]]):
        self._records, self._routed, self._by_table = records, routed, by_table

    def tables(self) -> dict[str, SourceTable]:
        return {label: source for label, (source, _) in self._by_table.items()}

    def keys(self, label: str) -> pa.Array:
        return self.records(label)["key"].combine_chunks()

    def loader(self, table: DatabaseTable) -> Callable[[], LoadedBatch]:
        at = self._by_table[table.label][1]
        writer = table.job.writer
        return lambda: writer.decoded_batch(table.decoder, self.records(table.label), self._routed.messages.take(at))

    def records(self, label: str) -> pa.Table:
        return self._records.take(pa.array(self._by_table[label][1]))

    def unrouted(self) -> tuple[pa.Table, Messages] | None:
        at = self._routed.unrouted
        if not len(at):
            return None
        return self._records.take(pa.array(at)), self._routed.messages.take(at)

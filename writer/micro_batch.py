"""What an adapter hands the core for one micro-batch (``LoadedBatch``, around a ``MicroBatch``), and what the core
holds between writing an instant's files and completing it (``StagedWrite``).

A ``MicroBatch`` is the prepared rows wherever they are held: ``writer.driver_batch.DriverBatch`` in the driver's
threads, ``spark.spark_batch.SparkBatch`` in Spark's tasks. The core runs its stages through it and gets back one
small write status per file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from laketide.index.sync import ForeignWrites
from laketide.table.format.commit import WriteStat
from laketide.table.format.instant import COMMIT
from laketide.writer import stages
from laketide.writer.changes.tally import Tally
from laketide.writer.landing import copy_aside
from laketide.writer.report import BatchReport

log = logging.getLogger(__name__)


class MicroBatch(Protocol):
    """The prepared rows of one micro-batch, wherever they are held; ``ran_on`` names who runs its stages."""

    ran_on: str
    tally: Tally  # what its messages held besides rows: those skipped, and the source tables of change events

    @property
    def records(self) -> int: ...

    @property
    def bad_rows(self) -> int: ...

    def write_quarantine(
        self, instant: str, more: list[tuple[str, str]], target: str, options: dict[str, str]
    ) -> None: ...

    def partitions(self) -> list[str]: ...

    def assign_and_write(self, plan: stages.BatchPlan, assigned_schema: pa.Schema) -> list[stages.WriteStatus]: ...

    def bulk_insert(self, plan: stages.BatchPlan) -> list[stages.WriteStatus]: ...

    def release(self) -> None: ...


@dataclass
class LoadedBatch:
    """A micro-batch as read: its rows, the columns of its records, and the landing files set aside."""

    batch: MicroBatch
    incoming: pa.Schema  # the records' columns, timestamps in UTC: what the table's schema evolves by
    data_schema: pa.Schema  # the same columns as the batch's rows hold them
    bad_files: dict[str, str] = field(default_factory=dict)

    def set_aside(self, instant: str, target: str, options: dict[str, str]) -> int:
        """The rows that could not be written, with their reason, and whole landing files that could not be read,
        copied under ``target``; how many of both."""
        batch, bad_files = self.batch, self.bad_files
        if not batch.bad_rows and not bad_files:
            return 0
        unreadable = [(f"unreadable landing file: {why}", path) for path, why in sorted(bad_files.items())]
        batch.write_quarantine(instant, unreadable, target, options)
        copy_aside(bad_files, f"{target}/_files", options)
        log.warning("%d rows and %d files quarantined under %s", batch.bad_rows, len(bad_files), target)
        return batch.bad_rows + len(bad_files)


@dataclass
class StagedWrite:
    """An instant whose files are written and marked, not yet committed (``BatchWriter.commit_staged``)."""

    batch_id: int
    instant: str
    report: BatchReport
    stats: list[WriteStat]
    extra: dict[str, str]
    replaced: dict[str, list[str]]
    written: list[tuple[str, str]]  # (partition, file id) of every file group written
    foreign: ForeignWrites
    action: str = COMMIT  # the instant's action, and Hudi's name of its operation
    operation: str = "UPSERT"

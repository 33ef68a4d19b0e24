"""Every change an operator makes to a table, in one place: rollback, savepoints, restore, clean, compact,
the Delta mirror and Hudi's metadata table.

The CLI, ``laketide serve`` and the running job's API all act through ``Operations``:
- ``Operations.under_lease`` takes the table's lease for one command (refused while a job holds it),
  finishes a restore a crash cut short, and builds the one coordinator the change runs on;
- a running job lends its own coordinator and runs each change between micro-batches (``RunningJob.operations``).

After each change, the table's Delta mirror (where it has one) shows it, whichever way the change came.
It sits in ``writer/`` rather than ``coordinator/`` because compaction writes base files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from laketide.config import CompactionSection, WriteSection
from laketide.coordinator import Coordinator, Lease, LeaseHeld
from laketide.coordinator.cleaner import Cleaner, CleanResult
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.rollback import RollbackResult
from laketide.coordinator.savepoints import RestoreResult, Savepoints
from laketide.index.state import StateIndex
from laketide.table import Table
from laketide.table.errors import Invalid
from laketide.table.format import metadata_table, table_version
from laketide.table.format.clean import Retention
from laketide.table.format.instant import InstantClock
from laketide.table.format.savepoint import SavepointMetadata
from laketide.table.format.table_version import VersionChange
from laketide.table.format.timeline import WRITTEN_VERSIONS
from laketide.table.mirror.delta_log import DeltaLog
from laketide.table.mirror.delta_mirror import DeltaMirror, has_mirror
from laketide.writer.job.compactor import CompactionResult, Compactor

T = TypeVar("T")
Progress = Callable[[int, int], None] | None
log = logging.getLogger(__name__)
OPS_WRITER_ID = "laketide-ops"
COMMAND_WAIT_SECONDS = 90.0  # past the default storage lease's ttl (30 s) and ZooKeeper's session timeout (10 s)


@dataclass
class CompactOutcome:
    scheduled: str | None = None
    compacted: list[CompactionResult] = field(default_factory=list)


@dataclass
class MirrorOutcome:
    written: list[int]
    latest_version: int | None


class BetweenBatches(Protocol):
    """Runs a change where it cannot race a micro-batch, and answers what the change answered."""

    def __call__(self, action: Callable[[], T]) -> T: ...


def _at_once(action: Callable[[], T]) -> T:
    return action()


class Operations:
    """The changes an operator can make, on one coordinator that holds the table's lease."""

    def __init__(
        self,
        coordinator: Coordinator,
        index: StateIndex,
        mirror: DeltaMirror | None = None,
        between_batches: BetweenBatches | None = None,
    ):
        """``between_batches(action)`` runs a change where it cannot race a micro-batch (the job's batch lock)."""
        self.coordinator = coordinator
        self.table = coordinator.table
        self.index = index
        self.mirror = mirror
        self._between: BetweenBatches = between_batches or _at_once

    @classmethod
    @contextmanager
    def under_lease(
        cls,
        table: Table,
        lease: Lease,
        when_held: str = "ask the running job instead",
        take: bool = True,
        metrics: Metrics | None = None,
    ) -> Iterator[Operations]:
        """Take ``lease`` for one command (``take=False``: a dry run, which changes nothing) and release it after.

        A lease a job holds raises ``LeaseHeld`` (a Conflict) with ``when_held`` as the way out. A lease another
        command holds is waited for, up to ``COMMAND_WAIT_SECONDS``: that command may have died (a restore killed
        part way), and its holding runs out; then this one finishes what it left (``resume_restore``)."""
        try:
            if take:
                try:
                    holder = lease.current_holder()
                    by_a_command = holder is not None and holder.job_id == OPS_WRITER_ID
                    if holder is not None and by_a_command:
                        log.warning(
                            "%s is held by another command (%s); waiting up to %.0f s for it to end or, if it "
                            "died, for its holding "
                            "to run out",
                            table.uri,
                            holder.describe(),
                            COMMAND_WAIT_SECONDS,
                        )
                    lease.acquire(timeout=COMMAND_WAIT_SECONDS if by_a_command else 0)
                except LeaseHeld as held:
                    raise LeaseHeld(table.uri, held.holder, when_held) from None
            table = Table.open(table.uri, table.io)  # what the table is once the lease is ours
            index = StateIndex(table.io, 1)
            coordinator = Coordinator(
                table, lease, OPS_WRITER_ID, instant_side_files=index.instant_files, metrics=metrics
            )
            if take:
                Savepoints(coordinator).resume_restore()
            yield cls(coordinator, index, DeltaMirror(table, hold=coordinator.hold) if has_mirror(table.io) else None)
        finally:
            lease.release()

    def _change(self, action: Callable[[], T], changes: bool = True) -> T:
        def then_mirror() -> T:
            result = action()
            if changes and self.mirror is not None:
                self.mirror.catch_up()
            return result

        return self._between(then_mirror)

    def rollback(
        self, instant: str, force: bool = False, dry_run: bool = False, progress: Progress = None
    ) -> RollbackResult:
        """Roll back one instant (``Coordinator.rollback``): refused where it would lose rows, whatever ``force``
        says."""
        return self._change(
            lambda: self.coordinator.rollback(instant, force=force, dry_run=dry_run, progress=progress),
            changes=not dry_run,
        )

    def create_savepoint(
        self, instant: str | None = None, user: str | None = None, comment: str = ""
    ) -> SavepointMetadata:
        return self._change(lambda: Savepoints(self.coordinator).create(instant, user, comment))

    def delete_savepoint(self, instant: str) -> None:
        self._change(lambda: Savepoints(self.coordinator).delete(instant))

    def restore(self, savepoint: str, progress: Progress = None) -> RestoreResult:
        return self._change(lambda: Savepoints(self.coordinator).restore(savepoint, progress))

    def clean(self, retention: Retention, dry_run: bool = False, progress: Progress = None) -> CleanResult:
        cleaner = Cleaner(self.coordinator, retention, self.index.obsolete_runs)
        return self._change(lambda: cleaner.clean(dry_run=dry_run, progress=progress), changes=not dry_run)

    def compact(
        self,
        settings: CompactionSection,
        schedule: bool = True,
        run: bool = True,
        progress: Progress = None,
        write: WriteSection | None = None,
    ) -> CompactOutcome:
        """Schedule a compaction of the slices past ``settings``' thresholds, run the pending ones, or both.
        ``write``: how the new base files are written (codec, bloom filters); default, ``write.*``'s defaults."""
        if self.table.config.table_type != "MERGE_ON_READ":
            raise Invalid(
                f"{self.table.uri} is a {self.table.config.table_type} table; only merge-on-read tables have "
                "logs to compact"
            )
        compactor = Compactor(self.coordinator, settings, write)

        def compact() -> CompactOutcome:
            outcome = CompactOutcome(scheduled=compactor.schedule() if schedule else None)
            if run:
                outcome.compacted = compactor.run(progress)
            return outcome

        return self._change(compact)

    def catch_up_mirror(self) -> MirrorOutcome:
        """Write or catch up the Delta log: from then on every writer keeps it current."""
        mirror = self.mirror or DeltaMirror(self.table, hold=self.coordinator.hold)
        written = self._between(mirror.catch_up)
        self.mirror = mirror
        versions = DeltaLog(self.table.io).versions()
        return MirrorOutcome(written, versions[-1] if versions else None)

    def change_version(self, to: int, dry_run: bool = False, progress: Progress = None) -> VersionChange:
        """Move the table to version ``to`` (6 or 8) as Hudi's ``UpgradeDowngrade`` does (``table_version``): first
        roll back failed writes and, on a merge-on-read table, compact every slice that has logs (version 6 names a
        log file by its slice's base instant, 8 by its deltacommit: neither reads the other's), then move the
        timeline, the archive and ``hoodie.properties``. ``dry_run``: what would move, nothing changed."""
        config = self.table.config
        if to not in WRITTEN_VERSIONS:
            raise Invalid(
                f"--to {to}: laketide moves tables between versions {' and '.join(map(str, WRITTEN_VERSIONS))}"
            )
        if config.version == to:
            removed = [] if dry_run else table_version.finish_upgrade(self.table.io)
            return VersionChange(self.table.uri, config.version, to, removed=removed)
        if config.version not in WRITTEN_VERSIONS:
            raise Invalid(f"{self.table.uri} is table version {config.version}; laketide moves versions 6 and 8 only")
        move = table_version.upgrade_to_8 if to == 8 else table_version.downgrade_to_6
        if dry_run:
            return move(self.table.io, config, dry_run=True)

        def change() -> VersionChange:
            self.coordinator.recover()
            if config.table_type == "MERGE_ON_READ":
                everything = CompactionSection(delta_commits=1)
                compactor = Compactor(self.coordinator, everything)
                compactor.run(progress)  # a pending compaction first, then one of every slice with logs
                compactor.schedule()
                compactor.run(progress)
            self.coordinator.hold()
            return move(self.table.io, Table.open(self.table.uri, self.table.io).config)

        return self._between(change)

    def drop_metadata_table(self, backup: bool = False) -> metadata_table.DropResult:
        """Disable and delete Hudi's metadata table (``backup``: move it aside instead), as Hudi does when it is
        disabled."""
        return self._between(lambda: metadata_table.drop(self.table.io, InstantClock().next() if backup else None))

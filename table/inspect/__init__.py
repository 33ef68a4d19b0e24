"""What a table holds, for people and tools: its instants, one instant's detail, file groups, partitions, savepoints,
the table services' last runs and the table's layout (``timeline.py``, ``layout.py``).

As pyiceberg's ``table.inspect``: ``Table.inspect`` returns typed models, and
the CLI and the REST API only render them; neither builds its own view. Each
call reads the table as it is on storage now.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from laketide.table.format.instant import (
    INSTANT_TIME,
    ROLLBACK,
    WRITE_ACTIONS,
    Instant,
    State,
    instant_to_datetime,
    validate_instant_time,
)
from laketide.table.format.rollback import RollbackMetadata
from laketide.table.format.savepoint import SavepointMetadata, savepoints
from laketide.table.inspect.layout import (
    FileGroupInfo,
    FileGroupPage,
    GroupOrder,
    TableLayout,
    file_group_infos,
    file_group_page,
    layout,
)
from laketide.table.inspect.timeline import ServicesView, TimelinePage, services, timeline_page

if TYPE_CHECKING:
    from laketide.table.table import Table


class InstantSummary(BaseModel):
    instant: str = Field(examples=["20261122183817781"])
    action: str
    state: str
    completion_time: str | None = None

    @classmethod
    def of(cls, instant: Instant) -> InstantSummary:
        return cls(
            instant=instant.timestamp,
            action=instant.action,
            state=instant.state.value,
            completion_time=instant.completion_time,
        )


class InstantPage(BaseModel):
    items: list[InstantSummary]
    next_before: str | None = Field(default=None, description="pass as `before` to get the next (older) page")


class FileWrite(BaseModel):
    """One file a write instant wrote (a write stat of its commit metadata)."""

    partition: str
    file_id: str
    path: str | None
    prev_commit: str
    records: int
    inserts: int
    updates: int
    deletes: int
    bytes: int


class Totals(BaseModel):
    files: int = 0
    writes: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    bytes: int = 0


class InstantDetail(InstantSummary):
    requested_at: str
    operation: str | None = None
    extra_metadata: dict[str, str] = Field(default_factory=dict)
    totals: Totals = Field(default_factory=Totals)
    files: list[FileWrite] = Field(default_factory=list)
    rolled_back: str | None = Field(default=None, description="for a rollback instant: the instant it rolled back")
    deleted_files: list[str] = Field(default_factory=list)


class PartitionInfo(BaseModel):
    partition: str
    file_groups: int
    records: int = Field(description="rows in the latest base files; merge-on-read logs are not counted")
    size_bytes: int


class InspectTable:
    """Read-only views of one table (``table.inspect``)."""

    def __init__(self, table: Table):
        self.table = table

    def instants(
        self,
        states: Iterable[State] | None = None,
        actions: Iterable[str] | None = None,
        before: str | None = None,
        limit: int = 50,
    ) -> InstantPage:
        """Instants newest first, ``limit`` at a time; ``next_before`` continues with older ones."""
        found = self.table.timeline.filter(set(states) if states else None, list(actions) if actions else None)
        newest_first = [i for i in reversed(found) if before is None or i.timestamp < before]
        page = newest_first[:limit]
        more = len(newest_first) > limit and bool(page)
        return InstantPage(items=[InstantSummary.of(i) for i in page], next_before=page[-1].timestamp if more else None)

    def instant(self, timestamp: str) -> InstantDetail:
        """One instant: its state, and what it wrote or rolled back. ``InstantNotFound`` when it is not on the
        timeline."""
        if not INSTANT_TIME.match(timestamp):
            validate_instant_time(timestamp)  # names what is wrong with it
        timeline = self.table.timeline
        found = timeline.find(timestamp)
        instant = next((i for i in found if i.action in WRITE_ACTIONS), found[0])
        detail = InstantDetail(
            **InstantSummary.of(instant).model_dump(), requested_at=instant_to_datetime(timestamp).isoformat()
        )
        if instant.action in WRITE_ACTIONS:
            meta = timeline.commit_metadata(instant)
            detail.operation = meta.operation_type
            detail.extra_metadata = {k: v for k, v in meta.extra_metadata.items() if k != "schema"}
            detail.totals = Totals(**meta.totals())
            detail.files = [
                FileWrite(
                    partition=partition,
                    file_id=s.file_id,
                    path=s.path,
                    prev_commit=s.prev_commit,
                    records=s.num_writes,
                    inserts=s.num_inserts,
                    updates=s.num_update_writes,
                    deletes=s.num_deletes,
                    bytes=s.total_write_bytes,
                )
                for partition, stats in meta.partition_to_write_stats.items()
                for s in stats
            ]
        elif instant.action == ROLLBACK and instant.is_completed:
            meta = RollbackMetadata.from_bytes(timeline.read_bytes(instant), timeline.io.full_path(""))
            detail.rolled_back, detail.deleted_files = meta.target, meta.deleted
        return detail

    def file_groups(self, partition: str | None = None) -> list[FileGroupInfo]:
        """The latest slice of every file group (of one partition, when given), as a read of the newest commit sees
        it."""
        return file_group_infos(self.table, self.table.file_system_view().latest_slices(partition=partition))

    def file_group_page(
        self, partition: str | None = None, offset: int = 0, limit: int = 100, order: GroupOrder = "partition"
    ) -> FileGroupPage:
        """One page of file groups, by partition or smallest first; only the page's footers are read."""
        return file_group_page(self.table, partition, offset, limit, order)

    def layout(self, small_file_bytes: int, offset: int = 0, limit: int = 100) -> TableLayout:
        """A page of partitions with their sizes and small files, and the table's live and total bytes."""
        return layout(self.table, small_file_bytes, offset, limit)

    def timeline(
        self,
        states: Iterable[State] | None = None,
        actions: Iterable[str] | None = None,
        before: str | None = None,
        limit: int = 50,
        archived: bool = True,
    ) -> TimelinePage:
        """Instants newest first with what each wrote and how long it took, paging on into the archive
        (``archived``)."""
        return timeline_page(self.table, states, actions, before, limit, archived)

    def services(self) -> ServicesView:
        """The last clean, compaction and rollback, what is pending, the archive and the savepoints."""
        return services(self.table)

    def partitions(self) -> list[PartitionInfo]:
        """Each partition's file groups, rows and bytes, in partition order."""
        totals: dict[str, PartitionInfo] = {}
        for group in self.file_groups():
            part = totals.setdefault(
                group.partition, PartitionInfo(partition=group.partition, file_groups=0, records=0, size_bytes=0)
            )
            part.file_groups += 1
            part.records += group.records
            part.size_bytes += group.size_bytes
        return [totals[p] for p in sorted(totals)]

    def savepoints(self) -> list[SavepointMetadata]:
        """The completed savepoints, oldest first."""
        return savepoints(self.table.timeline)

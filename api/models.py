"""Typed request and response bodies of the REST API."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

from laketide.coordinator.lease import LeaseHolder
from laketide.table.instant import KNOWN_ACTIONS
from laketide.writer.report import BatchReport

Action = Enum("Action", {a.upper(): a for a in sorted(KNOWN_ACTIONS)}, type=str)


class ErrorOut(BaseModel):
    detail: str
    holder_api: str | None = None


class InstantSummary(BaseModel):
    instant: str = Field(examples=["20261122183817781"])
    action: str
    state: str
    completion_time: str | None = None


class InstantPage(BaseModel):
    items: list[InstantSummary]
    next_before: str | None = Field(None, description="pass as `before` to get the next (older) page")


class FileWrite(BaseModel):
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
    rolled_back: str | None = Field(None, description="for a rollback instant: the instant it rolled back")
    deleted_files: list[str] = Field(default_factory=list)


class FileGroupOut(BaseModel):
    partition: str
    file_id: str
    base_instant: str
    base_file: str | None
    size_bytes: int
    records: int


class IndexCoverage(BaseModel):
    shards: int
    file_groups: int
    covered_file_groups: int


class WriterOut(BaseModel):
    running: bool
    writer_id: str | None = None
    current_batch: int | None = None
    last_instant: str | None = None
    # the last micro-batches, newest last: every field of the log line, and whether an instant was rolled back since
    recent: list[BatchReport] = Field(default_factory=list)
    quarantined_total: int = 0
    index: IndexCoverage | None = None


class LeaseOut(BaseModel):
    held: bool
    holder: LeaseHolder | None = None


class RollbackRequest(BaseModel):
    dry_run: bool = False
    force: bool = Field(
        False, description="needed to roll back a completed instant that is not the newest; never allows a rollback that would lose rows (409)"
    )


class RowChanges(BaseModel):
    inserts: int = 0
    updates: int = 0
    deletes: int = 0


class RollbackOut(BaseModel):
    instant: str
    action: str
    rollback_instant: str | None
    files: list[str]
    was_completed: bool
    dry_run: bool
    rows: RowChanges | None = Field(None, description="the rows the rolled-back write changed, which go back to what they were; null for a write that never completed")


class SavepointRequest(BaseModel):
    instant: str | None = Field(None, pattern=r"^\d{17}$", description="a completed write; default: the latest")
    comment: str = Field("", max_length=4096)
    user: str | None = Field(None, max_length=256)


class SavepointOut(BaseModel):
    instant: str
    user: str
    saved_at_ms: int
    comment: str
    files: list[str]


class RestoreRequest(BaseModel):
    savepoint: str = Field(pattern=r"^\d{17}$")


class RestoreOut(BaseModel):
    savepoint: str
    restore_instant: str | None = Field(description="null when nothing was written after the savepoint")
    rolled_back: list[str]
    files: int


class Health(BaseModel):
    status: str = "ok"
    table: str

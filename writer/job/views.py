"""The running writer as the API shows it: its health, its index's coverage, the whole view ``GET /v1/writer``
answers and a job's tables as ``GET /v1/tables`` lists them. Plain data, served as it is: a field added here
shows in the API's schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from laketide.writer.job.state import JobState
from laketide.writer.report import Backlog, BatchReport, Failure


class Health(BaseModel):
    """The on-call engineer's answer: healthy, how far behind, what failed, what to do."""

    state: Literal["healthy", "idle", "behind", "failing", "stopped"]
    summary: str = Field(description="one line: what is the matter, and what to do about it")
    last_commit_seconds_ago: float | None = None
    input_rate: float | None = Field(default=None, description="records a second that came in, over the last minutes")
    processing_rate: float | None = Field(
        default=None, description="records a second while writing (records over micro-batch seconds)"
    )
    falling_behind: bool = Field(
        default=False, description="micro-batches take longer than the trigger's interval, or the backlog keeps growing"
    )
    backlog: Backlog | None = None
    last_error: str | None = None


class CatalogView(BaseModel):
    """Where the table's catalog entries stand, as ``GET /v1/writer`` shows them."""

    catalog: str = Field(description="which catalog: its kind and where it is (no credentials)")
    database: str
    table: str = Field(description="the entry's name (a merge-on-read table's are <name>_ro and <name>_rt)")
    synced: str | None = Field(default=None, description="the commit the entries stand at, as this job last saw them")
    failing_since: float | None = Field(default=None, description="epoch seconds of the first failure of this outage")
    failures: int = Field(default=0, description="the syncs that failed since the last one that got through")
    last_error: str | None = None
    retry_in_seconds: float | None = Field(default=None, description="when failing: until the next try")


class IndexCoverage(BaseModel):
    shards: int
    file_groups: int
    covered_file_groups: int


class WriterView(BaseModel):
    """The running writer, as ``GET /v1/writer`` answers it."""

    running: bool
    writer_id: str | None = None
    source: str | None = Field(
        default=None, description="where the records come from: a landing path, Kafka topics, or the generator"
    )
    trigger: str | None = None
    stopping: bool = False
    files_waiting: int | None = Field(
        default=None, description="a landing source's files newer than the newest one read (listed at most every 10 s)"
    )
    current_batch: int | None = None
    last_instant: str | None = None
    # the last micro-batches, newest last: every field of the log line, and whether an instant was rolled back since
    recent: list[BatchReport] = Field(default_factory=list)
    quarantined_total: int = 0
    records_total: int = Field(default=0, description="records of the micro-batches this writer committed")
    index: IndexCoverage | None = None
    health: Health | None = None
    last_job: JobState | None = Field(
        default=None, description="with no job in this server: the table's last job's own last word"
    )
    failures: list[Failure] = Field(default_factory=list, description="the job's recent failures, newest last")
    catalog: CatalogView | None = Field(default=None, description="with [catalog] set: where the entries stand")


class TableSummary(BaseModel):
    """One table of a job, as ``GET /v1/tables`` lists it."""

    name: str = Field(
        description="how the job names the table: its path below the folder of every table (give it as ?table=)"
    )
    uri: str
    source_table: str | None = Field(default=None, description="the source table whose change events it holds")
    last_instant: str | None = None
    records: int = Field(default=0, description="records this job committed to it")
    quarantined: int = Field(default=0, description="rows this job set aside")
    lag: int | None = Field(
        default=None, description="Kafka: the records waiting in its topics after its last micro-batch"
    )
    health: str | None = None

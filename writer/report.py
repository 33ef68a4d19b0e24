"""What a micro-batch did, and what the running writer tells the outside world (the log line, the API).

Plain data with no Spark in it: the REST API serves these as they are, so a field added here shows
everywhere at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from laketide.table.errors import first_line
from laketide.table.format.commit import WriteStat
from laketide.writer.changes.tally import Tally


@dataclass
class BatchReport:
    batch_id: int
    instant: str | None
    records: int = 0
    quarantined: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    files: int = 0
    late: int = 0
    replaced: int = 0  # file groups a delete_partition replaced
    seconds: float = 0.0
    skipped: bool = False
    empty: bool = False
    # wall seconds of each step of the micro-batch, and the summed task seconds of its Spark stages
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # who ran the stages: "driver" (a small micro-batch) or "tasks" (Spark's executors)
    ran_on: str = "tasks"
    # its instant was rolled back after it committed (by an operator, or a restore); set when the status is read
    rolled_back: bool = False
    # requests to an object store during the micro-batch, by kind (GET, PUT, LIST, DELETE, HEAD), from the driver's
    # process
    requests: dict[str, int] = field(default_factory=dict)
    # of those, the requests sent again after the store throttled or lost them
    retries: int = 0
    # a Kafka source's lag once the micro-batch committed: per "topic/partition", the newest offset minus the next one
    # to read
    lag: dict[str, int] = field(default_factory=dict)
    # messages of a change feed that are not row changes, by kind (transaction, heartbeat, schema_change, ...): counted,
    # not written
    skipped_messages: dict[str, int] = field(default_factory=dict)
    # columns change events carried that the table's rows lack (not in source.schema): how many events carried each
    unknown_fields: dict[str, int] = field(default_factory=dict)
    # change events that came after newer points of their database's log (a failover, RESET MASTER;
    # ``changes.source_log``)
    log_behind: int = 0
    # wall clock (epoch seconds) when the micro-batch ended: rates and the age of a lag are taken from it
    ended_at: float = 0.0
    # the table, in a job of a whole database (its path below the template's common folder)
    table: str | None = None

    @classmethod
    def written(
        cls,
        batch_id: int,
        instant: str,
        stats: list[WriteStat],
        tally: Tally,
        *,
        records: int,
        quarantined: int,
        late: int,
        replaced: int,
        table: str | None,
    ) -> BatchReport:
        """The report of a micro-batch whose files are written: its rows counted from their files' ``stats``, the
        messages its change feed skipped from ``tally``."""
        return cls(
            batch_id,
            instant,
            records=records,
            quarantined=quarantined,
            late=late,
            replaced=replaced,
            table=table,
            inserts=sum(s.num_inserts for s in stats),
            updates=sum(s.num_update_writes for s in stats),
            deletes=sum(s.num_deletes for s in stats),
            files=len(stats),
            skipped_messages=dict(tally.skipped),
            unknown_fields=dict(tally.unknown_fields),
            log_behind=tally.log.behind,
        )

    def line(self) -> str:
        return f"table {self.table}: {self._line()}" if self.table else self._line()

    def _line(self) -> str:
        skipped = (
            " skipped=" + ",".join(f"{kind}:{n}" for kind, n in sorted(self.skipped_messages.items()))
            if self.skipped_messages
            else ""
        )
        if self.empty:
            return f"micro-batch {self.batch_id}: empty, no instant{skipped}"
        if self.skipped:
            return f"micro-batch {self.batch_id}: already committed, skipped"
        replaced = f" replaced={self.replaced}" if self.replaced else ""
        replaced += " requests=" + ",".join(f"{kind}:{n}" for kind, n in self.requests.items()) if self.requests else ""
        replaced += f" retries={self.retries}" if self.retries else ""
        replaced += " lag=" + ",".join(f"{place}:{n}" for place, n in self.lag.items()) if self.lag else ""
        replaced += skipped
        replaced += f" log_behind={self.log_behind}" if self.log_behind else ""
        replaced += (
            " unknown_fields=" + ",".join(f"{name}:{n}" for name, n in sorted(self.unknown_fields.items()))
            if self.unknown_fields
            else ""
        )
        steps = " ".join(f"{name}={seconds:.2f}" for name, seconds in self.stage_seconds.items())
        return (
            f"micro-batch {self.batch_id}: instant={self.instant} records={self.records} inserts={self.inserts} "
            f"updates={self.updates} deletes={self.deletes} late={self.late} quarantined={self.quarantined} "
            f"files={self.files}"
            f"{replaced} seconds={self.seconds:.2f} on {self.ran_on} ({steps})"
        )


RECENT_BATCHES = 120  # the micro-batches a running writer keeps reports of (the API, the dashboard's chart)


class Failure(BaseModel):
    """Something of the job's that failed: a micro-batch (which stops the job) or a table service (retried)."""

    at: float = Field(description="wall clock, epoch seconds")
    what: str = Field(description="'micro-batch N' or the table service's name")
    instant: str | None = None
    error: str


RECENT_FAILURES = 20  # the failures a running writer keeps (the API, the dashboard)


@dataclass
class WriterStatus:
    """What the running job tells the outside world (the API serves it). The micro-batch thread and the
    table-services thread write it, the API's threads read it: each field is replaced whole (never changed
    in place), so a reader sees the old value or the new one."""

    current_batch: int | None = None
    last_instant: str | None = None
    recent: list[BatchReport] = field(default_factory=list)
    quarantined_total: int = 0
    records_total: int = 0  # records of the micro-batches this writer committed
    failures: list[Failure] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # both threads add failures

    def failed(self, what: str, error: BaseException, instant: str | None = None) -> None:
        text = first_line(error) or type(error).__name__
        with self._lock:
            self.failures = ([*self.failures, Failure(at=time.time(), what=what, instant=instant, error=text)])[
                -RECENT_FAILURES:
            ]


class Backlog(BaseModel):
    """What waits for the job: landing files (with their bytes and the oldest one's age), or Kafka records."""

    files: int | None = None
    bytes: int | None = None
    records: int | None = Field(
        default=None, description="Kafka: the lag, the newest offsets minus the next ones to read"
    )
    age_seconds: float | None = Field(
        default=None, description="landing: the oldest waiting file's age; Kafka: the age of the lag's figure"
    )
    catch_up_seconds: float | None = Field(
        default=None,
        description="at the last minutes' rate, how long until what waits now is written (None: not known yet, "
        "or the backlog grows)",
    )
    growing: bool = Field(
        default=False, description="Kafka: the lag grew over the last minutes: at this rate the job does not catch up"
    )
    rate: float | None = Field(
        default=None,
        description="Kafka: records a second the lag shrank (or, when growing, grew) over the last minutes",
    )

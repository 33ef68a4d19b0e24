"""The job's last word, kept with the table: ``.hoodie/.laketide/job.json``.

A job writes it when it starts (running), at most once a ``REFRESH_SECONDS`` after a commit (so its
age tells whether the job still speaks), when it stops, and when it fails (with the error). So
``laketide serve``, the CLI and the dashboard of a table whose job is down can say what became of the
job: stopped, failed and why, or still "running" by its last word while its lease is free (killed
without a word). Readers never look at it: it is the job's report, not part of the table.

Only the lease's holder writes it (checked just before), so a stale writer does not speak over the
job that took over from it.
"""

from __future__ import annotations

import logging
import time
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from laketide.table.errors import first_line
from laketide.table.storage.io import FileIO

log = logging.getLogger(__name__)
JOB_STATE = ".hoodie/.laketide/job.json"
REFRESH_SECONDS = 60.0


class JobState(BaseModel):
    state: Literal["running", "stopped", "failed"]
    writer_id: str
    job_id: str | None = None
    host: str | None = None
    pid: int | None = None
    started_at: float = Field(description="epoch seconds")
    updated_at: float = Field(description="epoch seconds of this word")
    last_instant: str | None = None
    last_batch: int | None = None
    error: str | None = None

    @classmethod
    def read(cls, io: FileIO) -> JobState | None:
        """The last word of the table's job, or ``None`` (no job wrote one, or it cannot be read)."""
        try:
            return cls.model_validate_json(io.read_bytes(JOB_STATE))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, ValidationError):
            log.warning(
                "the job's state file %s cannot be read; it is written again by the next job", JOB_STATE, exc_info=True
            )
            return None


class JobStateRecorder:
    """Writes a running job's state; used from the micro-batch thread and the job's main thread, one at a time
    (the main thread writes only once the query has ended)."""

    def __init__(self, io: FileIO, hold, state: JobState):
        """``hold`` raises unless this writer holds the lease (``Coordinator.hold``)."""
        self.io = io
        self.hold = hold
        self.state = state
        self._written = 0.0

    def _write(self, **changes) -> None:
        self.state = self.state.model_copy(update={**changes, "updated_at": time.time()})
        try:
            self.hold()
            self.io.write_atomic(JOB_STATE, self.state.model_dump_json().encode(), overwrite=True)
            self._written = time.monotonic()
        except Exception:  # the job's report only: never what stops or fails a job
            log.warning("the job's state could not be written to %s", JOB_STATE, exc_info=True)

    def started(self) -> None:
        self._write(state="running")

    def committed(self, batch_id: int, instant: str | None) -> None:
        if time.monotonic() - self._written >= REFRESH_SECONDS:
            self._write(last_batch=batch_id, last_instant=instant)
        else:
            self.state = self.state.model_copy(update={"last_batch": batch_id, "last_instant": instant})

    def ended(self, error: BaseException | None = None) -> None:
        if error is None:
            self._write(state="stopped")
        else:
            self._write(state="failed", error=f"{type(error).__name__}: {first_line(error)}")

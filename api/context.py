"""What every route works on: the table, the running job if any, the token, and the views' settings."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Protocol, TypeVar

from fastapi import Depends, Header, Request

from laketide.coordinator import Coordinator, Lease, LeaseHolder
from laketide.coordinator.metrics import Metrics
from laketide.table import Table
from laketide.table.table import SharedCaches
from laketide.table.timeline import drawn_again
from laketide.table.view_sync import ViewSync
from laketide.table.errors import ErrorKind, LaketideError
from laketide.writer import quarantine
from laketide.writer.job_state import JobState
from laketide.writer.operations import Operations
from laketide.writer.quarantine import QuarantineSummary
from laketide.writer.report import WriterView

T = TypeVar("T")
DEFAULT_SMALL_FILE_BYTES = 100 * 2**20  # write.small_file_limit's default, Hudi's hoodie.parquet.small.file.limit


class JobHandle(Protocol):
    """What a running job lends the API."""

    coordinator: Coordinator

    def status(self) -> WriterView: ...

    @property
    def operations(self) -> Operations: ...

    @property
    def views(self) -> ViewSync:
        """The writer's own file-system view, which the API's reads share rather than keep a second copy."""
        ...


@dataclass(frozen=True)
class ViewSettings:
    """What the views need beyond the table: where the quarantine is, and the size a file counts as small under."""

    quarantine_path: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES


class ApiContext:
    """What every route works on: the table, and where its changes run. Built once per app; holds no
    per-request state but caches of things that never change (commit metadata), so the server's worker
    threads share it freely."""

    def __init__(
        self, table: Table, token: str | None, job: JobHandle | None, lease_factory: Callable[[], Lease] | None, metrics: Metrics,
        settings: ViewSettings,
    ):
        self.uri, self.io = table.uri, table.io
        self.token = token
        self.job = job
        self.lease_factory = lease_factory
        self.metrics = metrics
        self.settings = settings
        # commit metadata and views that every request reuses until the timeline moves; in a job, the views come
        # from the writer's own (``ViewSync`` is thread-safe), so the table's files are held once
        self._shared = SharedCaches(sync=job.views if job is not None else None)

    def table(self) -> Table:
        """The table as it is now (each request reads the newest timeline)."""
        return Table.open(self.uri, self.io, self._shared)

    def read(self, view: Callable[[Table], T]) -> T:
        """``view`` of the table as it is now. A file it meant to read may go meanwhile (archival moves commit
        files into the archive, a clean deletes old slices, a rollback its instant's files): then the view is
        drawn again from the newer timeline, which names where the file went, rather than answered 500."""
        return drawn_again(lambda: view(self.table()))

    def writer(self) -> WriterView:
        """The job's published status; with no job here, the table's last job's last word."""
        if self.job is not None:
            return WriterView.model_validate(self.job.status())
        return WriterView(running=False, last_job=JobState.read(self.io))

    def quarantine(self, sample: int) -> QuarantineSummary:
        path = self.settings.quarantine_path or self.uri.rstrip("/") + "_quarantine"
        return quarantine.summarize(path, self.settings.storage_options, sample)

    def change(self, action: Callable[[Operations], T]) -> T:
        """Run a change under the lease: the job's, between micro-batches, or a lease taken for it."""
        if self.job is not None:
            return action(self.job.operations)
        if self.lease_factory is None:
            raise LaketideError("this server has no lease configured, so it cannot change the table", kind=ErrorKind.UNAVAILABLE)
        with Operations.under_lease(self.table(), self.lease_factory(), metrics=self.metrics) as operations:
            return action(operations)

    def holder(self) -> LeaseHolder | None:
        if self.job is not None:
            return self.job.coordinator.lease.current_holder()
        if self.lease_factory is None:
            return None
        probe = self.lease_factory()
        try:
            return probe.current_holder()
        finally:
            probe.release()

    def require_token(self, authorization: str | None) -> None:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise LaketideError("this call changes the table: send 'Authorization: Bearer <token>'", kind=ErrorKind.UNAUTHENTICATED)
        if self.token is None:
            raise LaketideError(
                "no API token is configured on this server (coordinator.api_token or LAKETIDE_API_TOKEN), so changes are refused",
                kind=ErrorKind.FORBIDDEN,
            )
        if not hmac.compare_digest(authorization[7:].strip().encode(), self.token.encode()):
            raise LaketideError("the bearer token is not valid for this server", kind=ErrorKind.FORBIDDEN)


def _context(request: Request) -> ApiContext:
    return request.app.state.context


Ctx = Annotated[ApiContext, Depends(_context)]


def token_required(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> None:
    """The dependency of every route that changes the table."""
    ctx.require_token(authorization)

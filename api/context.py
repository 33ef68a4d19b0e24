"""What every route works on: the table, the running job if any, the token, and the views' settings."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Protocol, TypeVar

from fastapi import Depends, Header, Query, Request

from laketide.coordinator import Coordinator, Lease, LeaseHolder
from laketide.coordinator.lease import holder_seen_through
from laketide.coordinator.metrics import Metrics
from laketide.table import Table
from laketide.table.errors import ErrorKind, Invalid, LaketideError, NotFound
from laketide.table.format.timeline import drawn_again
from laketide.table.reading.view_sync import ViewSync
from laketide.table.table import SharedCaches
from laketide.writer import quarantine
from laketide.writer.job.database import Database, DatabaseTable
from laketide.writer.job.operations import Operations
from laketide.writer.job.state import JobState
from laketide.writer.job.views import TableSummary, WriterView
from laketide.writer.quarantine import QuarantineSummary

T = TypeVar("T")
DEFAULT_SMALL_FILE_BYTES = 100 * 2**20  # write.small_file_limit's default, Hudi's hoodie.parquet.small.file.limit


class JobHandle(Protocol):
    """What a running job lends the API."""

    @property
    def coordinator(self) -> Coordinator: ...

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
        self,
        table: Table,
        token: str | None,
        job: JobHandle | None,
        lease_factory: Callable[[], Lease] | None,
        metrics: Metrics,
        settings: ViewSettings,
        name: str | None = None,
    ):
        """``name``: how requests name the table (a job of a whole database's label); unset, the table's name."""
        self.uri, self.io = table.uri, table.io
        self.name = name or table.name
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
            raise LaketideError(
                "this server has no lease configured, so it cannot change the table", kind=ErrorKind.UNAVAILABLE
            )
        with Operations.under_lease(self.table(), self.lease_factory(), metrics=self.metrics) as operations:
            return action(operations)

    def holder(self) -> LeaseHolder | None:
        if self.job is not None:
            return self.job.coordinator.lease.current_holder()
        if self.lease_factory is None:
            return None
        return holder_seen_through(self.lease_factory())

    def require_token(self, authorization: str | None) -> None:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise LaketideError(
                "this call changes the table: send 'Authorization: Bearer <token>'", kind=ErrorKind.UNAUTHENTICATED
            )
        if self.token is None:
            raise LaketideError(
                "no API token is configured on this server (coordinator.api_token or LAKETIDE_API_TOKEN), so "
                "changes are refused",
                kind=ErrorKind.FORBIDDEN,
            )
        if not hmac.compare_digest(authorization[7:].strip().encode(), self.token.encode()):
            raise LaketideError("the bearer token is not valid for this server", kind=ErrorKind.FORBIDDEN)


class ApiTables:
    """The tables an app answers for: one (``only``), or each table of a job of a whole database (``database``),
    whose context is made at the first request that names it. Requests name a table by ``?table=`` or, from the
    dashboard, the ``X-Laketide-Table`` header; with one table they may leave it out."""

    def __init__(
        self,
        only: ApiContext | None = None,
        database: Database | None = None,
        make: Callable[[DatabaseTable], ApiContext] | None = None,
    ):
        if (only is None) == (database is None or make is None):
            raise ValueError("an app answers for one table, or for a database job's tables and how to read each")
        self.only, self.database = only, database
        self._make: Callable[[DatabaseTable], ApiContext] = make if make is not None else _no_database
        self._contexts: dict[str, ApiContext] = {}
        self._lock = threading.Lock()  # the server's threads make contexts; each is made once

    @property
    def tables(self) -> dict[str, DatabaseTable]:
        """A database job's tables by label (none for an app of one table)."""
        return self.database.tables if self.database is not None else {}

    def where(self) -> str:
        """The one table's URI, or the folder of a database job's tables."""
        if self.only is not None:
            return self.only.uri
        return self.database.routes.folder if self.database is not None else ""

    def exposition(self) -> bytes:
        """The metrics of the one table, or of every table of a database job (labelled by table)."""
        if self.only is not None:
            return self.only.metrics.exposition()
        return self.database.metrics.exposition() if self.database is not None else b""

    def context(self, name: str | None) -> ApiContext:
        if self.only is not None:
            if name not in (None, "", self.only.name) and _where(name) != _where(self.only.uri):
                raise NotFound(f"this server answers for table {self.only.name} ({self.only.uri}) only, not {name!r}")
            return self.only
        tables = self.tables
        if not name:
            raise Invalid(
                f"this job writes {len(tables)} tables: name one with ?table= ({_names(tables)}); GET "
                "/v1/tables lists them"
            )
        # by its name in the job, or by its path (what the CLI knows a table by)
        table = tables.get(name) or next((t for t in tables.values() if _where(t.job.table.uri) == _where(name)), None)
        if table is None:
            raise NotFound(
                f"this job has no table {name!r} (yet: a table opens at its first event); its tables: {_names(tables)}"
            )
        with self._lock:
            if table.label not in self._contexts:
                self._contexts[table.label] = self._make(table)
            return self._contexts[table.label]

    def summaries(self) -> list[TableSummary]:
        """Every table, with what its writer says of it."""
        if self.only is not None:
            view = self.only.writer()
            return [_summary(self.only.name, self.only.uri, None, view)]
        return [
            _summary(name, t.job.table.uri, t.source.name, self.context(name).writer())
            for name, t in sorted(self.tables.items())
        ]


def _no_database(table: DatabaseTable) -> ApiContext:
    raise NotFound(f"this server answers for one table, not for {table.label} of a database job")


def _where(uri: str) -> str:
    """A table's place, however it is written: ``file://`` or not, a trailing slash or not."""
    return uri.removeprefix("file://").rstrip("/")


def _names(tables: dict) -> str:
    shown = sorted(tables)[:20]
    return (
        ", ".join(shown) + (f" and {len(tables) - len(shown)} more" if len(tables) > len(shown) else "")
        if tables
        else "none yet"
    )


def _summary(name: str, uri: str, source: str | None, view: WriterView) -> TableSummary:
    done = [r for r in view.recent if not r.skipped]
    lag = sum(done[-1].lag.values()) if done and done[-1].lag else None
    return TableSummary(
        name=name,
        uri=uri,
        source_table=source,
        last_instant=view.last_instant,
        records=view.records_total,
        quarantined=view.quarantined_total,
        lag=lag,
        health=view.health.state if view.health else None,
    )


TableQuery = Annotated[
    str | None,
    Query(max_length=1024, description="the table, in a job of a whole database (GET /v1/tables lists them)"),
]


def _context(
    request: Request,
    table: TableQuery = None,
    x_laketide_table: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> ApiContext:
    return request.app.state.tables.context(table or x_laketide_table)


Ctx = Annotated[ApiContext, Depends(_context)]


def token_required(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> None:
    """The dependency of every route that changes the table."""
    ctx.require_token(authorization)

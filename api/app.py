"""The coordinator's REST API: inspect instants, file groups, partitions, the writer and its lease; change the table.

The same app runs inside the streaming job (``JobHandle`` given: changes run on the job's coordinator,
between micro-batches) and standalone with ``laketide serve`` for a table whose job is down (a change
first takes the lease, and is refused while a job holds it). Reads go through ``table.inspect`` and
changes through ``Operations``: the routes only parse, call and answer. Errors answer from one table
(``api/errors.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline

from laketide.api import errors, ui
from laketide.api.context import ApiContext, ApiTables, Ctx, JobHandle, ViewSettings, token_required
from laketide.api.guard import Guard
from laketide.api.limits import Admission, ApiLimits
from laketide.api.models import (
    INSTANT_PATTERN,
    ErrorOut,
    LeaseOut,
    Liveness,
    RestoreRequest,
    RollbackRequest,
    SavepointRequest,
)
from laketide.api.read_cache import ReadCache
from laketide.coordinator import Lease
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.rollback import RollbackResult
from laketide.coordinator.savepoints import RestoreResult
from laketide.table import Table
from laketide.table.format.instant import Action, State
from laketide.table.format.savepoint import SavepointMetadata
from laketide.table.inspect import FileGroupInfo, InstantDetail, InstantPage, PartitionInfo
from laketide.table.inspect.layout import FileGroupPage, GroupOrder, TableLayout
from laketide.table.inspect.timeline import ServicesView, TimelinePage
from laketide.writer.job.database import Database, DatabaseTable
from laketide.writer.job.views import TableSummary, WriterView
from laketide.writer.quarantine import QuarantineSummary

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut} for status in (400, 401, 403, 404, 409, 413, 429, 500, 503)
}
InstantPath = Annotated[str, Path(pattern=INSTANT_PATTERN)]
# the filters and cursor of the two listings of instants (/v1/instants, /v1/timeline)
StateQuery = Annotated[State | None, Query(description="REQUESTED, INFLIGHT or COMPLETED")]
ActionQuery = Annotated[Action | None, Query(description="commit, deltacommit, replacecommit, rollback, ...")]
LimitQuery = Annotated[int, Query(ge=1, le=1000)]
BeforeQuery = Annotated[str | None, Query(pattern=INSTANT_PATTERN, description="only instants older than this one")]
__all__ = ["ApiContext", "ApiLimits", "JobHandle", "ViewSettings", "create_app", "create_database_app"]

router = APIRouter(responses=ERRORS)
changes = APIRouter(responses=ERRORS, dependencies=[Depends(token_required)])


@router.get("/healthz", response_model=Liveness, tags=["service"])
def healthz(request: Request) -> Liveness:
    tables: ApiTables = request.app.state.tables
    return Liveness(table=tables.where())


@router.get("/metrics", tags=["service"], response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def prometheus(request: Request) -> Response:
    """Every metric is labelled with its table (``table``): one, or each of a job of a whole database's."""
    tables: ApiTables = request.app.state.tables
    if tables.only is not None:
        pairs = [(tables.only.metrics, tables.only.job.coordinator.lease if tables.only.job else None)]
    else:
        pairs = [(t.job.coordinator.metrics, t.job.coordinator.lease) for t in tables.tables.values()]
    for metrics, lease in pairs:
        metrics.lease_held.set(1 if lease is not None and lease.holder is not None else 0)
        if lease is not None and lease.holder is not None:
            metrics.lease_epoch.set(lease.holder.epoch)
    return Response(tables.exposition(), media_type="text/plain; version=0.0.4")


@router.get("/v1/tables", response_model=list[TableSummary], tags=["table"])
def list_tables(request: Request) -> list[TableSummary]:
    """The tables this server answers for, with their last instant, records, lag and quarantined rows; every other
    route takes one of them as ``?table=`` (which a server of one table needs not be given)."""
    return request.app.state.tables.summaries()


@router.get("/v1/instants", response_model=InstantPage, tags=["instants"])
def list_instants(
    ctx: Ctx,
    state: StateQuery = None,
    action: ActionQuery = None,
    limit: LimitQuery = 50,
    before: BeforeQuery = None,
) -> InstantPage:
    return ctx.read(
        lambda table: table.inspect.instants(
            [state] if state else None, [action.value] if action else None, before, limit
        )
    )


@router.get("/v1/instants/{instant}", response_model=InstantDetail, tags=["instants"])
def show_instant(ctx: Ctx, instant: InstantPath) -> InstantDetail:
    return ctx.read(lambda table: table.inspect.instant(instant))


@router.get("/v1/timeline", response_model=TimelinePage, tags=["instants"])
def timeline(
    ctx: Ctx,
    state: StateQuery = None,
    action: ActionQuery = None,
    limit: LimitQuery = 50,
    before: BeforeQuery = None,
    archived: Annotated[bool, Query(description="go on into the archived timeline")] = True,
) -> TimelinePage:
    """Instants newest first with records, files, bytes and seconds, paging on into the archived timeline."""
    return ctx.read(
        lambda table: table.inspect.timeline(
            [state] if state else None, [action.value] if action else None, before, limit, archived
        )
    )


@router.get("/v1/services", response_model=ServicesView, tags=["table"])
def table_services(ctx: Ctx) -> ServicesView:
    return ctx.read(lambda table: table.inspect.services())


@router.get("/v1/layout", response_model=TableLayout, tags=["table"])
def table_layout(
    ctx: Ctx, offset: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> TableLayout:
    """Partitions (a page of them) with sizes and small files; the table's live and total bytes."""
    return ctx.read(lambda table: table.inspect.layout(ctx.settings.small_file_bytes, offset, limit))


@router.get("/v1/layout/file-groups", response_model=FileGroupPage, tags=["table"])
def file_group_page(
    ctx: Ctx,
    partition: Annotated[str | None, Query(max_length=1024)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Annotated[GroupOrder, Query(description="partition, or size (smallest first)")] = "partition",
) -> FileGroupPage:
    return ctx.read(lambda table: table.inspect.file_group_page(partition, offset, limit, order))


@router.get("/v1/quarantine", response_model=QuarantineSummary, tags=["writer"])
def quarantined(ctx: Ctx, sample: Annotated[int, Query(ge=0, le=100)] = 10) -> QuarantineSummary:
    """Rows in quarantine per reason, and the newest of them."""
    return ctx.quarantine(sample)


@router.get("/v1/file-groups", response_model=list[FileGroupInfo], tags=["table"])
def file_groups(ctx: Ctx, partition: Annotated[str | None, Query(max_length=1024)] = None) -> list[FileGroupInfo]:
    return ctx.read(lambda table: table.inspect.file_groups(partition))


@router.get("/v1/partitions", response_model=list[PartitionInfo], tags=["table"])
def partitions(ctx: Ctx) -> list[PartitionInfo]:
    return ctx.read(lambda table: table.inspect.partitions())


@router.get("/v1/writer", response_model=WriterView, tags=["writer"])
def writer(ctx: Ctx) -> WriterView:
    """The running writer: its micro-batches, failures and health at a glance; with no job, the last job's word."""
    return ctx.writer()


@router.get("/v1/lease", response_model=LeaseOut, tags=["writer"])
def lease(ctx: Ctx) -> LeaseOut:
    holder = ctx.holder()
    return LeaseOut(held=holder is not None, holder=holder)


@router.get("/v1/savepoints", response_model=list[SavepointMetadata], tags=["savepoints"])
def list_savepoints(ctx: Ctx) -> list[SavepointMetadata]:
    return ctx.read(lambda table: table.inspect.savepoints())


# what a change without a body asks for: models never changed once made, so one of each serves every request
_ROLLBACK_DEFAULTS, _SAVEPOINT_DEFAULTS = RollbackRequest(), SavepointRequest()


@changes.post("/v1/instants/{instant}/rollback", response_model=RollbackResult, tags=["instants"])
def rollback(
    ctx: Ctx, instant: InstantPath, request: Annotated[RollbackRequest, Body()] = _ROLLBACK_DEFAULTS
) -> RollbackResult:
    return ctx.change(lambda operations: operations.rollback(instant, request.force, request.dry_run))


@changes.post("/v1/savepoints", response_model=SavepointMetadata, tags=["savepoints"])
def create_savepoint(ctx: Ctx, request: Annotated[SavepointRequest, Body()] = _SAVEPOINT_DEFAULTS) -> SavepointMetadata:
    return ctx.change(lambda operations: operations.create_savepoint(request.instant, request.user, request.comment))


@changes.delete("/v1/savepoints/{instant}", status_code=204, tags=["savepoints"])
def delete_savepoint(ctx: Ctx, instant: InstantPath) -> Response:
    ctx.change(lambda operations: operations.delete_savepoint(instant))
    return Response(status_code=204)


@changes.post("/v1/restore", response_model=RestoreResult, tags=["savepoints"])
def restore(ctx: Ctx, request: Annotated[RestoreRequest, Body()]) -> RestoreResult:
    return ctx.change(lambda operations: operations.restore(request.savepoint))


def create_app(
    table: Table,
    token: str | None,
    job: JobHandle | None = None,
    lease_factory: Callable[[], Lease] | None = None,
    metrics: Metrics | None = None,
    settings: ViewSettings | None = None,
    limits: ApiLimits | None = None,
    allowed_hosts: tuple[str, ...] | None = None,
) -> FastAPI:
    """The app for ``table``: ``job`` when a running job serves it, else ``lease_factory`` for the changes;
    ``limits`` bound what clients may ask of it (``api/limits.py``); ``allowed_hosts`` are the Host names it
    answers to (``api/guard.py``; ``None``: any)."""
    context = ApiContext(
        table,
        token,
        job,
        lease_factory,
        metrics or (job.coordinator.metrics if job else Metrics(table.name)),
        settings or ViewSettings(),
    )
    return _app(f"the Hudi table at {table.uri}", ApiTables(only=context), limits, allowed_hosts)


def create_database_app(
    database: Database,
    token: str | None,
    settings: Callable[[DatabaseTable], ViewSettings],
    limits: ApiLimits | None = None,
    allowed_hosts: tuple[str, ...] | None = None,
) -> FastAPI:
    """The app of a job of a whole database: each route takes the table (``?table=``, ``GET /v1/tables``), whose
    context is its own writer's, as a single-table job's app would have it."""

    def make(table: DatabaseTable) -> ApiContext:
        job = table.job
        return ApiContext(job.table, token, job, None, job.coordinator.metrics, settings(table), name=table.label)

    return _app(
        f"every table of the job under {database.routes.folder}",
        ApiTables(database=database, make=make),
        limits,
        allowed_hosts,
    )


def _app(what: str, tables: ApiTables, limits: ApiLimits | None, allowed_hosts: tuple[str, ...] | None) -> FastAPI:
    app = FastAPIOffline(
        title="laketide coordinator",
        version="1",
        description=f"Instants, file groups, partitions, writer and lease of {what}.",
    )
    app.state.tables = tables
    errors.install(app)
    app.add_middleware(ReadCache)  # behind admission: only admitted answers are shared
    app.add_middleware(Admission, limits=limits or ApiLimits())
    app.add_middleware(
        Guard, allowed=allowed_hosts
    )  # added last, so it runs first: a foreign Host is not admitted at all
    app.include_router(router)
    app.include_router(changes)
    ui.install(app, tables)
    return app

"""The coordinator's REST API: inspect instants, file groups, partitions, the writer and its lease; change the table.

The same app runs inside the streaming job (``JobHandle`` given: changes run on the job's coordinator,
between micro-batches) and standalone with ``laketide serve`` for a table whose job is down (a change
first takes the lease, and is refused while a job holds it). Reads go through ``table.inspect`` and
changes through ``Operations``: the routes only parse, call and answer. Errors answer from one table
(``api/errors.py``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated, Protocol, TypeVar

from fastapi import APIRouter, Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import Response

from laketide.api import errors
from laketide.api.models import INSTANT_PATTERN, Action, ErrorOut, Health, LeaseOut, RestoreRequest, RollbackRequest, SavepointRequest
from laketide.coordinator import Coordinator, Lease, LeaseHolder
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.rollback import RollbackResult
from laketide.coordinator.savepoints import RestoreResult
from laketide.table import Table
from laketide.table.errors import ErrorKind, LaketideError
from laketide.table.inspect import FileGroupInfo, InstantDetail, InstantPage, PartitionInfo
from laketide.table.instant import State
from laketide.table.savepoint import SavepointMetadata
from laketide.writer.operations import Operations
from laketide.writer.report import WriterView

T = TypeVar("T")
ERRORS = {status: {"model": ErrorOut} for status in (400, 401, 403, 404, 409, 500, 503)}
InstantPath = Annotated[str, Path(pattern=INSTANT_PATTERN)]


class JobHandle(Protocol):
    """What a running job lends the API."""

    coordinator: Coordinator

    def status(self) -> WriterView: ...

    @property
    def operations(self) -> Operations: ...


class ApiContext:
    """What every route works on: the table, and where its changes run. Built once per app; holds no
    per-request state, so the server's worker threads share it freely."""

    def __init__(self, table: Table, token: str | None, job: JobHandle | None, lease_factory: Callable[[], Lease] | None, metrics: Metrics):
        self.uri, self.io = table.uri, table.io
        self.token = token
        self.job = job
        self.lease_factory = lease_factory
        self.metrics = metrics

    def table(self) -> Table:
        """The table as it is now (each request reads the newest timeline)."""
        return Table.open(self.uri, self.io)

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


def _token(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> None:
    ctx.require_token(authorization)


router = APIRouter(responses=ERRORS)
changes = APIRouter(responses=ERRORS, dependencies=[Depends(_token)])


@router.get("/healthz", response_model=Health, tags=["service"])
def healthz(ctx: Ctx) -> Health:
    return Health(table=ctx.uri)


@router.get("/metrics", tags=["service"], response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def prometheus(ctx: Ctx) -> Response:
    lease = ctx.job.coordinator.lease if ctx.job else None
    ctx.metrics.lease_held.set(1 if lease is not None and lease.holder is not None else 0)
    if lease is not None and lease.holder is not None:
        ctx.metrics.lease_epoch.set(lease.holder.epoch)
    return Response(ctx.metrics.exposition(), media_type="text/plain; version=0.0.4")


@router.get("/v1/instants", response_model=InstantPage, tags=["instants"])
def list_instants(
    ctx: Ctx,
    state: Annotated[State | None, Query(description="REQUESTED, INFLIGHT or COMPLETED")] = None,
    action: Annotated[Action | None, Query(description="commit, deltacommit, replacecommit, rollback, ...")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: Annotated[str | None, Query(pattern=INSTANT_PATTERN, description="only instants older than this one")] = None,
) -> InstantPage:
    return ctx.table().inspect.instants([state] if state else None, [action.value] if action else None, before, limit)


@router.get("/v1/instants/{instant}", response_model=InstantDetail, tags=["instants"])
def show_instant(ctx: Ctx, instant: InstantPath) -> InstantDetail:
    return ctx.table().inspect.instant(instant)


@router.get("/v1/file-groups", response_model=list[FileGroupInfo], tags=["table"])
def file_groups(ctx: Ctx, partition: Annotated[str | None, Query(max_length=1024)] = None) -> list[FileGroupInfo]:
    return ctx.table().inspect.file_groups(partition)


@router.get("/v1/partitions", response_model=list[PartitionInfo], tags=["table"])
def partitions(ctx: Ctx) -> list[PartitionInfo]:
    return ctx.table().inspect.partitions()


@router.get("/v1/writer", response_model=WriterView, tags=["writer"])
def writer(ctx: Ctx) -> WriterView:
    return WriterView.model_validate(ctx.job.status()) if ctx.job else WriterView(running=False)


@router.get("/v1/lease", response_model=LeaseOut, tags=["writer"])
def lease(ctx: Ctx) -> LeaseOut:
    holder = ctx.holder()
    return LeaseOut(held=holder is not None, holder=holder)


@router.get("/v1/savepoints", response_model=list[SavepointMetadata], tags=["savepoints"])
def list_savepoints(ctx: Ctx) -> list[SavepointMetadata]:
    return ctx.table().inspect.savepoints()


@changes.post("/v1/instants/{instant}/rollback", response_model=RollbackResult, tags=["instants"])
def rollback(ctx: Ctx, instant: InstantPath, request: Annotated[RollbackRequest, Body()] = RollbackRequest()) -> RollbackResult:
    return ctx.change(lambda operations: operations.rollback(instant, request.force, request.dry_run))


@changes.post("/v1/savepoints", response_model=SavepointMetadata, tags=["savepoints"])
def create_savepoint(ctx: Ctx, request: Annotated[SavepointRequest, Body()] = SavepointRequest()) -> SavepointMetadata:
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
) -> FastAPI:
    app = FastAPI(
        title="laketide coordinator",
        version="1",
        description=f"Instants, file groups, partitions, writer and lease of the Hudi table at {table.uri}.",
    )
    app.state.context = ApiContext(table, token, job, lease_factory, metrics or (job.coordinator.metrics if job else Metrics()))
    errors.install(app)
    app.include_router(router)
    app.include_router(changes)
    return app

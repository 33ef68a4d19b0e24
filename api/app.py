"""The coordinator's REST API: inspect instants, file groups, the writer and its lease; roll back.

The same app runs inside the streaming job (``JobHandle`` given: rollbacks run
between micro-batches) and standalone with ``laketide serve`` for a table whose
job is down (a rollback first takes the lease, and is refused while a job holds it).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated, Any, Protocol, TypeVar

import pyarrow.parquet as pq
from fastapi import Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from laketide.api.models import (
    Action,
    ErrorOut,
    FileGroupOut,
    FileWrite,
    Health,
    InstantDetail,
    InstantPage,
    InstantSummary,
    LeaseOut,
    RestoreOut,
    RestoreRequest,
    RollbackOut,
    RollbackRequest,
    SavepointOut,
    SavepointRequest,
    Totals,
    WriterOut,
)
from laketide.coordinator import Coordinator, Lease, LeaseError, LeaseHeld, RollbackRefused
from laketide.coordinator.metrics import Metrics
from laketide.coordinator.savepoints import SavepointRefused, Savepoints
from laketide.table import Table
from laketide.table.instant import ROLLBACK, WRITE_ACTIONS, Instant, State, instant_to_datetime
from laketide.table.rollback import RollbackMetadata
from laketide.table.savepoint import savepoints
from laketide.table.timeline import InstantNotFound

T = TypeVar("T")
INSTANT_PATTERN = r"^\d{17}$"
OPS_WRITER_ID = "laketide-ops"


class JobHandle(Protocol):
    """What a running job lends the API."""

    coordinator: Coordinator

    def status(self) -> dict: ...

    def between_batches(self, action: Callable[[], T]) -> T: ...


class ApiError(Exception):
    def __init__(self, status: int, detail: str, holder_api: str | None = None):
        self.status, self.detail, self.holder_api = status, detail, holder_api


ERRORS = {code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 503)}


def _summary(instant: Instant) -> InstantSummary:
    return InstantSummary(instant=instant.timestamp, action=instant.action, state=instant.state.value, completion_time=instant.completion_time)


def create_app(
    table: Table,
    token: str | None,
    job: JobHandle | None = None,
    lease_factory: Callable[[], Lease] | None = None,
    instant_side_files: Callable[[str], list[str]] | None = None,
    metrics: Metrics | None = None,
) -> FastAPI:
    metrics = metrics or (job.coordinator.metrics if job else Metrics())
    app = FastAPI(
        title="laketide coordinator",
        version="1",
        description=f"Instants, file groups, writer and lease of the Hudi table at {table.uri}.",
    )

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        body = {"detail": exc.detail}
        if exc.holder_api is not None:
            body["holder_api"] = exc.holder_api
        return JSONResponse(status_code=exc.status, content=body)

    def require_token(authorization: Annotated[str | None, Header()] = None) -> None:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise ApiError(401, "this call changes the table: send 'Authorization: Bearer <token>'")
        if token is None:
            raise ApiError(403, "no API token is configured on this server (coordinator.api_token or LAKETIDE_API_TOKEN), so changes are refused")
        if not hmac.compare_digest(authorization[7:].strip().encode(), token.encode()):
            raise ApiError(403, "the bearer token is not valid for this server")

    def fresh_table() -> Table:
        return Table.open(table.uri, table.io)

    @app.get("/healthz", response_model=Health, tags=["service"])
    def healthz() -> Health:
        return Health(table=table.uri)

    @app.get("/metrics", tags=["service"], response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    def prometheus() -> Response:
        lease = job.coordinator.lease if job else None
        metrics.lease_held.set(1 if lease is not None and lease.holder is not None else 0)
        if lease is not None and lease.holder is not None:
            metrics.lease_epoch.set(lease.holder.epoch)
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/instants", response_model=InstantPage, responses=ERRORS, tags=["instants"])
    def list_instants(
        state: Annotated[State | None, Query(description="REQUESTED, INFLIGHT or COMPLETED")] = None,
        action: Annotated[Action | None, Query(description="commit, deltacommit, replacecommit, rollback, ...")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        before: Annotated[str | None, Query(pattern=INSTANT_PATTERN, description="only instants older than this one")] = None,
    ) -> InstantPage:
        instants = fresh_table().timeline.filter({state} if state else None, [action.value] if action else None)
        newest_first = [i for i in reversed(instants) if before is None or i.timestamp < before]
        page = newest_first[:limit]
        more = len(newest_first) > limit
        return InstantPage(items=[_summary(i) for i in page], next_before=page[-1].timestamp if more and page else None)

    @app.get("/v1/instants/{instant}", response_model=InstantDetail, responses=ERRORS, tags=["instants"])
    def show_instant(instant: Annotated[str, Path(pattern=INSTANT_PATTERN)]) -> InstantDetail:
        return instant_detail(fresh_table(), instant)

    @app.get("/v1/file-groups", response_model=list[FileGroupOut], responses=ERRORS, tags=["table"])
    def file_groups(partition: Annotated[str | None, Query(max_length=1024)] = None) -> list[FileGroupOut]:
        current = fresh_table()
        out = []
        for s in current.file_system_view().latest_slices(partition=partition):
            records = 0
            if s.base_file is not None:
                with current.io.open_input(s.base_file.path) as f:
                    records = pq.read_metadata(f).num_rows
            out.append(
                FileGroupOut(
                    partition=s.partition,
                    file_id=s.file_id,
                    base_instant=s.base_instant,
                    base_file=s.base_file.name if s.base_file else None,
                    size_bytes=s.size,
                    records=records,
                )
            )
        return out

    @app.get("/v1/writer", response_model=WriterOut, tags=["writer"])
    def writer() -> WriterOut:
        return WriterOut.model_validate(job.status()) if job else WriterOut(running=False)

    @app.get("/v1/lease", response_model=LeaseOut, responses=ERRORS, tags=["writer"])
    def lease() -> LeaseOut:
        holder = _current_holder()
        return LeaseOut(held=holder is not None, holder=holder)

    def _current_holder():
        if job is not None:
            return job.coordinator.lease.current_holder()
        if lease_factory is None:
            return None
        probe = lease_factory()
        try:
            return probe.current_holder()
        except LeaseError as exc:
            raise ApiError(503, str(exc)) from None
        finally:
            probe.release()

    @app.post(
        "/v1/instants/{instant}/rollback",
        response_model=RollbackOut,
        responses=ERRORS,
        tags=["instants"],
        dependencies=[Depends(require_token)],
    )
    def rollback(
        instant: Annotated[str, Path(pattern=INSTANT_PATTERN)],
        request: Annotated[RollbackRequest, Body()] = RollbackRequest(),
    ) -> RollbackOut:
        result = _change(lambda coordinator: coordinator.rollback(instant, request.force, request.dry_run))
        return RollbackOut(**{**result.__dict__, "rows": result.rows or None})

    @app.get("/v1/savepoints", response_model=list[SavepointOut], tags=["savepoints"])
    def list_savepoints() -> list[SavepointOut]:
        return [SavepointOut(**sp.__dict__) for sp in savepoints(fresh_table().timeline)]

    @app.post("/v1/savepoints", response_model=SavepointOut, responses=ERRORS, tags=["savepoints"], dependencies=[Depends(require_token)])
    def create_savepoint(request: Annotated[SavepointRequest, Body()] = SavepointRequest()) -> SavepointOut:
        saved = _change(lambda coordinator: Savepoints(coordinator).create(request.instant, request.user, request.comment))
        return SavepointOut(**saved.__dict__)

    @app.delete("/v1/savepoints/{instant}", status_code=204, responses=ERRORS, tags=["savepoints"], dependencies=[Depends(require_token)])
    def delete_savepoint(instant: Annotated[str, Path(pattern=INSTANT_PATTERN)]) -> Response:
        _change(lambda coordinator: Savepoints(coordinator).delete(instant))
        return Response(status_code=204)

    @app.post("/v1/restore", response_model=RestoreOut, responses=ERRORS, tags=["savepoints"], dependencies=[Depends(require_token)])
    def restore(request: Annotated[RestoreRequest, Body()]) -> RestoreOut:
        return RestoreOut(**_change(lambda coordinator: Savepoints(coordinator).restore(request.savepoint)).__dict__)

    def _change(action: Callable[[Coordinator], T]) -> T:
        """Run a change under the lease: the job's, between micro-batches, or a lease taken for it."""
        if job is not None:
            return _guarded(lambda: job.between_batches(lambda: action(job.coordinator)))
        if lease_factory is None:
            raise ApiError(503, "this server has no lease configured, so it cannot change the table")
        lease = lease_factory()
        try:
            try:
                lease.acquire(timeout=0)
            except LeaseHeld as held:
                api = held.holder.api_address if held.holder else None
                raise ApiError(409, f"{held}; ask the running job instead", holder_api=api) from None
            except LeaseError as exc:
                raise ApiError(503, str(exc)) from None
            coordinator = Coordinator(fresh_table(), lease, OPS_WRITER_ID, instant_side_files=instant_side_files, metrics=metrics)
            Savepoints(coordinator).resume_restore()
            return _guarded(lambda: action(coordinator))
        finally:
            lease.release()

    return app


def _guarded(action: Callable[[], Any]) -> Any:
    try:
        return action()
    except InstantNotFound as exc:
        raise ApiError(404, f"no instant {exc.args[0]} on the timeline") from None
    except (RollbackRefused, SavepointRefused) as exc:
        raise ApiError(409, str(exc)) from None
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


def instant_detail(table: Table, timestamp: str) -> InstantDetail:
    timeline = table.timeline
    try:
        found = timeline.find(timestamp)
    except InstantNotFound:
        raise ApiError(404, f"no instant {timestamp} on the timeline") from None
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    instant = next((i for i in found if i.action in WRITE_ACTIONS), found[0])
    detail = InstantDetail(**_summary(instant).model_dump(), requested_at=instant_to_datetime(timestamp).isoformat())
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

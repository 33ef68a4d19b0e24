"""The operator's view in the browser, ``GET /ui``: the job, its micro-batches, the timeline, the table services,
the table's layout and the quarantine, with rollback, savepoint and restore.

Server-rendered: each panel is a fragment of HTML that htmx (shipped in ``ui/static``, no CDN) fetches and
refreshes on its own. The fragments read the same ``table.inspect`` and job status the REST API serves, and
the actions go through ``Operations`` under the same token; nothing here builds its own view of the table.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from laketide.api.chart import batch_chart
from laketide.api.context import ApiContext, ApiTables, Ctx, TableQuery, token_required
from laketide.api.models import INSTANT_PATTERN
from laketide.table import Table
from laketide.table.format.instant import Action, State, instant_to_datetime
from laketide.table.inspect.layout import GroupOrder
from laketide.writer.job.health import spoken
from laketide.writer.job.views import WriterView

log = logging.getLogger(__name__)
HERE = Path(__file__).parent / "ui"
REFRESH_SECONDS = 3
PAGE = 50  # rows of the timeline and of file groups per page
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(prefix="/ui", include_in_schema=False, default_response_class=HTMLResponse)
actions = APIRouter(
    prefix="/ui/act",
    include_in_schema=False,
    default_response_class=HTMLResponse,
    dependencies=[Depends(token_required)],
)


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1024:
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} TB"


def _when(instant: str | None) -> str:
    return instant_to_datetime(instant).strftime("%Y-%m-%d %H:%M:%S UTC") if instant else "-"


def _ago(instant: str | None) -> str:
    if not instant:
        return "never"
    return f"{_seconds((datetime.now(UTC) - instant_to_datetime(instant)).total_seconds())} ago"


def _seconds(seconds: float | None) -> str:
    return "-" if seconds is None else spoken(seconds)


def _epoch_ago(at: float | None) -> str:
    return "-" if at is None else f"{_seconds(datetime.now(UTC).timestamp() - at)} ago"


templates.env.filters.update(
    size=_size,
    when=_when,
    ago=_ago,
    seconds=_seconds,
    epoch_ago=_epoch_ago,
    number=lambda n: "-" if n is None else f"{n:,}",
)


Panel = tuple[str, dict]  # a template and what it shows


def _render(request: Request, template: str, values: dict) -> HTMLResponse:
    return templates.TemplateResponse(request, template, {"refresh": REFRESH_SECONDS, **values})


def _html(panel: Panel) -> Markup:
    template, values = panel
    return Markup(templates.get_template(template).render({"refresh": REFRESH_SECONDS, **values}))


def _job(ctx: ApiContext, view: WriterView) -> Panel:
    last = next((r for r in reversed(view.recent) if not r.skipped and not r.empty), None)
    return "job.html", {"view": view, "holder": ctx.holder(), "last": last}


def _batches(ctx: ApiContext, view: WriterView) -> Panel:
    reports = [r for r in view.recent if not r.skipped]
    return "batches.html", {
        "chart": batch_chart(reports),
        "reports": list(reversed(reports[-10:])),
        "job": ctx.job is not None,
    }


def _timeline(
    table: Table, action: Action | None = None, state: State | None = None, before: str | None = None
) -> Panel:
    page = table.inspect.timeline([state] if state else None, [action.value] if action else None, before, PAGE)
    filters = urlencode({k: v.value for k, v in (("action", action), ("state", state)) if v})
    return "timeline.html", {"page": page, "rows": _folded_cleans(page.items), "before": before, "filters": filters}


def _folded_cleans(rows: list) -> list:
    """The rows, with each run of completed cleans between two other instants shown as one row (a clean after
    every commit would fill half the page); the ``clean`` filter lists them one by one."""
    shown: list = []
    for cleans, run in groupby(rows, key=lambda row: row.kind == "clean" and row.state == "COMPLETED"):
        run = list(run)
        shown += [run] if cleans and len(run) > 1 else run
    return shown


def _services(table: Table) -> Panel:
    return "services.html", {"services": table.inspect.services()}


def _layout(ctx: ApiContext, table: Table, view: WriterView, offset: int = 0) -> Panel:
    layout = table.inspect.layout(ctx.settings.small_file_bytes, offset, PAGE)
    return "layout.html", {"layout": layout, "offset": offset, "page_size": PAGE, "index": view.index}


def _file_groups(
    ctx: ApiContext, table: Table, partition: str | None = None, offset: int = 0, order: GroupOrder = "size"
) -> Panel:
    groups = table.inspect.file_group_page(partition or None, offset, PAGE, order)
    return "file_groups.html", {
        "groups": groups,
        "partition": partition or "",
        "order": order,
        "small": ctx.settings.small_file_bytes,
    }


def _quarantine(ctx: ApiContext) -> Panel:
    return "quarantine.html", {"summary": ctx.quarantine(sample=5)}


def _panels(ctx: ApiContext, table: Table) -> dict[str, Panel]:
    """Every panel of the page, read from one opened table and one status of the job."""
    view = ctx.writer()
    return {
        "job": _job(ctx, view),
        "batches": _batches(ctx, view),
        "timeline": _timeline(table),
        "services": _services(table),
        "layout": _layout(ctx, table, view),
        "file_groups": _file_groups(ctx, table),
        "quarantine": _quarantine(ctx),
    }


def _table_list(tables: ApiTables) -> Panel:
    return "table_list.html", {"tables": tables.summaries()}


@router.get("")
def page(request: Request, table: TableQuery = None) -> HTMLResponse:
    """The whole page with every panel drawn in it: the first look needs no second round trip. A job of a whole
    database opens on the list of its tables; each links to its table's page."""
    tables: ApiTables = request.app.state.tables
    if tables.database is not None and not table:
        return _render(
            request,
            "tables.html",
            {"folder": tables.database.routes.folder, "tables_panel": _html(_table_list(tables))},
        )
    ctx = tables.context(table)

    def drawn(opened: Table) -> dict:
        panels = {f"{name}_panel": _html(panel) for name, panel in _panels(ctx, opened).items()}
        return {
            "uri": ctx.uri,
            "name": ctx.name,
            "table_type": opened.config.table_type,
            "job": ctx.job is not None,
            "table": table if tables.database is not None else None,
            **panels,
        }

    return _render(request, "page.html", ctx.read(drawn))


@router.get("/part/tables")
def tables_part(request: Request) -> HTMLResponse:
    return _render(request, *_table_list(request.app.state.tables))


@router.get("/part/job")
def job_part(request: Request, ctx: Ctx) -> HTMLResponse:
    return _render(request, *_job(ctx, ctx.writer()))


@router.get("/part/batches")
def batches_part(request: Request, ctx: Ctx) -> HTMLResponse:
    return _render(request, *_batches(ctx, ctx.writer()))


@router.get("/part/timeline")
def timeline_part(
    request: Request,
    ctx: Ctx,
    action: Annotated[Action | Literal[""], Query(description="empty: any")] = "",
    state: Annotated[State | Literal[""], Query(description="empty: any")] = "",
    before: Annotated[str | None, Query(pattern=INSTANT_PATTERN)] = None,
) -> HTMLResponse:
    return _render(request, *ctx.read(lambda table: _timeline(table, action or None, state or None, before)))


@router.get("/part/instant/{instant}")
def instant_part(request: Request, ctx: Ctx, instant: str) -> HTMLResponse:
    detail = ctx.read(lambda table: table.inspect.instant(instant))
    partitions = Counter(f.partition for f in detail.files)
    return _render(
        request,
        "instant.html",
        {"detail": detail, "partitions": sorted(partitions.items()), "files": detail.files[:200]},
    )


@router.get("/part/services")
def services_part(request: Request, ctx: Ctx) -> HTMLResponse:
    return _render(request, *ctx.read(_services))


@router.get("/part/layout")
def layout_part(request: Request, ctx: Ctx, offset: Annotated[int, Query(ge=0)] = 0) -> HTMLResponse:
    return _render(request, *ctx.read(lambda table: _layout(ctx, table, ctx.writer(), offset)))


@router.get("/part/file-groups")
def file_groups_part(
    request: Request,
    ctx: Ctx,
    partition: Annotated[str | None, Query(max_length=1024)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    order: Annotated[GroupOrder, Query()] = "size",
) -> HTMLResponse:
    return _render(request, *ctx.read(lambda table: _file_groups(ctx, table, partition, offset, order)))


@router.get("/part/quarantine")
def quarantine_part(request: Request, ctx: Ctx) -> HTMLResponse:
    return _render(request, *_quarantine(ctx))


@actions.post("/rollback")
def rollback_action(
    request: Request,
    ctx: Ctx,
    instant: Annotated[str, Form(pattern=INSTANT_PATTERN)],
    dry_run: Annotated[bool, Form()] = True,
    force: Annotated[bool, Form()] = False,
) -> HTMLResponse:
    result = ctx.change(lambda operations: operations.rollback(instant, force, dry_run))
    return _render(request, "rollback.html", {"result": result, "force": force})


@actions.post("/savepoint")
def savepoint_action(
    request: Request,
    ctx: Ctx,
    instant: Annotated[str | None, Form(pattern=INSTANT_PATTERN)] = None,
    comment: Annotated[str, Form(max_length=4096)] = "",
) -> HTMLResponse:
    saved = ctx.change(lambda operations: operations.create_savepoint(instant or None, "dashboard", comment))
    return _render(request, "done.html", {"message": f"Savepoint {saved.instant} created."})


@actions.post("/restore")
def restore_action(
    request: Request, ctx: Ctx, savepoint: Annotated[str, Form(pattern=INSTANT_PATTERN)]
) -> HTMLResponse:
    result = ctx.change(lambda operations: operations.restore(savepoint))
    rolled = ", ".join(result.rolled_back) or "nothing"
    return _render(
        request,
        "done.html",
        {"message": f"Restored to savepoint {result.savepoint}: rolled back {rolled} ({result.files} files)."},
    )


def _warm(ctx: ApiContext) -> None:
    """What an operator's first look would otherwise wait for: the page's panels drawn once, which compiles
    their templates, lists the table and decodes the newest archive block. Only a head start: a failure
    here is the first request's to report."""
    try:
        for panel in ctx.read(lambda table: _panels(ctx, table)).values():
            _html(panel)
        templates.get_template("page.html")
    except Exception:
        log.debug("warming the dashboard's caches failed", exc_info=True)


def install(app: FastAPI, tables: ApiTables) -> None:
    """Serve the view under ``/ui``, its assets under ``/ui/static``; warm a single table's caches in the background."""
    app.include_router(router)
    app.include_router(actions)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    if tables.only is not None:
        threading.Thread(target=_warm, args=(tables.only,), name="laketide-ui-warm", daemon=True).start()

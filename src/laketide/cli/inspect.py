"""Commands that read a table: timeline, services, show, file-groups, partitions, savepoint list, lease
(``table.inspect``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from laketide.cli.apps import app, savepoint_app
from laketide.cli.options import (
    JsonOpt,
    TableArg,
    ZkOpt,
    ZkRootOpt,
    current_holder,
    open_table,
)
from laketide.cli.output import Output, answers
from laketide.table.errors import Invalid


@app.command()
@answers
def timeline(
    table: TableArg,
    state: Annotated[str | None, typer.Option(help="REQUESTED, INFLIGHT or COMPLETED")] = None,
    action: Annotated[str | None, typer.Option(help="commit, deltacommit, replacecommit, rollback, ...")] = None,
    limit: Annotated[int, typer.Option(min=1, help="newest N instants")] = 20,
    before: Annotated[str | None, typer.Option(help="only instants older than this one (the next page)")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="go on into the archived timeline")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List instants, newest first, with what each wrote and how long it took."""
    from laketide.table.format.instant import State

    t = open_table(table)
    try:
        states = [State(state.upper())] if state else None
    except ValueError:
        raise Invalid(f"--state must be REQUESTED, INFLIGHT or COMPLETED, not {state!r}") from None
    page = t.inspect.timeline(states, [action] if action else None, before, limit, archived)
    columns = ["instant", "action", "state", "records", "files", "bytes", "seconds"] + (
        ["archived"] if archived else []
    )
    Output(as_json).rows(page.items, columns, f"timeline of {t.uri}", "no instants")


@app.command()
@answers
def services(table: TableArg, as_json: JsonOpt = False) -> None:
    """The table services: last clean, compaction, rollback and archival, what is pending, the savepoints."""
    view = open_table(table).inspect.services()

    def run(r) -> str:
        return f"{r.instant} ({r.state}{f', {r.seconds:.1f} s' if r.seconds is not None else ''})" if r else "never"

    def text() -> str:
        archive = view.archive
        return "\n".join(
            [
                f"last clean       {run(view.last_clean)}",
                f"last compaction  {run(view.last_compaction)}",
                f"last rollback    {run(view.last_rollback)}",
                f"archive          {archive.files} files, {archive.bytes} bytes, "
                f"up to {archive.newest_archived or '-'}",
                "pending          " + (", ".join(f"{p.instant} {p.state}" for p in view.pending) or "nothing"),
                "savepoints       " + (", ".join(s.instant for s in view.savepoints) or "none"),
            ]
        )

    Output(as_json).result(view, text)


@app.command()
@answers
def show(table: TableArg, instant: Annotated[str, typer.Argument()], as_json: JsonOpt = False) -> None:
    """Show one instant: state, metadata, totals and files."""
    detail = open_table(table).inspect.instant(instant)

    def text() -> str:
        totals = detail.totals
        return (
            f"{detail.instant} {detail.action} {detail.state} operation={detail.operation}\n"
            f"files={totals.files} records={totals.writes} inserts={totals.inserts} updates={totals.updates} "
            f"deletes={totals.deletes} bytes={totals.bytes}\n"
            + "\n".join(f"  {f.path} ({f.records} records)" for f in detail.files)
            + (f"rolled back {detail.rolled_back}: " + ", ".join(detail.deleted_files) if detail.rolled_back else "")
        )

    Output(as_json).result(detail, text)


@app.command("file-groups")
@answers
def file_groups(
    table: TableArg,
    partition: Annotated[str | None, typer.Option(help="one partition's groups only")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The latest slice of every file group: base file, log files, size and rows."""
    t = open_table(table)
    groups = t.inspect.file_groups(partition)
    columns = ["partition", "file_id", "base_instant", "log_files", "records", "size_bytes"]
    Output(as_json).rows(groups, columns, f"file groups of {t.uri}", "no file groups")


@app.command()
@answers
def partitions(table: TableArg, as_json: JsonOpt = False) -> None:
    """Each partition's file groups, rows and bytes."""
    t = open_table(table)
    Output(as_json).rows(
        t.inspect.partitions(),
        ["partition", "file_groups", "records", "size_bytes"],
        f"partitions of {t.uri}",
        "no partitions",
    )


@savepoint_app.command("list")
@answers
def savepoint_list(table: TableArg, as_json: JsonOpt = False) -> None:
    """The table's savepoints, oldest first."""
    found = open_table(table).inspect.savepoints()
    text = (
        "\n".join(f"{sp.instant}  by {sp.user}  {len(sp.files)} files  {sp.comment}" for sp in found) or "no savepoints"
    )
    Output(as_json).result(found, text)


@app.command()
@answers
def lease(
    table: TableArg, zookeeper: ZkOpt = None, zookeeper_root: ZkRootOpt = "/laketide", as_json: JsonOpt = False
) -> None:
    """Who holds the table's lease, and the last word of the table's job (running, stopped, or failed with its
    error)."""
    from laketide.writer.job.state import JobState

    t = open_table(table)
    holder = current_holder(t, zookeeper, zookeeper_root)
    last = JobState.read(t.io)
    data = {"held": holder is not None, "holder": holder, "last_job": last}
    lines = [f"held by {holder.describe()}" if holder else "nobody holds the lease"]
    if last is not None:
        when = datetime.fromtimestamp(last.updated_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        silent = " (its lease is free: it ended without a word)" if last.state == "running" and holder is None else ""
        lines.append(
            f"last job: {last.state} at {when}{silent}; {last.job_id or last.writer_id} on {last.host} (pid "
            f"{last.pid}), "
            f"last micro-batch {last.last_batch}, instant {last.last_instant}"
            + (f"\n  error: {last.error}" if last.error else "")
        )
    Output(as_json).result(data, "\n".join(lines))

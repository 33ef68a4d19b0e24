"""Commands that change a table: rollback, savepoints, restore, clean, compact, mirror, metadata drop.

Each acts through ``Operations``. A change the running job can make (rollback, savepoints, restore) goes
to the job's API when a job holds the lease; otherwise this command takes the lease itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic_core import to_jsonable_python

from laketide.cli.apps import app, savepoint_app
from laketide.cli.options import (
    ApiOpt,
    JsonOpt,
    TableArg,
    TokenOpt,
    ZkOpt,
    ZkRootOpt,
    current_holder,
    lease_for,
    open_table,
)
from laketide.cli.output import Output, answers
from laketide.service import TOKEN_ENV
from laketide.table.errors import ErrorKind, LaketideError
from laketide.table.format.instant import validate_instant_time


class Change:
    """Where a change runs: the running job's API when a job holds the lease, a lease taken here otherwise.
    Either way the answer is the same JSON-shaped data."""

    def __init__(self, table: str, api: str | None, token: str | None, zookeeper: str | None, zookeeper_root: str):
        self.table = open_table(table)
        self.token = token or os.environ.get(TOKEN_ENV)
        self.zookeeper, self.zookeeper_root = zookeeper, zookeeper_root
        if api is None:
            holder = current_holder(self.table, zookeeper, zookeeper_root)
            api = holder.api_address if holder else None
        self.api = api

    def run(self, method: str, path: str, body: dict | None, local: Callable[[Any], Any]) -> Any:
        """``local(operations)`` makes the change here; its result is what the API would answer."""
        if self.api:
            return self._through_api(self.api, method, path, body)
        from laketide.writer.job.operations import Operations

        lease = lease_for(self.table, self.zookeeper, self.zookeeper_root)
        with Operations.under_lease(self.table, lease, "it has no API to ask") as operations:
            return to_jsonable_python(local(operations))

    def _through_api(self, api: str, method: str, path: str, body: dict | None) -> Any:
        import httpx

        from laketide.api.errors import KIND_OF_STATUS

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            # the table by its path: a job of a whole database answers for many
            response = httpx.request(
                method,
                f"{api.rstrip('/')}{path}",
                params={"table": self.table.uri},
                json=body,
                headers=headers,
                timeout=600,
            )
        except httpx.HTTPError as exc:
            raise LaketideError(f"cannot reach the job's API at {api}: {exc}", kind=ErrorKind.UNAVAILABLE) from None
        if response.status_code == 204:
            return None
        if response.status_code == 200:
            return response.json()
        is_json = response.headers.get("content-type", "").startswith("application/json")
        detail = response.json().get("detail", response.text) if is_json else response.text
        kind = KIND_OF_STATUS.get(response.status_code, ErrorKind.FAILED)
        raise LaketideError(f"{api} answered {response.status_code}: {detail}", kind=kind)


def _changes(
    method: str, path: str, body: dict | None, local: Callable[[Any], Any], table, api, token, zookeeper, zookeeper_root
) -> Any:
    return Change(table, api, token, zookeeper, zookeeper_root).run(method, path, body, local)


@app.command()
@answers
def rollback(
    table: TableArg,
    instant: Annotated[str, typer.Argument()],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be deleted, change nothing")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="allow a completed instant that is not the newest (never a rollback that loses rows)"
        ),
    ] = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Roll back an instant: through the running job's API when a job holds the lease, locally otherwise."""
    validate_instant_time(instant)
    out = Output(as_json)

    def local(operations):
        with out.progress(f"rolling back {instant}", quiet=dry_run) as progress:
            return operations.rollback(instant, force=force, dry_run=dry_run, progress=progress)

    body = {"dry_run": dry_run, "force": force}
    data = _changes(
        "POST", f"/v1/instants/{instant}/rollback", body, local, table, api, token, zookeeper, zookeeper_root
    )
    verb = "would delete" if data["dry_run"] else f"rolled back with {data['rollback_instant']}, deleted"
    rows = data.get("rows")
    taken = (
        f"; {'would take' if data['dry_run'] else 'took'} back {rows['inserts']} inserts, {rows['updates']} "
        f"updates and {rows['deletes']} deletes"
        if rows
        else ""
    )
    files = "\n".join(f"  {f}" for f in data["files"])
    forced = f"\nneeds force: {data['needs_force']} (run it with --force)" if data.get("needs_force") else ""
    out.result(data, f"{data['instant']} ({data['action']}): {verb} {len(data['files'])} files{taken}{forced}\n{files}")


@savepoint_app.command("create")
@answers
def savepoint_create(
    table: TableArg,
    instant: Annotated[str | None, typer.Argument(help="a completed write (default: the latest)")] = None,
    comment: Annotated[str, typer.Option(help="why it is kept")] = "",
    user: Annotated[str | None, typer.Option(help="who keeps it (default: the login name)")] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Savepoint a commit (Hudi's savepoint action)."""
    if instant is not None:
        validate_instant_time(instant)
    body = {"instant": instant, "comment": comment, "user": user}
    data = _changes(
        "POST",
        "/v1/savepoints",
        body,
        lambda operations: operations.create_savepoint(instant, user, comment),
        table,
        api,
        token,
        zookeeper,
        zookeeper_root,
    )
    Output(as_json).result(data, f"savepointed {data['instant']}: {len(data['files'])} files held")


@savepoint_app.command("delete")
@answers
def savepoint_delete(
    table: TableArg,
    instant: Annotated[str, typer.Argument()],
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Drop a savepoint; cleaning may then delete the files it held."""
    validate_instant_time(instant)
    _changes(
        "DELETE",
        f"/v1/savepoints/{instant}",
        None,
        lambda operations: operations.delete_savepoint(instant),
        table,
        api,
        token,
        zookeeper,
        zookeeper_root,
    )
    Output(as_json).result({"deleted": instant}, f"deleted savepoint {instant}")


@app.command()
@answers
def restore(
    table: TableArg,
    savepoint: Annotated[str, typer.Argument(help="the savepoint's instant")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Return the table to a savepoint: every write after it is rolled back (Hudi's restore action)."""
    validate_instant_time(savepoint)
    out = Output(as_json)

    def local(operations):
        with out.progress(f"restoring {savepoint}") as progress:
            return operations.restore(savepoint, progress)

    data = _changes(
        "POST", "/v1/restore", {"savepoint": savepoint}, local, table, api, token, zookeeper, zookeeper_root
    )
    if data["restore_instant"] is None:
        out.result(data, f"nothing was written after {savepoint}; the table is already restored")
    else:
        out.result(
            data,
            f"restored to {savepoint} with {data['restore_instant']}: {len(data['rolled_back'])} instants "
            f"rolled back, {data['files']} files deleted",
        )

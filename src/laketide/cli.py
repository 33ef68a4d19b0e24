"""The ``laketide`` command line: run the job, serve the API, inspect and roll back instants.

Exit codes: 0 done, 1 failed, 2 bad usage or configuration, 3 not found, 4 refused,
5 the running job lost its lease (its supervisor restarts it: the new run takes a new epoch and recovers).
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from laketide.config import ConfigError, load_config
from laketide.service import TOKEN_ENV

FAILED, USAGE, NOT_FOUND, REFUSED, LEASE_LOST = 1, 2, 3, 4, 5

app = typer.Typer(help="laketide: a streaming upsert writer for Apache Hudi tables.", no_args_is_help=True)

# Embedded defaults: the generator source into ./demo/table, so `laketide run` works with no config at all.
DEFAULTS = {
    "table": {"path": "./demo/table", "name": "demo", "record_key": ["id"], "partition_by": ["region"], "ordering_field": "ts"},
    "stream": {"checkpoint": "./demo/checkpoint", "trigger": "available-now"},
}

JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
ZkOpt = Annotated[Optional[str], typer.Option("--zookeeper", help="ZooKeeper hosts, when the table's lease lives there")]
ZkRootOpt = Annotated[str, typer.Option("--zookeeper-root", help="ZooKeeper root of laketide's leases")]


@app.callback()
def _root() -> None:
    """laketide: a streaming upsert writer for Apache Hudi tables."""


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "pyspark", "kazoo"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _fail(message: str, code: int, as_json: bool = False) -> typer.Exit:
    if as_json:
        typer.echo(json.dumps({"error": message, "exit_code": code}))
    else:
        typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _emit(data, as_json: bool, text: str) -> None:
    typer.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def _open(table_path: str, as_json: bool = False):
    from laketide.table import Table, TableNotFound

    try:
        return Table.open(table_path)
    except TableNotFound as exc:
        raise _fail(str(exc), NOT_FOUND, as_json) from None


def _lease(table, zookeeper: str | None, zookeeper_root: str, job_id: str = "laketide-ops"):
    from laketide.coordinator import LocalLease, ZooKeeperLease

    if zookeeper:
        return ZooKeeperLease(zookeeper, zookeeper_root, table.uri, job_id=job_id, connect_timeout=10.0)
    return LocalLease.for_table(table.uri, job_id=job_id)


@contextmanager
def _holding_lease(table, zookeeper: str | None, zookeeper_root: str, as_json: bool, when_held: str, acquire: bool = True):
    """The table's lease, taken for an operator command; a lease a job holds refuses it with ``when_held``."""
    from laketide.coordinator import LeaseError, LeaseHeld

    lease_ = _lease(table, zookeeper, zookeeper_root)
    try:
        if acquire:
            lease_.acquire(timeout=0)
        yield lease_
    except LeaseHeld as exc:
        raise _fail(f"{exc}; {when_held}", REFUSED, as_json) from None
    except LeaseError as exc:
        raise _fail(str(exc), FAILED, as_json) from None
    finally:
        lease_.release()


def _current_holder(table, zookeeper: str | None, zookeeper_root: str, as_json: bool):
    from laketide.coordinator import LeaseError

    probe = _lease(table, zookeeper, zookeeper_root)
    try:
        return probe.current_holder()
    except LeaseError as exc:
        raise _fail(str(exc), FAILED, as_json) from None
    finally:
        probe.release()


def _side_files(table):
    from laketide.index.state import StateIndex

    def files(instant: str) -> list[str]:
        return StateIndex(table.io, 1).instant_files(instant)

    return files


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="TOML job config; without it, the embedded demo defaults")] = None,
    conf: Annotated[Optional[list[str]], typer.Option("--conf", help="override one key: section.key=value (repeatable)")] = None,
) -> None:
    """Run the streaming upsert job (builds its Spark session, or joins the one spark-submit made)."""
    try:
        job_config = load_config(config, conf or [], base=None if config else DEFAULTS)
    except ConfigError as exc:
        raise _fail(str(exc), USAGE) from None
    _logging()
    from laketide.coordinator import LeaseError, LeaseLost
    from laketide.coordinator.services import TableServiceFailed
    from laketide.service import run_service
    from laketide.writer.preflight import JobRefused

    try:
        writer = run_service(job_config)
    except JobRefused as exc:
        raise _fail(str(exc), USAGE) from None
    except LeaseLost as exc:
        raise _fail(str(exc), LEASE_LOST) from None
    except LeaseError as exc:
        raise _fail(str(exc), REFUSED) from None
    except (ValueError, NotImplementedError, TableServiceFailed) as exc:
        raise _fail(str(exc), FAILED) from None
    reports = [r for r in writer.status.recent if not r.skipped]
    path = Path(job_config.table.path).resolve()
    typer.echo(f"\n{len(reports)} micro-batches committed to {path}. Read the table with:")
    typer.echo(f"  hudi:     python -c \"from hudi import HudiTableBuilder; import pyarrow as pa; "
               f"print(pa.Table.from_batches(HudiTableBuilder.from_base_uri('{path}').build().read()).num_rows)\"")
    typer.echo(f"  laketide: python -c \"from laketide.table import Table; print(Table.open('{path}').snapshot().num_rows)\"")


@app.command()
def timeline(
    table: Annotated[str, typer.Argument(help="table path or URI")],
    state: Annotated[Optional[str], typer.Option(help="REQUESTED, INFLIGHT or COMPLETED")] = None,
    action: Annotated[Optional[str], typer.Option(help="commit, deltacommit, replacecommit, rollback, ...")] = None,
    limit: Annotated[int, typer.Option(min=1, help="newest N instants")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """List instants, newest first."""
    from laketide.table.instant import State

    t = _open(table, as_json)
    try:
        states = {State(state.upper())} if state else None
    except ValueError:
        raise _fail(f"--state must be REQUESTED, INFLIGHT or COMPLETED, not {state!r}", USAGE, as_json) from None
    instants = list(reversed(t.timeline.filter(states, [action] if action else None)))[:limit]
    data = [{"instant": i.timestamp, "action": i.action, "state": i.state.value, "completion_time": i.completion_time} for i in instants]
    if as_json:
        _emit(data, True, "")
        return
    from rich.console import Console
    from rich.table import Table as RichTable

    view = RichTable("instant", "action", "state", title=f"timeline of {t.uri}")
    for row in data:
        view.add_row(row["instant"], row["action"], row["state"])
    Console().print(view)


@app.command()
def show(table: Annotated[str, typer.Argument()], instant: Annotated[str, typer.Argument()], as_json: JsonOpt = False) -> None:
    """Show one instant: state, metadata, totals and files."""
    from laketide.api.app import ApiError, instant_detail
    from laketide.table.instant import validate_instant_time

    t = _open(table, as_json)
    try:
        validate_instant_time(instant)
        detail = instant_detail(t, instant)
    except ValueError as exc:
        raise _fail(str(exc), USAGE, as_json) from None
    except ApiError as exc:
        raise _fail(exc.detail, NOT_FOUND if exc.status == 404 else FAILED, as_json) from None
    data = detail.model_dump()
    totals = detail.totals
    text = (
        f"{detail.instant} {detail.action} {detail.state} operation={detail.operation}\n"
        f"files={totals.files} records={totals.writes} inserts={totals.inserts} updates={totals.updates} "
        f"deletes={totals.deletes} bytes={totals.bytes}\n"
        + "\n".join(f"  {f.path} ({f.records} records)" for f in detail.files)
        + (f"rolled back {detail.rolled_back}: " + ", ".join(detail.deleted_files) if detail.rolled_back else "")
    )
    _emit(data, as_json, text)


@app.command()
def lease(table: Annotated[str, typer.Argument()], zookeeper: ZkOpt = None, zookeeper_root: ZkRootOpt = "/laketide", as_json: JsonOpt = False) -> None:
    """Who holds the table's lease."""
    holder = _current_holder(_open(table, as_json), zookeeper, zookeeper_root, as_json)
    data = {"held": holder is not None, "holder": holder.model_dump() if holder else None}
    _emit(data, as_json, f"held by {holder.describe()}" if holder else "nobody holds the lease")


class _Change:
    """Where a change to the table runs: the running job's API when a job holds the lease, a lease taken here otherwise."""

    def __init__(self, table: str, api: str | None, token: str | None, zookeeper: str | None, zookeeper_root: str, as_json: bool):
        self.table = _open(table, as_json)
        self.as_json = as_json
        self.token = token or os.environ.get(TOKEN_ENV)
        self.zookeeper, self.zookeeper_root = zookeeper, zookeeper_root
        if api is None:
            holder = _current_holder(self.table, zookeeper, zookeeper_root, as_json)
            api = holder.api_address if holder else None
        self.api = api

    def run(self, method: str, path: str, body: dict | None, local) -> dict | None:
        """``local(coordinator)`` returns the same data the API answers."""
        if self.api:
            return self._through_api(method, path, body)
        from laketide.coordinator import Coordinator, RollbackRefused
        from laketide.coordinator.savepoints import SavepointRefused, Savepoints
        from laketide.table.timeline import InstantNotFound

        with _holding_lease(self.table, self.zookeeper, self.zookeeper_root, self.as_json, "it has no API to ask") as lease_:
            try:
                coordinator = Coordinator(self.table, lease_, "laketide-ops", instant_side_files=_side_files(self.table))
                Savepoints(coordinator).resume_restore()
                result = local(coordinator)
                _catch_up_mirror(self.table)
                return result
            except InstantNotFound as exc:
                raise _fail(f"no instant {exc.args[0]} on the timeline of {self.table.uri}", NOT_FOUND, self.as_json) from None
            except (RollbackRefused, SavepointRefused) as exc:
                raise _fail(str(exc), REFUSED, self.as_json) from None

    def _through_api(self, method: str, path: str, body: dict | None) -> dict | None:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = httpx.request(method, f"{self.api.rstrip('/')}{path}", json=body, headers=headers, timeout=600)
        except httpx.HTTPError as exc:
            raise _fail(f"cannot reach the job's API at {self.api}: {exc}", FAILED, self.as_json) from None
        if response.status_code == 204:
            return None
        if response.status_code == 200:
            return response.json()
        is_json = response.headers.get("content-type", "").startswith("application/json")
        detail = response.json().get("detail", response.text) if is_json else response.text
        code = {404: NOT_FOUND, 401: REFUSED, 403: REFUSED, 409: REFUSED, 400: USAGE, 422: USAGE}.get(response.status_code, FAILED)
        raise _fail(f"{self.api} answered {response.status_code}: {detail}", code, self.as_json)


ApiOpt = Annotated[Optional[str], typer.Option("--api", help="the running job's API (default: the lease holder's)")]
TokenOpt = Annotated[Optional[str], typer.Option(help=f"API bearer token (default: ${TOKEN_ENV})")]


def _instant_argument(instant: str, as_json: bool) -> None:
    from laketide.table.instant import validate_instant_time

    try:
        validate_instant_time(instant)
    except ValueError as exc:
        raise _fail(str(exc), USAGE, as_json) from None


@app.command()
def rollback(
    table: Annotated[str, typer.Argument()],
    instant: Annotated[str, typer.Argument()],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be deleted, change nothing")] = False,
    force: Annotated[bool, typer.Option("--force", help="allow a completed instant that is not the newest (never a rollback that loses rows)")] = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Roll back an instant: through the running job's API when a job holds the lease, locally otherwise."""
    _instant_argument(instant, as_json)
    change = _Change(table, api, token, zookeeper, zookeeper_root, as_json)
    data = change.run(
        "POST",
        f"/v1/instants/{instant}/rollback",
        {"dry_run": dry_run, "force": force},
        lambda coordinator: _local_rollback(coordinator, instant, force, dry_run, as_json).__dict__,
    )
    verb = "would delete" if data["dry_run"] else f"rolled back with {data['rollback_instant']}, deleted"
    rows = data.get("rows") or {}
    taken = f"; {'would take' if data['dry_run'] else 'took'} back {rows['inserts']} inserts, {rows['updates']} updates and {rows['deletes']} deletes" if rows else ""
    files = "\n".join(f"  {f}" for f in data["files"])
    _emit(data, as_json, f"{data['instant']} ({data['action']}): {verb} {len(data['files'])} files{taken}\n{files}")


savepoint_app = typer.Typer(help="Savepoints: commits that cleaning keeps readable and restore can return to.", no_args_is_help=True)
app.add_typer(savepoint_app, name="savepoint")


@savepoint_app.command("create")
def savepoint_create(
    table: Annotated[str, typer.Argument()],
    instant: Annotated[Optional[str], typer.Argument(help="a completed write (default: the latest)")] = None,
    comment: Annotated[str, typer.Option(help="why it is kept")] = "",
    user: Annotated[Optional[str], typer.Option(help="who keeps it (default: the login name)")] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Savepoint a commit (Hudi's savepoint action)."""
    from laketide.coordinator.savepoints import Savepoints

    if instant is not None:
        _instant_argument(instant, as_json)
    change = _Change(table, api, token, zookeeper, zookeeper_root, as_json)
    data = change.run(
        "POST", "/v1/savepoints", {"instant": instant, "comment": comment, "user": user},
        lambda coordinator: _savepoint_data(Savepoints(coordinator).create(instant, user, comment)),
    )
    _emit(data, as_json, f"savepointed {data['instant']}: {len(data['files'])} files held")


@savepoint_app.command("list")
def savepoint_list(table: Annotated[str, typer.Argument()], as_json: JsonOpt = False) -> None:
    """The table's savepoints, oldest first."""
    from laketide.table.savepoint import savepoints

    data = [_savepoint_data(sp) for sp in savepoints(_open(table, as_json).timeline)]
    _emit(data, as_json, "\n".join(f"{d['instant']}  by {d['user']}  {len(d['files'])} files  {d['comment']}" for d in data) or "no savepoints")


@savepoint_app.command("delete")
def savepoint_delete(
    table: Annotated[str, typer.Argument()],
    instant: Annotated[str, typer.Argument()],
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Drop a savepoint; cleaning may then delete the files it held."""
    from laketide.coordinator.savepoints import Savepoints

    _instant_argument(instant, as_json)
    change = _Change(table, api, token, zookeeper, zookeeper_root, as_json)
    change.run("DELETE", f"/v1/savepoints/{instant}", None, lambda coordinator: Savepoints(coordinator).delete(instant))
    _emit({"deleted": instant}, as_json, f"deleted savepoint {instant}")


def _savepoint_data(sp) -> dict:
    return {"instant": sp.instant, "user": sp.user, "saved_at_ms": sp.saved_at_ms, "comment": sp.comment, "files": list(sp.files)}


@app.command()
def restore(
    table: Annotated[str, typer.Argument()],
    savepoint: Annotated[str, typer.Argument(help="the savepoint's instant")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Return the table to a savepoint: every write after it is rolled back (Hudi's restore action)."""
    from laketide.coordinator.savepoints import Savepoints
    from laketide.table.savepoint import savepoints

    _instant_argument(savepoint, as_json)
    change = _Change(table, api, token, zookeeper, zookeeper_root, as_json)
    if not change.api and not any(sp.instant == savepoint for sp in savepoints(change.table.timeline)):
        raise _fail(f"no savepoint {savepoint} on {change.table.uri}", NOT_FOUND, as_json)

    def local(coordinator):
        result = _with_progress(lambda progress: Savepoints(coordinator).restore(savepoint, progress), f"restoring {savepoint}", as_json)
        return result.__dict__

    data = change.run("POST", "/v1/restore", {"savepoint": savepoint}, local)
    if data["restore_instant"] is None:
        _emit(data, as_json, f"nothing was written after {savepoint}; the table is already restored")
    else:
        _emit(data, as_json, f"restored to {savepoint} with {data['restore_instant']}: {len(data['rolled_back'])} instants rolled back, {data['files']} files deleted")


@app.command()
def clean(
    table: Annotated[str, typer.Argument()],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be deleted, change nothing")] = False,
    policy: Annotated[str, typer.Option(help="KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS or KEEP_LATEST_BY_HOURS")] = "KEEP_LATEST_COMMITS",
    retain_commits: Annotated[int, typer.Option(min=1)] = 10,
    retain_file_versions: Annotated[int, typer.Option(min=1)] = 1,
    retain_hours: Annotated[float, typer.Option(min=0.001)] = 24.0,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Delete file versions no retained read needs, and files of failed writes (Hudi's clean action)."""
    from pydantic import ValidationError

    from laketide.config import CleanSection
    from laketide.coordinator import Coordinator
    from laketide.coordinator.cleaner import Cleaner
    from laketide.index.state import StateIndex

    try:
        settings = CleanSection(policy=policy.upper(), retain_commits=retain_commits, retain_file_versions=retain_file_versions, retain_hours=retain_hours)
    except ValidationError as exc:
        raise _fail(f"--policy: {exc.errors()[0]['msg']}", USAGE, as_json) from None
    t = _open(table, as_json)
    with _holding_lease(t, zookeeper, zookeeper_root, as_json, "the job cleans the table itself (clean.async)", acquire=not dry_run) as lease_:
        cleaner = Cleaner(Coordinator(t, lease_, "laketide-ops"), settings.retention(), StateIndex(t.io, 1).obsolete_runs)
        result = _with_progress(lambda progress: cleaner.clean(dry_run=dry_run, progress=progress), "cleaning", dry_run or as_json)
        if not dry_run:
            _catch_up_mirror(t)
    data = result.__dict__
    verb = "would delete" if dry_run else (f"cleaned with {result.clean_instant}, deleted" if result.clean_instant else "nothing to clean; deleted")
    _emit(data, as_json, f"{t.uri}: {verb} {len(result.files)} files (reads from {result.earliest_to_retain or 'every commit'} on are kept)\n" + "\n".join(f"  {f}" for f in result.files))


@app.command()
def compact(
    table: Annotated[str, typer.Argument()],
    schedule: Annotated[bool, typer.Option("--schedule", help="plan a compaction of the slices past the thresholds, run nothing")] = False,
    run_: Annotated[bool, typer.Option("--run", help="execute the pending compactions only")] = False,
    delta_commits: Annotated[int, typer.Option(min=1, help="compact slices with at least this many log files")] = 5,
    max_log_bytes: Annotated[int, typer.Option(min=1, help="or with at least this many bytes of logs")] = 256 * 2**20,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Fold merge-on-read log files into new base files: schedule a plan, run pending plans, or both (the default)."""
    from laketide.config import CompactionSection
    from laketide.coordinator import Coordinator
    from laketide.writer.compactor import Compactor

    t = _open(table, as_json)
    if t.config.table_type != "MERGE_ON_READ":
        raise _fail(f"{t.uri} is a {t.config.table_type} table; only merge-on-read tables have logs to compact", USAGE, as_json)
    with _holding_lease(t, zookeeper, zookeeper_root, as_json, "the job compacts the table itself (compaction.mode)") as lease_:
        compactor = Compactor(Coordinator(t, lease_, "laketide-ops"), CompactionSection(delta_commits=delta_commits, max_log_bytes=max_log_bytes, mode="off"))
        scheduled = compactor.schedule() if schedule or not run_ else None
        results = _with_progress(compactor.run, "compacting", as_json) if run_ or not schedule else []
        _catch_up_mirror(t)
    data = {"scheduled": scheduled, "compacted": [r.__dict__ for r in results]}
    parts = [f"scheduled compaction {scheduled}"] if scheduled else (["no slice is due for compaction"] if schedule or not run_ else [])
    parts += [f"compacted {r.instant}: {r.file_groups} file groups, {r.records} records in {r.seconds:.1f}s" for r in results]
    _emit(data, as_json, f"{t.uri}: " + ("; ".join(parts) or "no pending compaction"))


metadata_app = typer.Typer(help="Hudi's metadata table, which laketide does not keep up to date.", no_args_is_help=True)
app.add_typer(metadata_app, name="metadata")


@metadata_app.command("drop")
def metadata_drop(
    table: Annotated[str, typer.Argument()],
    backup: Annotated[bool, typer.Option("--backup", help="move .hoodie/metadata aside to .hoodie/.metadata_<instant> instead of deleting it")] = False,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Disable and delete Hudi's metadata table, as Hudi does when it is disabled (set hoodie.metadata.enable=false on Hudi's writers too)."""
    from laketide.table import metadata_table
    from laketide.table.instant import InstantClock

    t = _open(table, as_json)
    with _holding_lease(t, zookeeper, zookeeper_root, as_json, "stop the job first"):
        result = metadata_table.drop(t.io, InstantClock().next() if backup else None)
    data = result.__dict__
    if not result.partitions and not result.removed:
        _emit(data, as_json, f"{t.uri} has no metadata table")
    else:
        where = f", moved to {result.backup}" if result.backup else (", deleted" if result.removed else "")
        _emit(data, as_json, f"{t.uri}: metadata table disabled (partitions {', '.join(result.partitions) or 'none'}){where}")


def _catch_up_mirror(table) -> list[int]:
    """A table with a Delta mirror shows an operator's change there too (under the lease the change took)."""
    from laketide.table.delta_mirror import DeltaMirror, has_mirror

    return DeltaMirror(table).catch_up() if has_mirror(table.io) else []


@app.command()
def mirror(
    table: Annotated[str, typer.Argument()],
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Write or catch up the table's Delta Lake log (_delta_log/), for Delta readers; from then on every writer keeps it current.

    A new mirror starts at the active timeline's first completed action: its first version is the table as of then.
    Never run Delta's VACUUM on the mirror: Hudi's cleaner is the only deleter, and VACUUM would delete file
    versions that Hudi time travel still reads.
    """
    from laketide.table.delta_log import DeltaLog
    from laketide.table.delta_mirror import DeltaMirror

    t = _open(table, as_json)
    with _holding_lease(t, zookeeper, zookeeper_root, as_json, "the job keeps its mirror current itself (mirror.delta)"):
        versions = _with_progress(lambda progress: DeltaMirror(t).catch_up(), "mirroring", as_json)
    latest = DeltaLog(t.io).versions()
    data = {"written": versions, "latest_version": latest[-1] if latest else None}
    _emit(data, as_json, f"{t.uri}: {len(versions)} Delta versions written; the Delta log is at version {data['latest_version']}")


def _with_progress(action, what: str, quiet: bool):
    """Run ``action(progress)`` with a progress bar unless output is for scripts."""
    if quiet:
        return action(None)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(what, total=None)
        return action(lambda done, total: bar.update(task, completed=done, total=total))


def _local_rollback(coordinator, instant: str, force: bool, dry_run: bool, as_json: bool):
    return _with_progress(
        lambda progress: coordinator.rollback(instant, force=force, dry_run=dry_run, progress=progress), f"rolling back {instant}", dry_run or as_json
    )


@app.command()
def serve(
    table: Annotated[str, typer.Option("--table", help="table path or URI")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="0 picks a free port")] = 8470,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    token: Annotated[Optional[str], typer.Option(help=f"bearer token for changes (default: ${TOKEN_ENV})")] = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
) -> None:
    """Serve the coordinator API for a table whose job is down."""
    import uvicorn

    from laketide.api.app import create_app

    _logging()
    t = _open(table)
    application = create_app(
        t,
        token or os.environ.get(TOKEN_ENV),
        lease_factory=lambda: _lease(t, zookeeper, zookeeper_root, job_id="laketide-serve"),
        instant_side_files=_side_files(t),
    )
    uvicorn.run(application, host=host, port=port, log_level="info")


def main() -> None:
    app(prog_name="laketide")  # the same name under ``python -m laketide`` and spark-submit


if __name__ == "__main__":
    main()

"""Table services an operator runs by hand, under the table's lease: clean, compact, mirror, metadata drop, and the
table version's upgrade and downgrade.

A running job runs these itself (clean.async, compaction.mode, mirror.delta), so each is refused while
a job holds the lease, naming the setting that makes the job do it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Annotated

import typer

from laketide.cli.apps import app, metadata_app
from laketide.cli.options import (
    JsonOpt,
    TableArg,
    ZkOpt,
    ZkRootOpt,
    lease_for,
    open_table,
)
from laketide.cli.output import Output, answers
from laketide.config.types import Codec
from laketide.table.errors import Invalid
from laketide.table.format.encoding import BASE_FILE_CODEC


@contextmanager
def _operations(table: str, zookeeper: str | None, zookeeper_root: str, when_held: str, take: bool = True):
    from laketide.writer.job.operations import Operations

    t = open_table(table)
    with Operations.under_lease(t, lease_for(t, zookeeper, zookeeper_root), when_held, take=take) as operations:
        yield operations


@app.command()
@answers
def clean(
    table: TableArg,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be deleted, change nothing")] = False,
    policy: Annotated[
        str, typer.Option(help="KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS or KEEP_LATEST_BY_HOURS")
    ] = "KEEP_LATEST_COMMITS",
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

    try:
        # validated as the job's [clean] section is: an unknown policy is named with what is allowed
        settings = CleanSection.model_validate(
            {
                "policy": policy.upper(),
                "retain_commits": retain_commits,
                "retain_file_versions": retain_file_versions,
                "retain_hours": retain_hours,
            }
        )
    except ValidationError as exc:
        raise Invalid(f"--policy: {exc.errors()[0]['msg']}") from None
    out = Output(as_json)
    with _operations(
        table, zookeeper, zookeeper_root, "the job cleans the table itself (clean.async)", take=not dry_run
    ) as operations:
        with out.progress("cleaning", quiet=dry_run) as progress:
            result = operations.clean(settings.retention(), dry_run=dry_run, progress=progress)
        uri = operations.table.uri
    verb = (
        "would delete"
        if dry_run
        else (f"cleaned with {result.clean_instant}, deleted" if result.clean_instant else "nothing to clean; deleted")
    )
    kept = f"reads from {result.earliest_to_retain or 'every commit'} on are kept"
    out.result(
        result, f"{uri}: {verb} {len(result.files)} files ({kept})\n" + "\n".join(f"  {f}" for f in result.files)
    )


@app.command()
@answers
def compact(
    table: TableArg,
    schedule: Annotated[
        bool, typer.Option("--schedule", help="plan a compaction of the slices past the thresholds, run nothing")
    ] = False,
    run_: Annotated[bool, typer.Option("--run", help="execute the pending compactions only")] = False,
    delta_commits: Annotated[int, typer.Option(min=1, help="compact slices with at least this many log files")] = 5,
    max_log_bytes: Annotated[int, typer.Option(min=1, help="or with at least this many bytes of logs")] = 256 * 2**20,
    parquet_compression: Annotated[
        Codec, typer.Option(help="codec of the new base files: the job's write.parquet_compression, if it sets one")
    ] = BASE_FILE_CODEC,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Fold merge-on-read log files into new base files: schedule a plan, run pending plans, or both (the default)."""
    from laketide.config import CompactionSection, WriteSection

    out = Output(as_json)
    settings = CompactionSection(delta_commits=delta_commits, max_log_bytes=max_log_bytes, mode="off")
    plan, execute = schedule or not run_, run_ or not schedule
    with _operations(
        table, zookeeper, zookeeper_root, "the job compacts the table itself (compaction.mode)"
    ) as operations:
        with out.progress("compacting") as progress:
            outcome = operations.compact(
                settings,
                schedule=plan,
                run=execute,
                progress=progress,
                write=WriteSection(parquet_compression=parquet_compression),
            )
        uri = operations.table.uri
    parts = (
        [f"scheduled compaction {outcome.scheduled}"]
        if outcome.scheduled
        else (["no slice is due for compaction"] if plan else [])
    )
    parts += [
        f"compacted {r.instant}: {r.file_groups} file groups, {r.records} records in {r.seconds:.1f}s"
        for r in outcome.compacted
    ]
    out.result(outcome, f"{uri}: " + ("; ".join(parts) or "no pending compaction"))


@app.command()
@answers
def mirror(
    table: TableArg, zookeeper: ZkOpt = None, zookeeper_root: ZkRootOpt = "/laketide", as_json: JsonOpt = False
) -> None:
    """Write or catch up the table's Delta Lake log (_delta_log/), for Delta readers; from then on every writer keeps
    it current.

    A new mirror starts at the active timeline's first completed action: its first version is the table as of then.
    Never run Delta's VACUUM on the mirror: Hudi's cleaner is the only deleter, and VACUUM would delete file
    versions that Hudi time travel still reads.
    """
    out = Output(as_json)
    with _operations(
        table, zookeeper, zookeeper_root, "the job keeps its mirror current itself (mirror.delta)"
    ) as operations:
        outcome = operations.catch_up_mirror()
        uri = operations.table.uri
    out.result(
        outcome,
        f"{uri}: {len(outcome.written)} Delta versions written; the Delta log is at version {outcome.latest_version}",
    )


@metadata_app.command("drop")
@answers
def metadata_drop(
    table: TableArg,
    backup: Annotated[
        bool,
        typer.Option(
            "--backup", help="move .hoodie/metadata aside to .hoodie/.metadata_<instant> instead of deleting it"
        ),
    ] = False,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Disable and delete Hudi's metadata table, as Hudi does when it is disabled (set hoodie.metadata.enable=false on
    Hudi's writers too)."""
    out = Output(as_json)
    with _operations(table, zookeeper, zookeeper_root, "stop the job first") as operations:
        result = operations.drop_metadata_table(backup)
        uri = operations.table.uri
    if not result.partitions and not result.removed:
        out.result(result, f"{uri} has no metadata table")
    else:
        where = f", moved to {result.backup}" if result.backup else (", deleted" if result.removed else "")
        out.result(
            result, f"{uri}: metadata table disabled (partitions {', '.join(result.partitions) or 'none'}){where}"
        )


def _change_version(table: str, to: int, dry_run: bool, zookeeper: str | None, zookeeper_root: str, as_json: bool):
    out = Output(as_json)
    with (
        _operations(table, zookeeper, zookeeper_root, "stop the job first", take=not dry_run) as operations,
        out.progress("compacting first", quiet=dry_run) as progress,
    ):
        change = operations.change_version(to, dry_run=dry_run, progress=progress)
    if change.from_version == change.to_version:
        out.result(change, f"{change.table} is already table version {to}")
        return
    verb = "would move" if dry_run else "moved"
    out.result(
        change,
        f"{change.table}: {verb} from table version {change.from_version} to {change.to_version}: "
        f"{change.timeline_files} timeline files, {change.archived_actions} archived actions",
    )


ToOpt = Annotated[int, typer.Option("--to", help="the table version to move to")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="say what would move, change nothing")]


@app.command()
@answers
def upgrade(
    table: TableArg,
    to: ToOpt = 8,
    dry_run: DryRunOpt = False,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Move a table from version 6 to 8 (Hudi 1.x's), as Hudi's upgrade does: failed writes rolled back, a
    merge-on-read table compacted, the timeline, archive and properties moved. Refused while a job holds the table."""
    _change_version(table, to, dry_run, zookeeper, zookeeper_root, as_json)


@app.command()
@answers
def downgrade(
    table: TableArg,
    to: ToOpt = 6,
    dry_run: DryRunOpt = False,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    as_json: JsonOpt = False,
) -> None:
    """Move a table from version 8 back to 6, which Hudi 0.x reads, as Hudi's downgrade does. Refused while a job
    holds the table."""
    _change_version(table, to, dry_run, zookeeper, zookeeper_root, as_json)

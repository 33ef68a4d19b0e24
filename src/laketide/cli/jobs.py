"""``laketide run`` (the job, on embedded defaults without a config) and ``laketide serve`` (the API and dashboard
over a table whose job is down)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from laketide.cli.apps import app, configure_logging
from laketide.cli.options import ZkOpt, ZkRootOpt, lease_for, open_table
from laketide.cli.output import Output, answers
from laketide.service import TOKEN_ENV
from laketide.table.errors import ErrorKind, LaketideError

# Embedded defaults: the generator source into ./demo/table, so `laketide run` works with no config at all.
DEFAULTS = {
    "table": {"path": "./demo/table", "name": "demo", "record_key": ["id"], "partition_by": ["region"]},
    "stream": {"checkpoint": "./demo/checkpoint", "trigger": "available-now"},
}
# the generator's rows order by their ``ts``; another source keeps its own default (a change feed's position)
GENERATOR_ORDERING = "ts"


def embedded_defaults(overrides: list[str]) -> dict:
    """The embedded defaults for a run without a config file: the demo's, with the generator's ordering
    field only when the generator is the source; no table settings for the user's own table and source."""
    from laketide.config import apply_override

    given: dict = {}
    for assignment in overrides:
        apply_override(given, assignment)
    defaults = {section: dict(values) for section, values in DEFAULTS.items()}
    source = given.get("source", {})
    if source.get("format", "generator") == "generator" and source.get("envelope", "none") == "none":
        defaults["table"]["ordering_field"] = GENERATOR_ORDERING
    elif "path" in given.get("table", {}):
        # the user's own table and source: the demo's name, key and partitioning fit the generator's rows, not
        # theirs (an existing table gives its own from hoodie.properties; a new one needs table.record_key)
        defaults["table"] = {}
    return defaults


@app.command()
@answers
def run(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML job config; without it, the embedded demo defaults")
    ] = None,
    conf: Annotated[
        list[str] | None, typer.Option("--conf", help="override one key: section.key=value (repeatable)")
    ] = None,
) -> None:
    """Run the streaming upsert job (builds its Spark session, or joins the one spark-submit made)."""
    from laketide.config import load_config

    job_config = load_config(config, conf or [], base=None if config else embedded_defaults(conf or []))
    configure_logging()
    from laketide.service import run_service
    from laketide.writer.job.database import Database

    try:
        writer = run_service(job_config)
    except LaketideError:
        raise
    except (ValueError, NotImplementedError) as exc:
        raise Output().fail(str(exc), ErrorKind.FAILED) from None  # a library's error, e.g. Spark's, named as it came
    if isinstance(writer, Database):  # a job of a whole database
        for label, table in sorted(writer.tables.items()):
            typer.echo(
                f"table {label}: {sum(1 for r in table.job.writer.status.recent if not r.skipped)} "
                f"micro-batches committed to {table.job.table.uri}"
            )
        return
    reports = [r for r in writer.status.recent if not r.skipped]
    path = job_config.table.path if "://" in job_config.table.path else Path(job_config.table.path).resolve()
    typer.echo(f"\n{len(reports)} micro-batches committed to {path}. Read the table with:")
    typer.echo(
        f'  hudi:     python -c "from hudi import HudiTableBuilder; import pyarrow as pa; '
        f"print(pa.Table.from_batches(HudiTableBuilder.from_base_uri('{path}').build().read()).num_rows)\""
    )
    typer.echo(
        f"  laketide: python -c \"from laketide.table import Table; print(Table.open('{path}').snapshot().num_rows)\""
    )


@app.command()
@answers
def serve(
    table: Annotated[str, typer.Option("--table", help="table path or URI")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="0 picks a free port")] = 8470,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    token: Annotated[str | None, typer.Option(help=f"bearer token for changes (default: ${TOKEN_ENV})")] = None,
    zookeeper: ZkOpt = None,
    zookeeper_root: ZkRootOpt = "/laketide",
    quarantine: Annotated[
        str | None, typer.Option(help="the job's write.quarantine_path (default: <table>_quarantine)")
    ] = None,
    small_file_limit: Annotated[
        str, typer.Option(help="the job's write.small_file_limit: smaller file groups stand out in the dashboard")
    ] = "100MB",
    max_rate: Annotated[
        float, typer.Option(min=0, help="requests a second it answers, all clients together (0: no limit); beyond, 429")
    ] = 25.0,
    max_concurrent: Annotated[int, typer.Option(min=1, help="requests it answers at once")] = 2,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="a Host name it answers to (repeat); default: loopback names on a loopback --host, else any"),
    ] = None,
) -> None:
    """Serve the coordinator API and the dashboard (/ui) for a table whose job is down."""
    from laketide.api.app import ApiLimits, ViewSettings, create_app
    from laketide.api.guard import default_hosts
    from laketide.api.server import ApiServer
    from laketide.config.types import parse_size

    configure_logging()
    t = open_table(table)
    views = ViewSettings(quarantine, small_file_bytes=parse_size(small_file_limit))
    lease = lambda: lease_for(t, zookeeper, zookeeper_root, job_id="laketide-serve")  # noqa: E731
    app = create_app(
        t,
        token or os.environ.get(TOKEN_ENV),
        lease_factory=lease,
        settings=views,
        limits=ApiLimits(max_rate or None, max_concurrent),
        allowed_hosts=tuple(allowed_host) if allowed_host else default_hosts(host),
    )
    server = ApiServer(app, host, port, log_level="info")
    typer.echo(
        f"serving {t.uri} on {server.address} (dashboard at {server.address}/ui, OpenAPI at "
        f"{server.address}/docs); Ctrl-C stops"
    )
    server.run()

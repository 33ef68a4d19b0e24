"""The ``laketide`` command line: run the job, serve the API, inspect a table and change it.

Reads go through ``table.inspect`` (``cli/inspect.py``), changes through ``Operations``
(``cli/changes.py``, ``cli/services.py``), and every answer through ``cli/output.py``.

Exit codes (``cli.output.EXIT_CODES``): 0 done, 1 failed, 2 bad usage or configuration, 3 not found,
4 refused (a guarantee, a held lease, a rejected token), 5 the running job lost its lease (its supervisor
restarts it: the new run takes a new epoch and recovers), 6 a server it needs cannot be reached (try again).
"""

from __future__ import annotations

import faulthandler
import os

# The job's processes allocate Arrow memory with the C library's malloc, unless told otherwise. Set before pyarrow
# is first imported, which reads it then; a Spark job's workers are told the same (``spark.session.WANTED``), and a
# job started in-process takes it for its driver (``spark.session._use_driver_pool``, which has the measurements).
# Under pyarrow's default mimalloc the driver of a generator job of 2,000-row micro-batches held 336 MB against 157,
# and its 50,000-row micro-batches took 0.55 to 0.59 s against 0.46 to 0.49.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

import logging
from pathlib import Path
from typing import Annotated

import typer

from laketide.cli.options import STORAGE_OPTIONS, ZkOpt, ZkRootOpt, lease_for, open_table, storage_pairs
from laketide.cli.output import Output, answers
from laketide.service import TOKEN_ENV
from laketide.table.errors import ErrorKind, LaketideError

app = typer.Typer(help="laketide: a streaming upsert writer for Apache Hudi tables.", no_args_is_help=True)
savepoint_app = typer.Typer(
    help="Savepoints: commits that cleaning keeps readable and restore can return to.", no_args_is_help=True
)
app.add_typer(savepoint_app, name="savepoint")
metadata_app = typer.Typer(help="Hudi's metadata table, which laketide does not keep up to date.", no_args_is_help=True)
app.add_typer(metadata_app, name="metadata")

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


@app.callback()
def _root(
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            "-s",
            metavar="KEY=VALUE",
            help="how to reach a table on an object store, in object_store's keys (aws_endpoint_url, aws_region, "
            "azure_storage_account_name, google_service_account, ...; repeatable); what is not given comes from the "
            "environment. `laketide run` takes them as --conf storage.options.KEY=VALUE.",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=lambda shown: _version(shown), help="print laketide's version and exit"
        ),
    ] = False,
) -> None:
    """laketide: a streaming upsert writer for Apache Hudi tables."""
    STORAGE_OPTIONS.set(storage_pairs(storage_option or []))


def _version(shown: bool) -> None:
    if shown:
        from laketide import __version__

        typer.echo(f"laketide {__version__}")
        raise typer.Exit()


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "pyspark", "kazoo"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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
    _logging()
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

    _logging()
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


# the other commands live beside this module; importing them registers them on ``app``, after these two
from laketide.cli import changes, inspect, services  # noqa: E402,F401


def main() -> None:
    # a crash in native code (Arrow, librdkafka, uvicorn's loop, the JVM's bridge) leaves every thread's Python stack
    # on stderr, not only an exit status
    faulthandler.enable(all_threads=True)
    app(prog_name="laketide")  # the same name under ``python -m laketide`` and spark-submit


if __name__ == "__main__":
    main()

"""The ``laketide`` command line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from laketide.config import ConfigError, load_config

app = typer.Typer(help="laketide: a streaming upsert writer for Apache Hudi tables.", no_args_is_help=True)

# Embedded defaults: the generator source into ./demo/table, so `laketide run` works with no config at all.
DEFAULTS = {
    "table": {"path": "./demo/table", "name": "demo", "record_key": ["id"], "partition_by": ["region"], "ordering_field": "ts"},
    "stream": {"checkpoint": "./demo/checkpoint", "trigger": "available-now"},
}


@app.callback()
def _root() -> None:
    """laketide: a streaming upsert writer for Apache Hudi tables."""


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="TOML job config; without it, the embedded demo defaults")] = None,
    conf: Annotated[Optional[list[str]], typer.Option("--conf", help="override one key: section.key=value (repeatable)")] = None,
) -> None:
    """Run the streaming upsert job (builds its Spark session, or joins the one spark-submit made)."""
    try:
        job_config = load_config(config, conf or [], base=None if config else DEFAULTS)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    _logging()
    from laketide.writer.job import run as run_job

    writer = run_job(job_config)
    reports = [r for r in writer.status.recent if not r.skipped]
    path = Path(job_config.table.path).resolve()
    typer.echo(f"\n{len(reports)} micro-batches committed to {path}. Read the table with:")
    typer.echo(f"  hudi:     python -c \"from hudi import HudiTableBuilder; import pyarrow as pa; "
               f"print(pa.Table.from_batches(HudiTableBuilder.from_base_uri('{path}').build().read()).num_rows)\"")
    typer.echo(f"  laketide: python -c \"from laketide.table import Table; print(Table.open('{path}').snapshot().num_rows)\"")


def main() -> None:
    app()


if __name__ == "__main__":
    main()

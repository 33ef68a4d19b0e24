"""The command line's Typer apps: the root, with the options every command takes, and its groups. Each module of
``cli/`` registers its commands on them."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from laketide.cli.options import STORAGE_OPTIONS, storage_pairs

app = typer.Typer(help="laketide: a streaming upsert writer for Apache Hudi tables.", no_args_is_help=True)
savepoint_app = typer.Typer(
    help="Savepoints: commits that cleaning keeps readable and restore can return to.", no_args_is_help=True
)
app.add_typer(savepoint_app, name="savepoint")
metadata_app = typer.Typer(help="Hudi's metadata table, which laketide does not keep up to date.", no_args_is_help=True)
app.add_typer(metadata_app, name="metadata")


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


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("py4j", "pyspark", "kazoo"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

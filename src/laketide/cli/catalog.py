"""``laketide sync``: register a table in a catalog, or bring its entries up to date, as Hudi's sync tools do. Any
table: the job's own, or one Apache Hudi's writers made. It reads the table and writes only to the catalog, so it
takes no lease and runs beside a job."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from laketide.cli.apps import app
from laketide.cli.options import STORAGE_OPTIONS, JsonOpt, TableArg, open_table, storage_pairs
from laketide.cli.output import Output, answers


@app.command()
@answers
def sync(
    table: TableArg,
    catalog: Annotated[str, typer.Option("--catalog", help="hive: a Hive Metastore; glue: AWS Glue")],
    database: Annotated[str, typer.Option(help="the database to register it in; made when missing")],
    uri: Annotated[str | None, typer.Option(help="hive: thrift://host:9083 (several, comma-separated)")] = None,
    name: Annotated[str | None, typer.Option("--table", help="the entry's name (default: the table's name)")] = None,
    delta_table: Annotated[
        str | None,
        typer.Option(help="one more entry under this name, of the table's Delta mirror (a table with a Delta log)"),
    ] = None,
    support_timestamp: Annotated[
        bool, typer.Option(help="declare timestamp columns timestamp, not bigint (Hudi's support_timestamp)")
    ] = False,
    catalog_option: Annotated[
        list[str] | None,
        typer.Option(
            "--catalog-option",
            metavar="KEY=VALUE",
            help="glue: how to reach it, in the storage options' AWS names (aws_region, aws_endpoint_url, ...); "
            "unset, the --storage-option ones, then the environment",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register TABLE in a catalog as Apache Hudi's sync does (merge-on-read: NAME_ro and NAME_rt), or bring its
    entries up to date: columns, partitions, the last commit synced."""
    from laketide.catalog import CatalogSync, open_catalog
    from laketide.table.errors import Invalid
    from laketide.table.mirror.delta_mirror import has_mirror

    t = open_table(table)
    if delta_table is not None and not has_mirror(t.io):
        raise Invalid(
            f"--delta-table {delta_table}: {t.uri} has no Delta log (_delta_log) to register; a job with "
            "mirror.delta = true writes one, as does `laketide mirror TABLE`"
        )
    client = open_catalog(catalog, uri, storage_pairs(catalog_option or []) or dict(STORAGE_OPTIONS.get()))
    try:
        result = CatalogSync(client, database, name or t.name, support_timestamp, delta_table).sync(t)
    finally:
        client.close()
    out = Output(as_json)
    if result.instant is None:
        out.result(asdict(result), f"{t.uri}: no commit yet, nothing to register")
        return
    out.result(asdict(result), result.line())

"""What the sync asks of a catalog, whichever it is (a Hive Metastore, AWS Glue): databases, table entries and
their partitions. Each catalog's client turns its own failures into a ``CatalogUnavailable`` (it could not be
reached: the sync tries again later) or a ``LaketideError`` naming what it refused."""

from __future__ import annotations

from typing import Protocol

from laketide.catalog.entries import PartitionEntry, TableEntry
from laketide.table.errors import ErrorKind, LaketideError


class CatalogUnavailable(LaketideError):
    kind = ErrorKind.UNAVAILABLE


class Catalog(Protocol):
    """One database of a catalog. ``name`` says which, for messages (``hive thrift://host:9083``)."""

    name: str

    def ensure_database(self, database: str) -> None: ...

    def table(self, database: str, name: str) -> TableEntry | None: ...

    def create_table(self, database: str, entry: TableEntry) -> None: ...

    def alter_table(self, database: str, entry: TableEntry, cascade: bool) -> None: ...

    def partitions(self, database: str, name: str) -> list[PartitionEntry]: ...

    def add_partitions(self, database: str, name: str, partitions: list[PartitionEntry]) -> None: ...

    def drop_partitions(self, database: str, name: str, partitions: list[PartitionEntry]) -> None: ...

    def close(self) -> None: ...


def open_catalog(kind: str, uri: str | None = None, options: dict[str, str] | None = None) -> Catalog:
    """The catalog of ``kind``: ``hive`` at ``uri``; ``glue`` where ``options`` reach (AWS names)."""
    if kind == "hive":
        from laketide.catalog.hive import HiveCatalog

        if not uri:
            raise LaketideError("a Hive Metastore needs its uri (thrift://host:9083)", kind=ErrorKind.INVALID)
        return HiveCatalog(uri)
    if kind == "glue":
        from laketide.catalog.glue import GlueCatalog

        return GlueCatalog(options)
    raise LaketideError(f"catalog kind '{kind}' is not known: hive or glue", kind=ErrorKind.INVALID)

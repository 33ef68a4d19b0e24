"""Catalogs that engines find tables in (a Hive Metastore, AWS Glue), kept up to date with a table as Apache
Hudi's sync tools keep them: ``entries`` (what is registered, from the table alone), ``catalog`` (what the sync
asks of a catalog), ``hive`` (a metastore over Thrift), ``sync`` (bringing the entries up to date)."""

from laketide.catalog.catalog import Catalog, CatalogUnavailable, open_catalog
from laketide.catalog.sync import CatalogSync, SyncResult

__all__ = ["Catalog", "CatalogSync", "CatalogUnavailable", "SyncResult", "open_catalog"]

"""``[catalog]``: the catalog engines find the table in (a Hive Metastore, AWS Glue), kept up to date after each
commit as Hudi's sync tools keep it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from laketide.config.section import Section


class CatalogSection(Section):
    """Where the table is registered. Unset ``kind``: nowhere."""

    kind: Literal["hive", "glue"] | None = None
    """``hive``: a Hive Metastore over Thrift; ``glue``: AWS Glue's Data Catalog."""
    uri: str | None = None
    """``hive``: the metastore, ``thrift://host:9083``; several, comma-separated, are tried in turn."""
    database: str | None = None
    """The database the table is registered in; made when missing."""
    table: str | None = None
    """The entry's name (default: ``table.name``); a merge-on-read table is ``<name>_ro`` and ``<name>_rt``."""
    delta_table: str | None = None
    """With ``mirror.delta = true``: one more entry, of the Delta mirror, under this name (Spark's provider
    ``delta``, Athena's ``table_type = DELTA``), so engines without Hudi read the same files as Delta by name. In a
    database job it holds ``{table}`` as ``table`` may."""
    support_timestamp: bool = False
    """Declare timestamp columns ``timestamp``; off, they are ``bigint`` (microseconds), as Hudi's sync does by
    default (``hoodie.datasource.hive_sync.support_timestamp``)."""
    retry_seconds: float = Field(default=5.0, gt=0)
    """After a failed sync, the wait before the first timed retry; each next failure doubles it, up to
    ``retry_max_seconds``. Commits never wait on the catalog, so this is only how soon the entries catch up."""
    retry_max_seconds: float = Field(default=300.0, gt=0)
    """The longest wait between two retries while the catalog stays down: each one is a call on the catalog."""
    options: dict[str, str] = Field(default_factory=dict, repr=False)
    """``glue``: how to reach it, in the storage options' AWS names (``aws_region``, ``aws_endpoint_url``, ...);
    unset, those of ``storage.options``, then the environment."""

    @model_validator(mode="after")
    def _named(self) -> CatalogSection:
        if self.kind is None:
            return self
        if not self.database:
            raise ValueError(f"catalog.database is needed with catalog.kind = '{self.kind}'")
        if self.retry_max_seconds < self.retry_seconds:
            raise ValueError(
                f"catalog.retry_max_seconds ({self.retry_max_seconds}) is below catalog.retry_seconds "
                f"({self.retry_seconds}); raise it or lower catalog.retry_seconds"
            )
        if self.kind == "hive" and not self.uri:
            raise ValueError("catalog.uri is needed with catalog.kind = 'hive' (thrift://host:9083)")
        return self

"""The table-service sections of a job's configuration (``laketide.config``): cleaning, archival, compaction,
what a failing service does, and the Delta mirror."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from laketide.config.section import Section
from laketide.config.types import Size


class CleanSection(Section):
    """``[clean]``: which old file versions the cleaner deletes (Hudi's cleaner policies)."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, use_attribute_docstrings=True
    )

    policy: Literal["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"] = "KEEP_LATEST_COMMITS"
    """Hudi's cleaner policy."""
    retain_commits: int = Field(default=10, ge=1)
    """``KEEP_LATEST_COMMITS``: reads as of the newest N commits keep working."""
    retain_file_versions: int = Field(default=1, ge=1)
    """``KEEP_LATEST_FILE_VERSIONS``: versions kept per file group."""
    retain_hours: float = Field(default=24.0, gt=0)
    """``KEEP_LATEST_BY_HOURS``: reads as of any commit of the last N hours keep working."""
    async_: bool = Field(default=True, alias="async")
    """Clean in a background thread after commits (one at a time, under the lease, never blocking a
    micro-batch); ``false`` cleans inline after each commit."""

    def retention(self):
        from laketide.table.format.clean import CleanPolicy, Retention

        return Retention(CleanPolicy(self.policy), self.retain_commits, self.retain_file_versions, self.retain_hours)


class ArchiveSection(Section):
    """Hudi's ``hoodie.keep.min.commits`` / ``hoodie.keep.max.commits``."""

    enabled: bool = True
    """Move old instants to ``.hoodie/archived/`` after commits (in the same background round as cleaning)."""
    min_commits: int = Field(default=20, ge=1)
    """Completed writes the active timeline keeps (``hoodie.keep.min.commits``); above ``clean.retain_commits``."""
    max_commits: int = Field(default=30, ge=2)
    """Archival starts once the active timeline has more completed writes than this (``hoodie.keep.max.commits``)."""

    @model_validator(mode="after")
    def _min_below_max(self) -> ArchiveSection:
        if self.min_commits >= self.max_commits:
            raise ValueError("archive.min_commits must be below archive.max_commits")
        return self


class CompactionSection(Section):
    """Merge-on-read compaction: when a file slice is folded into a new base file, and where that runs.

    A slice is compacted once it has ``delta_commits`` log files (one per
    deltacommit that touched it) or ``max_log_bytes`` of them. ``async`` runs
    it in the table-services thread beside ingestion (before each slice waiting
    up to ``yield_seconds`` for the micro-batch being written; 0 never waits),
    ``inline`` after the commit that scheduled it, ``off`` leaves it to ``laketide compact``.
    """

    delta_commits: int = Field(default=5, ge=1)
    """Compact a file slice once it has this many log files (one per deltacommit that touched it)."""
    max_log_bytes: Size = 256 * 2**20
    """Or once its logs hold this many bytes."""
    mode: Literal["async", "inline", "off"] = "async"
    """``async`` (in the table-services thread beside ingestion), ``inline`` (right after the commit that
    schedules it), ``off`` (only ``laketide compact``)."""
    yield_seconds: float = Field(default=2.0, ge=0)
    """``async``: before each file slice, wait up to this long for the micro-batch being written to finish, so
    compaction uses the driver's cores between micro-batches; ``0`` never waits."""


class ServicesSection(Section):
    """Table services after a commit (index compaction, compaction, clean, archival, mirror).

    A commit stands whatever a service after it does: a failed service is
    logged with the instant, counted in ``laketide_table_service_failures``
    and run again after the next micro-batch. After ``max_consecutive_failures``
    failures in a row of one service the job stops with an error naming it.
    """

    max_consecutive_failures: int = Field(default=5, ge=1)
    """After this many failures in a row of one service the job stops (exit 1) with an error naming it,
    every commit in place."""


class MirrorSection(Section):
    """A Delta Lake log beside the Hudi timeline (``table.delta_mirror``), for Delta readers.

    ``log_retention_versions`` bounds the log: once a checkpoint is that many
    versions old, the commit files and checkpoints before it are deleted.
    """

    delta: bool = False
    """Keep a Delta Lake log (``_delta_log/``) of the same files beside the timeline; a table that has one is
    kept current whatever this says."""
    log_retention_versions: int = Field(default=1000, ge=10)
    """The Delta log keeps this many versions: older commit files and checkpoints go at a checkpoint."""

"""What a rollback may never do: lose rows that are not the rolled-back instant's own.

Rolling back instant ``T`` deletes ``T``'s files. Each file group whose
newest slice ``T`` started falls back to the slice before it, and log files
that later writes put on slices ``T`` started lose the base instant that
makes them visible. So a rollback of a completed instant is refused when:

- a savepoint holds ``T``: its own instant, or files of ``T`` that it lists
  (Hudi's ``BaseRollbackActionExecutor.validateSavepointRollbacks`` refuses
  the first; the second would break the savepoint's restore);
- later writes put log files on the slices ``T`` started;
- a slice a file group falls back to is not whole: a clean deleted it (as
  with a compaction whose replaced slices were cleaned);
- a later completed compaction folded ``T``'s logs into its base files (or
  carried them onto its slices): deleting ``T``'s log files would take back
  nothing a reader sees, while the rollback would report ``T`` gone.

``force`` never overrides these. A restore checks the state it returns to as
a whole before it starts, so its rollbacks skip the checks of each step.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from laketide.table.errors import Refused
from laketide.table.format.commit import NULL_COMMIT, CommitMetadata
from laketide.table.format.files import BaseFile, instant_of_file, parse_data_file
from laketide.table.format.logfile import CorruptLog, first_block_instant
from laketide.table.format.savepoint import savepoints
from laketide.table.format.slice_history import replay
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileSystemView
from laketide.table.storage.io import FileIO


class RollbackRefused(Refused, RuntimeError):
    """This rollback is not allowed: it needs ``force``, or it would lose rows (then nothing overrides it)."""


class NeedsForce(RollbackRefused):
    """The instant is completed and not the newest: only a forced rollback may take it."""


class DataLossRefused(RollbackRefused):
    """Rolling back would leave rows unreadable that are not the instant's own."""


def _listed(names: Iterable[str], limit: int = 5) -> str:
    names = sorted(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def refuse_loss(io: FileIO, view: FileSystemView, target: str, files: set[str]) -> None:
    """Raise ``DataLossRefused`` when rolling back the completed write ``target`` (deleting ``files``) loses rows."""
    timeline = view.timeline
    _savepoint_holds(timeline, target, files)
    _folded_by_compaction(timeline, target)
    _dependent_logs(io, view, target, files)
    _fallback_slices(view, target, timeline.commit_metadata(timeline.find(target)[0]))


def _savepoint_holds(timeline: Timeline, target: str, files: set[str]) -> None:
    for sp in savepoints(timeline):
        if sp.instant == target or files & set(sp.files):
            raise DataLossRefused(
                f"savepoint {sp.instant} holds {target}: rolling it back would break the savepoint. "
                f"Delete the savepoint first (laketide savepoint delete TABLE {sp.instant}) if you mean to roll "
                f"{target} back"
            )


def _folded_by_compaction(timeline: Timeline, target: str) -> None:
    written = timeline.commit_metadata(timeline.find(target)[0])
    if written.is_compaction:
        return
    groups = written.file_ids()
    for later in timeline.completed_writes():
        if later.timestamp <= target:
            continue
        metadata = timeline.commit_metadata(later)
        folded = groups & metadata.file_ids() if metadata.is_compaction else set()
        if folded:
            partition, file_id = sorted(folded)[0]
            raise DataLossRefused(
                f"compaction {later.timestamp} folded {target} into its base files ({len(folded)} file groups, "
                f"e.g. {file_id} in "
                f"'{partition}'): rolling {target} back would delete its log files but not its rows, which "
                "readers see in the "
                f"compacted files. Restore a savepoint from before {target} instead (laketide savepoint list "
                "TABLE, then laketide restore)"
            )


def _dependent_logs(io: FileIO, view: FileSystemView, target: str, files: set[str]) -> None:
    if view.timeline.config.version >= 8:
        writers = _writers_on_slices_of(view, target)
    else:
        writers = _writers_of_logs_named(io, view, target, files)
    visible = sorted(w for w in writers if w is not None and view.timeline.is_completed_write(w))
    if visible:
        raise DataLossRefused(
            f"{_listed(visible)} wrote log files on the file slices {target} started; rolling back {target} "
            "alone would hide "
            f"their rows. Roll those back first, newest first, or restore a savepoint (laketide savepoint list TABLE)"
        )


def _fallback_slices(view: FileSystemView, target: str, metadata: CommitMetadata) -> None:
    """Every file group whose newest slice ``target`` started must fall back to a whole slice."""
    timeline = view.timeline
    on_storage = {f.path for group in view.groups.values() for f in [*group.base_files, *group.log_files]}
    before = replay(timeline, target, inclusive=False)
    for partition, stats in metadata.partition_to_write_stats.items():
        for stat in stats:
            written = (
                parse_data_file(posixpath.dirname(stat.path), posixpath.basename(stat.path)) if stat.path else None
            )
            key = (partition, stat.file_id)
            group = view.groups.get(key)
            if not isinstance(written, BaseFile) or group is None or stat.prev_commit in (NULL_COMMIT, "", None):
                continue
            if any(b.instant_time > target and timeline.is_completed_write(b.instant_time) for b in group.base_files):
                continue  # a later write started a newer slice: this group does not fall back
            prior = before.slices.get(key)
            if prior is not None:
                missing = sorted(prior.files - on_storage)
            else:  # the slice's writes were archived: the listing is all there is
                present = any(
                    instant_of_file(f.name) == stat.prev_commit for f in [*group.base_files, *group.log_files]
                )
                missing = [] if present else [f"the slice of {stat.prev_commit}"]
            if missing:
                raise DataLossRefused(
                    f"rolling back {target} would return file group {stat.file_id} in '{partition}' to its "
                    f"slice of {stat.prev_commit}, "
                    f"whose files are gone ({_listed(missing)}; a clean deleted them), so the rows {target} "
                    "rewrote there would be lost. "
                    "Restore a savepoint instead (laketide savepoint list TABLE)"
                )


def _writers_on_slices_of(view: FileSystemView, target: str) -> set[str | None]:
    """Version 8: the later deltacommits whose log files (each named by its deltacommit) lie in the file groups where
    ``target`` wrote a base file, so on the slices it started."""
    return {
        lf.base_instant
        for group in view.groups.values()
        if any(b.instant_time == target for b in group.base_files)
        for lf in group.log_files
        if lf.base_instant > target
    }


def _writers_of_logs_named(io: FileIO, view: FileSystemView, target: str, files: set[str]) -> set[str | None]:
    """Version 6: the instants that began the log files named by ``target`` (each names its slice's base instant),
    other than ``target``'s own ``files``."""
    writers: set[str | None] = set()
    for group in view.groups.values():
        for lf in group.log_files:
            if lf.base_instant != target or lf.path in files:
                continue
            try:
                with io.open_input(lf.path) as f:
                    writers.add(first_block_instant(f))
            except (CorruptLog, FileNotFoundError):
                continue
    return writers

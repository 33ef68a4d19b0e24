"""Keeping the state index in step with writes it did not make.

The index learns keys from laketide's own micro-batches. Another writer on
the same table (a Hudi Spark job, clustering, a backfill) changes file
groups behind its back: it may insert keys into a group the index covers,
so an update of such a key would be taken for a new key and duplicated; or
replace groups (clustering), so keys the index routes to them now live in
other groups.

Each commit that keeps the index records the other writers' commits on the
active timeline it accounted for (``INDEX_SEEN_KEY``). The next micro-batch
finds the writes not accounted for, from the timeline alone, and uncovers
the file groups they touched or replaced: their keys are probed through bloom
filters again, and a group is indexed whole the next time laketide writes
it. Archival removes the oldest instants first, so every write newer than
the last index-keeping commit is still on the active timeline. When no
index-keeping commit is left on it (laketide was stopped while other writers
went on past the archival limit), what changed cannot be told, and every
group is uncovered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from laketide.index.state import FileGroupId
from laketide.table.format.commit import INDEX_SEEN_KEY
from laketide.table.format.timeline import Timeline


@dataclass(frozen=True)
class ForeignWrites:
    seen: tuple[str, ...]  # other writers' completed writes on the active timeline, accounted for from now on
    touched: frozenset[FileGroupId]  # groups the ones not accounted for before wrote or replaced
    everything: bool = False  # what changed cannot be told: every group is uncovered

    def commit_metadata(self) -> dict[str, str]:
        """What the next index-keeping commit records."""
        return {INDEX_SEEN_KEY: json.dumps(list(self.seen))}


def foreign_writes(timeline: Timeline) -> ForeignWrites:
    """The writes on ``timeline`` that the state index does not account for yet."""
    # a compaction folds a slice into a new base file of the same group: no key changes group
    writes = [w for w in timeline.completed_writes() if not timeline.commit_metadata(w).compacted]
    extra = {w.timestamp: timeline.commit_metadata(w).extra_metadata for w in writes}
    others = [w for w in writes if INDEX_SEEN_KEY not in extra[w.timestamp]]
    seen_now = tuple(w.timestamp for w in others)
    kept = [w for w in writes if INDEX_SEEN_KEY in extra[w.timestamp]]
    if not kept:
        return ForeignWrites(seen_now, frozenset(), everything=bool(others))
    seen = set(json.loads(extra[kept[-1].timestamp][INDEX_SEEN_KEY]))
    touched: set[FileGroupId] = set()
    for write in others:
        if write.timestamp in seen:
            continue
        metadata = timeline.commit_metadata(write)
        touched |= {(s.partition_path or "", s.file_id) for s in metadata.write_stats()}
        touched |= metadata.replaced_file_ids()
    return ForeignWrites(seen_now, frozenset(touched))

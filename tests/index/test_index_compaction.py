"""Index compaction runs with the table services: the micro-batch that crosses ``write.index_compaction_deltas``
does not wait for a shard's base to be written again, and the runs a fold replaced are deleted only while
no micro-batch may be reading them."""

from __future__ import annotations

import threading

from opslib import OpsTable
from readback import hudi_read, rows
from streaming import DATA_COLUMNS, row
from writes import NEW_ORDERS, orders

import laketide
from laketide.coordinator.index_compaction import IndexCompaction
from laketide.index import state
from laketide.index.state import StateIndex
from laketide.table import Table

SETTINGS = {"write": {"index_shards": 2, "parallelism": 2}}


def _runs(io, shards: int) -> dict[int, list[str]]:
    return {s: sorted(e.name for e in io.list_dir(StateIndex.shard_dir(s))) for s in range(shards)}


def _write_batches(t: OpsTable, batches: int, settings: dict) -> str:
    path = str(t.path)
    for n in range(batches):
        lines = [row(i, n + 1) for i in range(n * 20, n * 20 + 40)]  # half updates of the batch before, half inserts
        laketide.write(path, orders(lines), table_type="MERGE_ON_READ", settings=settings, **NEW_ORDERS)
        t.model.apply(lines)
    return path


def test_writes_keep_each_shard_within_the_limit_and_every_key_found(tmp_path):
    t = OpsTable(tmp_path, {"table.type": "MERGE_ON_READ"})
    path = _write_batches(t, 6, {"write": {**SETTINGS["write"], "index_compaction_deltas": 2}})
    table = Table.open(path)
    runs = _runs(table.io, 2)
    assert all(any(name.startswith("base_") for name in names) and len(names) <= 3 for names in runs.values()), runs
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()
    # every key is found again through the folded index: updating them all inserts nothing
    again = [row(i, 9) for i in range(140)]
    report = laketide.write(path, orders(again), settings=SETTINGS)
    t.model.apply(again)
    assert (report.inserts, report.updates) == (0, 140)
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()


def test_a_new_tables_shards_get_a_base_at_once_whatever_the_limit(tmp_path):
    """A process meeting a shard for the first time maps one sorted base rather than sorting every delta."""
    t = OpsTable(tmp_path, {"table.type": "MERGE_ON_READ"})
    path = _write_batches(t, 2, {"write": {**SETTINGS["write"], "index_compaction_deltas": 100}})
    runs = _runs(Table.open(path).io, 2)
    assert all(names[0].startswith("base_") and len(names) <= 2 for names in runs.values()), runs
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()


def test_a_fold_writes_its_level_at_once_and_deletes_the_folded_runs_only_between_micro_batches(tmp_path):
    t = OpsTable(tmp_path, {"table.type": "MERGE_ON_READ"})
    path = _write_batches(t, 4, {"write": {**SETTINGS["write"], "index_compaction_deltas": 100}})
    table = Table.open(path)
    index = StateIndex.open(table.io, 2)
    before = _runs(table.io, 2)
    assert all(len(names) >= 4 for names in before.values()), before

    batch_lock = threading.RLock()
    service = IndexCompaction(table, index, limit=2, batch_lock=batch_lock)
    with batch_lock:  # a micro-batch is being written
        folding = threading.Thread(target=service.run)
        folding.start()
        folding.join(timeout=10)
        assert folding.is_alive(), "the fold waits for the micro-batch before deleting what it replaced"
        during = _runs(table.io, 2)
        for shard, names in during.items():
            assert set(before[shard]) < set(names) and any(
                n.startswith("level_") and n not in before[shard] for n in names
            )
        # a snapshot taken now reads the base and the new level, the deltas they fold no more
        snapshot = index.snapshot({i.timestamp for i in table.timeline.completed_writes()})
        assert all(len(runs) == 2 and "/base_" in runs[0] and "/level_" in runs[1] for runs in snapshot.runs.values())
    folding.join(timeout=30)
    assert not folding.is_alive()
    after = _runs(table.io, 2)
    for shard, names in after.items():
        assert [n for n in names if n.startswith("base_")] == [n for n in before[shard] if n.startswith("base_")], (
            "the base is not rewritten"
        )
        assert len(names) == 2 and names[1].startswith("level_"), after
    # the job writes on from the folded index
    lines = [row(i, 7) for i in range(100)]
    report = laketide.write(path, orders(lines), settings=SETTINGS)
    t.model.apply(lines)
    assert (report.inserts, report.updates) == (0, 100)
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()


def test_levels_take_the_deltas_until_they_hold_an_eighth_of_the_base_then_a_new_base_takes_all(tmp_path, monkeypatch):
    """A long job's folds rewrite about what was added since the base, not the whole shard every few
    micro-batches; interrupted folds leave only runs the cleaner knows to be obsolete; every key is found."""
    monkeypatch.setattr(state, "FOLD_DELTA_BYTES", 1)  # the base's eighth decides
    t = OpsTable(tmp_path, {"table.type": "MERGE_ON_READ"})
    settings = {"write": {**SETTINGS["write"], "index_compaction_deltas": 2}}
    path = _write_batches(t, 1, settings)
    lines = [row(i, 2) for i in range(40_000)]  # a base of about 20,000 entries a shard, 320 KB
    laketide.write(path, orders(lines), table_type="MERGE_ON_READ", settings=settings, **NEW_ORDERS)
    t.model.apply(lines)
    io = Table.open(path).io
    first_bases = {s: [n for n in names if n.startswith("base_")] for s, names in _runs(io, 2).items()}
    seen_levels, n = set(), 3
    # 400 new keys a batch, 200 a shard: a level reaches an eighth of the base after about a dozen batches
    while all(
        names == first_bases[s]
        for s, names in {s: [m for m in ns if m.startswith("base_")] for s, ns in _runs(io, 2).items()}.items()
    ):
        lines = [row(i, n) for i in range(40_000 + 400 * n, 40_400 + 400 * n)]
        laketide.write(path, orders(lines), settings=settings)
        t.model.apply(lines)
        runs = _runs(io, 2)
        seen_levels |= {m for names in runs.values() for m in names if m.startswith("level_")}
        assert all(len(names) <= 4 for names in runs.values()), runs
        n += 1
        assert n < 40, "a new base comes once the levels hold an eighth of the first"
    assert len(seen_levels) >= 6, "the deltas went into levels meanwhile"
    assert not StateIndex.open(io, 2).obsolete_runs(), "the folds deleted what they replaced"
    # a fold interrupted before its deletes: the level and the deltas it folded are obsolete, not read twice
    index = StateIndex.open(io, 2)
    for start in (90_000, 90_100):
        lines = [row(i, 50) for i in range(start, start + 100)]
        laketide.write(path, orders(lines), settings={"write": {**SETTINGS["write"], "index_compaction_deltas": 100}})
        t.model.apply(lines)
    table = Table.open(path)
    snapshot = index.snapshot({i.timestamp for i in table.timeline.completed_writes()})
    fold = index.fold_level(snapshot, 0)
    assert fold is not None and set(index.obsolete_runs()) == set(fold.replaced)
    again = [row(i, 60) for i in range(0, 90_300, 7)]
    new = len([line for line in again if line["id"] not in t.model.rows])
    report = laketide.write(path, orders(again), settings=SETTINGS)
    t.model.apply(again)
    assert report.inserts == new, "only keys never written are new"
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()


def test_deltas_as_large_as_a_bulk_loads_are_folded_whatever_the_limit(tmp_path, monkeypatch):
    """A load in a few large micro-batches leaves deltas of millions of entries over its first base, which every
    process loading a shard would sort into one run: they are folded once they hold an eighth of the base
    and ``FOLD_DELTA_BYTES`` (lowered here from its million entries)."""
    monkeypatch.setattr(state, "FOLD_DELTA_BYTES", 16 * 1024)
    t = OpsTable(tmp_path, {"table.type": "MERGE_ON_READ"})
    settings = {"write": {**SETTINGS["write"], "index_compaction_deltas": 100}}
    path = _write_batches(t, 1, settings)  # a new table's shards get a base at once
    lines = [row(i, 2) for i in range(6000)]  # 3,000 entries a shard, about 48 KB
    laketide.write(path, orders(lines), table_type="MERGE_ON_READ", settings=settings, **NEW_ORDERS)
    t.model.apply(lines)
    runs = _runs(Table.open(path).io, 2)
    assert all(len(names) == 1 and names[0].startswith("base_") for names in runs.values()), runs
    lines = [row(i, 3) for i in range(6000, 6020)]  # a small batch's deltas stay until the limit
    report = laketide.write(path, orders(lines), settings=settings)
    t.model.apply(lines)
    assert report.inserts == 20
    runs = _runs(Table.open(path).io, 2)
    assert all(len(names) == 2 for names in runs.values()), runs
    assert rows(hudi_read(path), "id", DATA_COLUMNS) == t.model.expected()

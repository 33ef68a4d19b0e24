from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from laketide.index.assigner import (
    AssignPlan,
    BucketAssigner,
    SmallFileGroup,
    UncoveredGroup,
    new_file_id,
)
from laketide.index.columns import ARRIVAL, FILE_ID, PARTITION
from laketide.index.dedupe import dedupe
from laketide.index.hashing import index_keys
from laketide.index.shard_run import ShardRun
from laketide.table import FileIO
from laketide.table.format.schema import (
    IS_DELETED,
    RECORD_KEY,
    avro_schema_json,
    with_meta_schema,
)
from laketide.writer.files.bucket_writer import BucketWriter, FileGroupTarget
from laketide.writer.files.settings import FileSettings, TaskFiles


def batch(keys, ts, partition="p", deleted=None):
    n = len(keys)
    return pa.table(
        {
            "ts": pa.array(ts, pa.int64()),
            RECORD_KEY: pa.array(keys, pa.string()),
            PARTITION: pa.array([partition] * n, pa.string()),
            ARRIVAL: pa.array(np.arange(n), pa.int64()),
            IS_DELETED: pa.array(deleted or [False] * n),
        }
    )


def assigner(plan, run=None, shard=0, io=None):
    def read_keys(path):
        with io.open_input(path) as f:
            return pq.read_table(f, columns=[RECORD_KEY])[RECORD_KEY].combine_chunks()

    def read_footer(path):
        with io.open_input(path) as f:
            return pq.read_metadata(f).metadata

    return BucketAssigner(shard, plan, run or ShardRun(), read_keys, read_footer)


def test_dedupe_keeps_highest_ordering_then_latest_arrival():
    rows = batch(["a", "a", "b", "b", "c"], [5, 3, 1, 1, 2])
    rows, hashes = dedupe(rows, index_keys(rows[PARTITION], rows[RECORD_KEY]), "ts")
    assert list(hashes) == list(index_keys(rows[PARTITION], rows[RECORD_KEY]))
    assert sorted(zip(rows[RECORD_KEY].to_pylist(), rows["ts"].to_pylist(), rows[ARRIVAL].to_pylist())) == [
        ("a", 5, 0),
        ("b", 1, 3),
        ("c", 2, 4),
    ]


def test_dedupe_tells_apart_keys_that_share_a_hash():
    rows = batch(["a", "b", "a", "c"], [1, 2, 3, 4])
    kept, hashes = dedupe(rows, np.array([7, 7, 7, 9], np.uint64), "ts")
    assert sorted(zip(kept[RECORD_KEY].to_pylist(), kept["ts"].to_pylist())) == [("a", 3), ("b", 2), ("c", 4)]
    assert sorted(hashes.tolist()) == [7, 7, 9]


def test_inserts_fill_the_small_groups_then_new_ones():
    plan = AssignPlan("20260101000000001", shards=1, ordering_field="ts", new_group_records=3)
    plan.small_groups["p"] = [SmallFileGroup("p", "small-0", 2)]
    assigned, entries = assigner(plan).assign(batch([f"k{i}" for i in range(7)], [1] * 7))
    groups = assigned[FILE_ID].to_pylist()
    assert groups.count("small-0") == 2
    new = [g for g in set(groups) if g != "small-0"]
    assert sorted(groups.count(g) for g in new) == [2, 3]
    assert entries.num_rows == 7


def test_every_shard_fills_the_same_groups_with_its_share_of_their_room():
    """A partition's inserts go to the same few groups whatever shard their keys hash to, each shard
    taking its part of a group's room, so the groups reach their size and no more."""
    plan = AssignPlan("20260101000000005", shards=3, ordering_field="ts", new_group_records=9)
    plan.small_groups["p"] = [SmallFileGroup("p", "small-0", 7)]
    routed = []
    for shard in range(3):
        assigned, _ = assigner(plan, shard=shard).assign(batch([f"s{shard}-k{i}" for i in range(6)], [1] * 6))
        routed += assigned[FILE_ID].to_pylist()
    assert routed.count("small-0") == 7  # shares 3, 2 and 2
    new = sorted({g for g in routed if g != "small-0"})
    assert new == sorted({new_file_id(plan, "p", 0), new_file_id(plan, "p", 1)})
    assert routed.count(new_file_id(plan, "p", 0)) == 9  # each shard's share of a new group: 3
    assert routed.count(new_file_id(plan, "p", 1)) == 18 - 7 - 9


def test_inserts_go_to_the_small_group_whose_key_range_they_extend():
    """Keys route by where the small groups' keys begin, so groups keep holding key ranges: new keys
    above every range extend the last group until it is full, then open a new group, and the group
    with no known range is filled only after the ranged ones."""
    plan = AssignPlan("20260101000000006", shards=1, ordering_field="ts", new_group_records=10)
    plan.small_groups["p"] = [
        SmallFileGroup("p", "from-m", 2, "m"),
        SmallFileGroup("p", "from-c", 5, "c"),
        SmallFileGroup("p", "unranged", 1),
    ]
    assigned, _ = assigner(plan).assign(batch(["a", "d", "e", "n", "x", "y", "z"], [1] * 7))
    routed = dict(zip(assigned[RECORD_KEY].to_pylist(), assigned[FILE_ID].to_pylist()))
    assert [routed[k] for k in "ade"] == ["from-c"] * 3  # "a" is below every range: the lowest group takes it
    assert [routed[k] for k in "nx"] == ["from-m"] * 2
    assert routed["y"] == "unranged"
    assert routed["z"] == new_file_id(plan, "p", 0)


def test_a_new_group_goes_to_one_write_slot_whatever_shard_filled_it():
    from laketide.writer.stages import record_write_slots

    plan = SimpleNamespace(write_slots={"old-0": 1}, write_tasks=4)
    ids = pa.array(["old-0", "new-a", "new-b", "new-a"])
    slots = record_write_slots(plan, ids).to_pylist()
    assert slots[0] == 1 and slots[1] == slots[3]
    assert slots == record_write_slots(plan, ids).to_pylist()


def test_an_assign_task_whose_rows_all_went_to_quarantine_hands_the_write_stage_nothing():
    """On Spark's tasks, a shard's part may hold only bad rows; without them nothing is routed or read."""
    from laketide.index.columns import KEY_HASH, SHARD
    from laketide.writer.stages import assign

    none = (
        batch([], []).append_column(SHARD, pa.array([], pa.int32())).append_column(KEY_HASH, pa.array([], pa.uint64()))
    )
    assert assign(SimpleNamespace(assign=SimpleNamespace(ordering_field="ts")), none, none.schema) == []


def test_known_keys_follow_the_index_and_unknown_deletes_are_dropped():
    plan = AssignPlan("20260101000000002", shards=1, ordering_field="ts", new_group_records=100)
    hashes = index_keys(pa.array(["p"]), pa.array(["old"]))
    run = ShardRun(hashes.astype(np.uint64), np.array([0], np.int32), [("p", "fg-old")])
    assigned, entries = assigner(plan, run).assign(
        batch(["old", "new", "ghost"], [1, 1, 1], deleted=[False, False, True])
    )
    routed = dict(zip(assigned[RECORD_KEY].to_pylist(), assigned[FILE_ID].to_pylist()))
    assert routed["old"] == "fg-old" and "ghost" not in routed
    assert entries["file_id"].to_pylist() == [routed["new"]]


def test_uncovered_group_found_through_its_bloom_filter(tmp_path):
    io = FileIO.for_uri(str(tmp_path))
    schema = pa.schema([("id", pa.string())])
    rows = pa.table({"id": ["x1", "x2", "x3"], RECORD_KEY: ["x1", "x2", "x3"]})
    settings = FileSettings(schema, avro_schema_json(with_meta_schema(schema), "t"))
    stat = BucketWriter(io, FileGroupTarget("p", "foreign"), settings, TaskFiles("20250101000000000", 0)).write(rows)
    plan = AssignPlan("20260101000000003", shards=1, ordering_field="ts", new_group_records=100)
    plan.uncovered["p"] = [UncoveredGroup("p", "foreign", stat.path)]
    assigned, entries = assigner(plan, io=io).assign(batch(["x2", "y9"], [1, 1]))
    routed = dict(zip(assigned[RECORD_KEY].to_pylist(), assigned[FILE_ID].to_pylist()))
    assert routed["x2"] == "foreign" and routed["y9"] != "foreign"
    assert entries.num_rows == 2


def test_new_file_ids_are_deterministic():
    plan = AssignPlan("20260101000000004", shards=4, ordering_field=None, new_group_records=1)
    assert new_file_id(plan, "p", 0) == new_file_id(plan, "p", 0)
    assert new_file_id(plan, "p", 0) != new_file_id(plan, "p", 1) != new_file_id(plan, "q", 1)

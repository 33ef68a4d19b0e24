"""The columns laketide adds to a record on its way from source to commit, and the schemas it passes through.

1. **Landed**: the source's columns, plus where each row came from, as Spark's file source tells
   (``SOURCE_FILE``, ``SOURCE_MTIME``, ``SOURCE_BLOCK``; a Kafka record's topic-partition and
   ``SOURCE_OFFSET``) and, for JSON and CSV, the text of a row Spark could not parse (``CORRUPT``), or
   a Kafka record's raw form with why it could not become a row (``DECODE_REASON``). Rows from Arrow
   (``laketide.write``) carry none: their order is their arrival.
2. **Prepared** (``PREPARED_FIELDS`` after the record's columns): its key, partition path, index shard,
   arrival order, and for a bad row the reason it goes to quarantine and its raw text.
3. **Assigned** (``assigned_schema``): the record's columns with its key and partition, the file group it
   goes to, whether the table held its key before (an update or a delete, not an insert), and the write
   task of that file group.

A write task then answers one write status per file group it wrote (``writer.stages.WriteStatus``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.format.schema import IS_DELETED, RECORD_KEY

# -- landed
CORRUPT = "_corrupt_record"  # the column Spark's JSON and CSV readers fill with a malformed record's text
SOURCE_FILE = "_lt_source_file"
SOURCE_MTIME = "_lt_source_mtime"
SOURCE_BLOCK = "_lt_source_block"
# a Kafka record's offset; its SOURCE_FILE names its topic-partition, and it has no MTIME or BLOCK
SOURCE_OFFSET = "_lt_source_offset"
SOURCE_COLUMNS = (SOURCE_FILE, SOURCE_MTIME, SOURCE_BLOCK)  # a landing file's
# why a record could not become a row (a Kafka value that does not decode, a change event without its key)
DECODE_REASON = "_lt_decode_reason"
# a change event's: a message that is not a row change says what it is (skipped and counted, not written),
# and a row change names its source table (db.schema.table), which one table must not mix
EVENT_KIND = "_lt_event_kind"
SOURCE_TABLE = "_lt_source_table"
# what a source adds to its rows, beside the record's own columns
LANDED_COLUMNS = (CORRUPT, DECODE_REASON, *SOURCE_COLUMNS, SOURCE_OFFSET, EVENT_KIND, SOURCE_TABLE)
# the column a change event's position in its database's log fills: the table's ordering field by default
EVENT_POSITION = "_event_position"

# -- prepared
PARTITION = "_lt_partition"
SHARD = "_lt_shard"
# the row's index hash (``index.hashing.index_keys``), made once by prepare for the shard and the lookup
KEY_HASH = "_lt_key_hash"
# arrival order of a row within its micro-batch: its landing file (and block), then its line
ARRIVAL_FILE = "_lt_arrival_file"
ARRIVAL = "_lt_arrival"
REASON = "_lt_reason"  # why a bad row goes to quarantine; null for a good one
RAW = "_lt_raw"  # a bad row's text, as it came
SOURCE = "_lt_source"  # where a bad row came from (its landing file, or topic/partition@offset); null for a good one

PREPARED_FIELDS = [
    pa.field(RECORD_KEY, pa.string()),
    pa.field(PARTITION, pa.string()),
    pa.field(SHARD, pa.int32()),
    pa.field(KEY_HASH, pa.uint64()),
    pa.field(ARRIVAL_FILE, pa.string()),
    pa.field(ARRIVAL, pa.int64()),
    pa.field(REASON, pa.string()),
    pa.field(RAW, pa.string()),
    pa.field(SOURCE, pa.string()),
]
QUARANTINE_FIELDS = [REASON, RAW, SOURCE]  # what a good row leaves behind

# -- assigned
FILE_ID = "_lt_file_id"
EXISTED = "_lt_existed"  # the table held the key before this micro-batch
WRITE_SLOT = "_lt_write_slot"  # the write task of the record's file group (``writer.slots``)
# a row's position among the rows the assign stage was handed: it routes narrow columns, and the write
# stage's rows are taken whole by it (``writer.stages.routed_rows``)
ROW = "_lt_row"


def as_mask(flags: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean column as a numpy mask, null as false. Without nulls, no ``fill_null``: its call was a
    tenth of a millisecond, per file group of each micro-batch."""
    return (pc.fill_null(flags, False) if flags.null_count else flags).to_numpy(zero_copy_only=False)


def flag_mask(rows: pa.Table, name: str) -> np.ndarray:
    """Column ``name`` of ``rows`` as a mask (``as_mask``); all false where ``rows`` lack it."""
    return as_mask(rows[name]) if name in rows.column_names else np.zeros(rows.num_rows, bool)


def assigned_schema(records: pa.Schema, global_keys: bool) -> pa.Schema:
    """What the assign stage hands the write stage: the records' columns, then where each goes. Under a
    global index a record that moved partition leaves a delete of its old copy, hence ``IS_DELETED``."""
    routing = [
        (RECORD_KEY, pa.string()),
        (PARTITION, pa.string()),
        (FILE_ID, pa.string()),
        (EXISTED, pa.bool_()),
        (WRITE_SLOT, pa.int32()),
    ]
    if global_keys and IS_DELETED not in records.names:
        routing.append((IS_DELETED, pa.bool_()))
    return pa.schema(list(records) + [pa.field(name, dtype) for name, dtype in routing])

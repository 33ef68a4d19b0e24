"""A deterministic change-record generator as a Spark Python streaming data source.

Row ``i`` of the stream is an insert of key ``i``, an update or a delete of an
earlier key, or an in-batch duplicate of the previous row's key carrying an
older ordering value (so the earlier row must win). The same offsets always
give the same rows, which replays rely on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

NAME = "laketide_generator"
SCHEMA_DDL = "id BIGINT, name STRING, amount DOUBLE, ts BIGINT, region STRING, _hoodie_is_deleted BOOLEAN"
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("ts", pa.int64()),
        ("region", pa.string()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)
SPLIT_ROWS = 50_000
FIRST_ROW = 0  # the offset a new query starts from


@dataclass(frozen=True)
class GeneratorSpec:
    rows_per_batch: int = 10_000
    batches: int = 5
    update_fraction: float = 0.5
    delete_fraction: float = 0.02
    duplicate_fraction: float = 0.01
    partitions: int = 4
    seed: int = 42
    # keys are taken modulo key_space when it is set: a table of steady size under endless changes
    key_space: int = 0

    @classmethod
    def from_options(cls, options: dict) -> GeneratorSpec:
        kinds = {f: type(getattr(cls(), f)) for f in cls.__dataclass_fields__}
        return cls(**{k: kinds[k](v) for k, v in options.items() if k in kinds})

    @property
    def total_rows(self) -> int:
        return self.rows_per_batch * self.batches


def generate(spec: GeneratorSpec, start: int, end: int) -> pa.RecordBatch:
    """Rows ``[start, end)`` of the stream."""
    rng = np.random.default_rng([spec.seed, start])
    i = np.arange(start, end, dtype=np.int64)
    u = rng.random(len(i))
    earlier = (rng.random(len(i)) * np.maximum(i, 1)).astype(np.int64)
    dup = u < spec.duplicate_fraction
    delete = (~dup) & (u < spec.duplicate_fraction + spec.delete_fraction)
    update = (~dup) & (~delete) & (u < spec.duplicate_fraction + spec.delete_fraction + spec.update_fraction)
    keys = np.where(update | delete, earlier, i)
    ts = i.copy()
    if len(i) > 1:
        prev = np.roll(keys, 1)
        dup[0] = False
        keys = np.where(dup, prev, keys)
        ts = np.where(dup, i - 2, ts)
    if spec.key_space:
        keys = keys % spec.key_space
    regions = np.char.add("region-", (keys % spec.partitions).astype(str))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys),
            pa.array(np.char.add("name-", ts.astype(str))),
            pa.array(np.round(keys * 0.5 + ts * 0.01, 2)),
            pa.array(ts),
            pa.array(regions),
            pa.array(delete),
        ],
        schema=ARROW_SCHEMA,
    )


@dataclass
class _Split(InputPartition):
    start: int
    end: int


def splits(start: int, end: int) -> list[_Split]:
    """The stream's rows ``[start, end)`` as the reader splits them: each split's rows are drawn from its own start."""
    return [_Split(s, min(end, s + SPLIT_ROWS)) for s in range(start, end, SPLIT_ROWS)]


def generated(spec: GeneratorSpec, start: int, end: int) -> pa.Table:
    """Rows ``[start, end)`` as a micro-batch of the query reads them: the same rows, without a Spark job."""
    return pa.Table.from_batches(
        [generate(spec, split.start, split.end) for split in splits(start, end)], schema=ARROW_SCHEMA
    )


class GeneratorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, spec: GeneratorSpec):
        self.spec = spec

    def prepareForTriggerAvailableNow(self) -> None:
        # The stream is finite: its end is the target, reached rows_per_batch at a time.
        pass

    def initialOffset(self) -> dict:
        return {"row": FIRST_ROW}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.spec.rows_per_batch)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if isinstance(limit, ReadAllAvailable):
            return {"row": self.spec.total_rows}
        step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.spec.rows_per_batch
        return {"row": min(self.spec.total_rows, start["row"] + step)}

    def reportLatestOffset(self) -> dict:
        return {"row": self.spec.total_rows}

    def partitions(self, start: dict, end: dict) -> list[_Split]:
        return splits(start["row"], end["row"])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Split), "Spark hands back the splits partitions() made"
        yield generate(self.spec, partition.start, partition.end)

    def commit(self, end: dict) -> None:
        pass


class GeneratorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema) -> GeneratorStreamReader:
        return GeneratorStreamReader(GeneratorSpec.from_options(dict(self.options)))

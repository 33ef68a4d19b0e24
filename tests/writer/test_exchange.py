"""The files Spark's tasks hand a micro-batch's rows on through (``writer.exchange``), on a local disk and on S3
(moto's server)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from laketide.table.storage.io import FileIO
from laketide.writer import exchange as exchange_module
from laketide.writer.exchange import Exchange, Handoff


def _rows(n: int, first: int = 0) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(first, first + n), pa.int64()), "name": [f"n{i}" for i in range(first, first + n)]}
    )


def _round_trip(root: str, options: dict[str, str]) -> None:
    exchange = Exchange.for_batch(root, 7, options)
    assert exchange.root.startswith(root.rstrip("/") + "/batch-7-"), (
        "each micro-batch, and each replay of it, has a folder of its own"
    )
    a = exchange.put("a.arrow", [(0, _rows(5)), (2, _rows(300, 100)), (0, _rows(3, 1000))])
    b = exchange.put("b.arrow", [(2, _rows(4, 2000)), (1, _rows(0))])
    assert a.dests == (0, 2, 2, 2, 0), "a destination's rows in batches of BATCH_ROWS at most"
    assert b == Handoff("b.arrow", (2,)), "an empty part writes no batch"
    assert exchange.put("c.arrow", [(0, _rows(0))]) is None and not FileIO.for_uri(exchange.root, options).exists(
        "c.arrow"
    )
    assert exchange.take([a, b], 0)["id"].to_pylist() == [0, 1, 2, 3, 4, 1000, 1001, 1002]
    assert exchange.take([a, b], 2)["id"].to_pylist() == [*range(100, 400), *range(2000, 2004)]
    assert exchange.take([a, b], 1) is None and exchange.take([], 0) is None
    assert Handoff.from_row(a.to_row()) == a
    exchange.delete()
    assert not FileIO.for_uri(exchange.root, options).exists("a.arrow")
    exchange.delete()  # again: a folder already gone is fine


def test_rows_handed_on_through_a_local_folder_reach_only_their_destination(tmp_path, monkeypatch):
    monkeypatch.setattr(exchange_module, "BATCH_ROWS", 128)
    _round_trip(str(tmp_path / "exchange"), {})


def test_rows_handed_on_through_s3_reach_only_their_destination(s3, monkeypatch):
    monkeypatch.setattr(exchange_module, "BATCH_ROWS", 128)
    _round_trip("s3://lake/exchange", s3)


def test_a_file_a_task_attempt_left_half_written_is_never_read(tmp_path):
    exchange = Exchange(str(tmp_path), {})
    done = exchange.put("prepare-1-0-8.arrow", [(0, _rows(3))])
    (tmp_path / "prepare-1-0-5.arrow").write_bytes(b"ARROW1 a failed attempt's bytes")
    assert exchange.take([done], 0).num_rows == 3
    with pytest.raises(pa.ArrowInvalid):
        exchange.take([Handoff("prepare-1-0-5.arrow", (0,))], 0)

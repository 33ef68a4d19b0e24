"""laketide's reader against hudi-rs on tables Apache Hudi 1.x wrote (table versions 8 and 9, timeline layout 2):
the snapshot and a read as of every completed write are the same rows; a version 9 table is refused for writing,
naming what it would take."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fixture_tables import HUDI_1X, unzip_fixture
from readback import hudi_read, rows

import laketide
from laketide.table import Table
from laketide.table.errors import LaketideError

TABLES = sorted(p.stem for p in HUDI_1X.glob("v[89]_*.zip"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hudi-1x")
    for name in TABLES:
        unzip_fixture(name, root)
    return root


def _key(table) -> str:
    return "_hoodie_record_key" if "_hoodie_record_key" in table.column_names else "id"


def test_the_corpus_is_every_version_8_table_and_two_of_version_9():
    assert len(TABLES) == 7


@pytest.mark.parametrize("name", TABLES)
def test_a_version_8_snapshot_is_hudi_rss(corpus, name):
    path = corpus / name
    table = Table.open(str(path))
    assert table.config.version == int(name[1])
    ours, theirs = table.snapshot(), hudi_read(path)
    assert ours.column_names == theirs.column_names
    assert rows(ours, _key(ours)) == rows(theirs, _key(theirs))


@pytest.mark.parametrize("name", TABLES)
def test_a_version_8_read_as_of_each_write_is_hudi_rss(corpus, name):
    path = corpus / name
    table = Table.open(str(path))
    for commit in table.timeline.completed_writes():
        ours, theirs = table.snapshot(as_of=commit.timestamp), hudi_read(path, as_of=commit.timestamp)
        assert rows(ours, _key(ours)) == rows(theirs, _key(theirs)), commit.timestamp


@pytest.mark.parametrize("name", TABLES)
def test_an_incremental_read_between_writes_is_hudi_rss(corpus, name):
    """Version 8 and 9 windows compare completion times, each bound given as an instant time, as hudi-rs does."""
    path = corpus / name
    table = Table.open(str(path))
    writes = [i.timestamp for i in table.timeline.completed_writes()]
    for start, end in zip(writes, writes[2:], strict=False):
        ours, theirs = table.incremental(start, end), hudi_read(path, start=start, end=end)
        assert rows(ours, _key(ours)) == rows(theirs, _key(theirs)), (start, end)


@pytest.mark.parametrize("name", [t for t in TABLES if t.startswith("v9_")])
def test_writing_a_version_9_table_is_refused_naming_the_version(corpus, tmp_path, name):
    source = corpus / name
    path = tmp_path / name
    shutil.copytree(source, path)
    rows_in = Table.open(str(path)).snapshot().slice(0, 1)
    data = rows_in.drop_columns([c for c in rows_in.column_names if c.startswith("_hoodie")])
    with pytest.raises(
        LaketideError, match=re.escape("hoodie.table.version = 9; laketide writes table versions 6 and 8")
    ):
        laketide.write(str(path), data, settings={"write": {"parallelism": 2}})

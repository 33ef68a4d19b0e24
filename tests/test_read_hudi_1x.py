"""laketide's reader against hudi-rs on tables Apache Hudi 1.x wrote (table version 8, timeline layout 2):
the snapshot and a read as of every completed write are the same rows."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from conftest import hudi_read, rows

from laketide.table import Table

CORPUS = Path(__file__).parent / "fixtures" / "hudi-1x"
TABLES = sorted(p.stem for p in CORPUS.glob("v8_*.zip"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hudi-1x")
    for name in TABLES:
        with zipfile.ZipFile(CORPUS / f"{name}.zip") as archive:
            archive.extractall(root, [m for m in archive.namelist() if not m.startswith("__MACOSX")])
    return root


def _key(table) -> str:
    return "_hoodie_record_key" if "_hoodie_record_key" in table.column_names else "id"


def test_the_corpus_is_every_version_8_table():
    assert len(TABLES) == 5


@pytest.mark.parametrize("name", TABLES)
def test_a_version_8_snapshot_is_hudi_rss(corpus, name):
    path = corpus / name
    table = Table.open(str(path))
    assert table.config.version == 8
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

"""Hudi's metadata table: a table that has one is refused with the way out, and `laketide metadata drop` is that way."""

from __future__ import annotations

import json
import subprocess

import pyarrow as pa
import pytest
from commands import CLI
from readback import hudi_read, rows
from writes import upsert

from laketide.coordinator import Coordinator, LocalLease
from laketide.table import Table
from laketide.table.format.metadata_table import PARTITIONS, PARTITIONS_INFLIGHT, metadata_partitions
from laketide.table.format.properties import PROPERTIES_FILE, format_properties, parse_properties
from laketide.writer.preflight import JobRefused, check_writable

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("region", pa.string())])


def table_with_metadata_table(path) -> Table:
    """A laketide table on which a Hudi writer then built its metadata table (its properties and directory)."""
    table = Table.create(str(path), "t", ["id"], ["region"], "v")
    lease = LocalLease.for_table(table.uri, job_id="writer")
    lease.acquire()
    upsert(table, Coordinator(table, lease, "w"), 0, [{"id": i, "v": 1, "region": "eu"} for i in range(5)], SCHEMA)
    lease.release()
    props = parse_properties(table.io.read_text(PROPERTIES_FILE))
    props[PARTITIONS], props[PARTITIONS_INFLIGHT] = "column_stats,files", "record_index"
    table.io.write_atomic(PROPERTIES_FILE, format_properties(props).encode(), overwrite=True)
    table.io.write_bytes(".hoodie/metadata/.hoodie/hoodie.properties", b"hoodie.table.name=t_metadata\n")
    table.io.write_bytes(".hoodie/metadata/files/.files-0000-0_00000000000000010.log.1_0-0-0", b"#HUDI#")
    return Table.open(table.uri)


@pytest.mark.parametrize("backup", [False, True])
def test_a_table_with_a_metadata_table_is_refused_until_it_is_dropped(tmp_path, backup):
    table = table_with_metadata_table(tmp_path / "t")
    with pytest.raises(JobRefused) as refused:
        check_writable(table.config, table.uri)
    message = str(refused.value)
    assert "column_stats, files, record_index" in message
    assert "hoodie.metadata.enable=false" in message and f"laketide metadata drop {table.uri}" in message

    args = [CLI, "metadata", "drop", table.uri, "--json"] + (["--backup"] if backup else [])
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["partitions"] == ["column_stats", "files", "record_index"] and data["removed"]

    props = parse_properties(table.io.read_text(PROPERTIES_FILE))
    assert props[PARTITIONS] == "" and props[PARTITIONS_INFLIGHT] == "", (
        "cleared as HoodieTableConfig.clearMetadataPartitions does"
    )
    assert metadata_partitions(props) == []
    assert not table.io.exists(".hoodie/metadata")
    if backup:
        assert data["backup"].startswith(".hoodie/.metadata_") and table.io.exists(
            data["backup"] + "/.hoodie/hoodie.properties"
        )
    reopened = Table.open(table.uri)
    check_writable(reopened.config, reopened.uri)
    assert rows(hudi_read(table.uri), "id", ["id", "v"]) == [{"id": i, "v": 1} for i in range(5)]

    again = subprocess.run([CLI, "metadata", "drop", table.uri], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "has no metadata table" in again.stdout

"""Hudi's metadata table (``.hoodie/metadata``): finding it, and dropping it as Hudi's disable does.

A Hudi 0.14+ writer builds the metadata table on its first write and lists
files through it from then on. laketide does not keep it up to date (its
``files`` partition is a merge-on-read Hudi table of HFile base files and
HFile log blocks, and there is no HFile writer here), so a table that has one
is refused: after laketide's first commit the metadata table would list
stale files, and Hudi writers and readers that trust it would overwrite or
miss laketide's changes.

``drop`` is what Hudi does when the metadata table is disabled
(``HoodieTableMetadataUtil.deleteMetadataTable``): clear
``hoodie.table.metadata.partitions`` and its ``.inflight`` twin in
``hoodie.properties`` first (``HoodieTableConfig.clearMetadataPartitions``),
so nothing uses it any more, then delete the directory or move it aside to
``.hoodie/.metadata_<instant>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from laketide.table.format.properties_file import modify, read_properties
from laketide.table.storage.io import FileIO

METADATA_DIR = ".hoodie/metadata"
PARTITIONS = "hoodie.table.metadata.partitions"
PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"


def metadata_partitions(props: dict[str, str]) -> list[str]:
    """The metadata table's partitions, built or being built, that ``hoodie.properties`` names."""
    found = []
    for key in (PARTITIONS, PARTITIONS_INFLIGHT):
        found += [p for p in props.get(key, "").split(",") if p.strip()]
    return sorted(set(found))


@dataclass
class DropResult:
    partitions: list[str]
    removed: bool
    backup: str | None = None


def drop(io: FileIO, backup_instant: str | None = None) -> DropResult:
    """Disable and delete the metadata table; ``backup_instant`` moves it aside instead of deleting it."""
    partitions = metadata_partitions(read_properties(io))
    if partitions:
        modify(io, lambda props: {**props, PARTITIONS: "", PARTITIONS_INFLIGHT: ""})
    if not io.exists(METADATA_DIR):
        return DropResult(partitions, False)
    if backup_instant is not None:
        target = f".hoodie/.metadata_{backup_instant}"
        io.move(METADATA_DIR, target)
        return DropResult(partitions, True, target)
    io.delete_dir(METADATA_DIR)
    return DropResult(partitions, True)

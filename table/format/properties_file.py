"""``.hoodie/hoodie.properties`` on storage, kept as Apache Hudi keeps it.

Hudi changes the file through a backup (``HoodieTableConfig.modify``): write
``hoodie.properties.backup``, delete the file, write it anew, check it, delete the backup. Readers
fall back to the backup while the file is missing (``HoodieTableConfig.fetchConfigs``), and the next
writer puts the backup back (``recoverIfNeeded``). A table with a timeline but neither file has lost
its config: it is refused, never given a new one made from a job's settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from laketide.table.errors import NotFound
from laketide.table.format.damage import TableDamaged
from laketide.table.format.properties import (
    PROPERTIES_FILE,
    format_properties,
    parse_properties,
    table_checksum,
)
from laketide.table.storage.io import FileIO

log = logging.getLogger(__name__)

BACKUP_FILE = ".hoodie/hoodie.properties.backup"
CHECKSUM = "hoodie.table.checksum"


class TableNotFound(NotFound, FileNotFoundError):
    pass


def _valid(props: dict[str, str]) -> bool:
    """Whole, as far as the file can tell: Hudi's checksum (of ``<database>.<table name>``) matches, where there is
    one."""
    if "hoodie.table.name" not in props:
        return False
    if CHECKSUM not in props:
        return True  # tables of Hudi before 0.11 carry none
    return props[CHECKSUM] == str(table_checksum(props.get("hoodie.database.name", ""), props["hoodie.table.name"]))


def _read(io: FileIO, path: str) -> dict[str, str] | None:
    try:
        props = parse_properties(io.read_text(path))
    except (FileNotFoundError, NotADirectoryError):  # the path is a file, not a table's folder
        return None
    return props if _valid(props) else None


def _is_file(io: FileIO) -> bool:
    return io.is_file("")


def has_timeline(io: FileIO) -> bool:
    """Whether ``.hoodie`` holds instants: a table, whatever became of its config."""
    return any(not e.is_dir and e.name[:1].isdigit() for e in io.list_dir(".hoodie")) if io.exists(".hoodie") else False


def read_properties(io: FileIO) -> dict[str, str]:
    """The table's properties: the file, else its backup (a change cut short). Raises ``TableNotFound``
    where there is no table, and ``TableDamaged`` where a table lost its config."""
    for path in (PROPERTIES_FILE, BACKUP_FILE):
        props = _read(io, path)
        if props is not None:
            return props
    if _is_file(io):
        raise TableNotFound(
            f"no Hudi table at {io.full_path('')}: it is a file, not a table's folder (unpack an archive first)"
        )
    if has_timeline(io) or io.is_file(PROPERTIES_FILE):
        raise TableDamaged(
            io.full_path(PROPERTIES_FILE),
            "it is missing or unreadable, and so is hoodie.properties.backup, while .hoodie holds the table's timeline",
            "Put back the file from a copy of the table (every reader needs it, and laketide will not make up a "
            "new one "
            "from a job's settings); or move the table away to start a new one at this path",
        )
    raise TableNotFound(f"no Hudi table at {io.full_path('')}: {PROPERTIES_FILE} is missing")


def recover(io: FileIO) -> None:
    """A writer's first step: put back the file from its backup if a change was cut short, as Hudi's writers do."""
    if not io.is_file(BACKUP_FILE):
        return
    if _read(io, PROPERTIES_FILE) is None:
        backup = _read(io, BACKUP_FILE)
        if backup is None:
            return  # read_properties refuses the table
        io.write_atomic(PROPERTIES_FILE, format_properties(backup).encode(), overwrite=True)
        log.warning("%s was missing or cut short: recovered it from %s", PROPERTIES_FILE, BACKUP_FILE)
    io.delete(BACKUP_FILE)


def modify(io: FileIO, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
    """Change the properties through a backup, so that a crash at any step leaves them readable."""
    recover(io)
    props = read_properties(io)
    io.write_atomic(BACKUP_FILE, format_properties(props).encode(), overwrite=True)
    io.delete(PROPERTIES_FILE)
    changed = change(dict(props))
    io.write_atomic(PROPERTIES_FILE, format_properties(changed).encode(), overwrite=True)
    if _read(io, PROPERTIES_FILE) != changed:
        io.delete(PROPERTIES_FILE)  # readers go to the backup until the next writer recovers it
        raise TableDamaged(io.full_path(PROPERTIES_FILE), "it did not read back as written", "Run the change again")
    io.delete(BACKUP_FILE)
    return changed

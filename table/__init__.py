"""The Hudi on-disk format: properties, timeline, commit metadata, files, views and readers."""

from laketide.table.commit import CommitMetadata, WriteStat
from laketide.table.errors import ErrorKind, LaketideError, UnsupportedTableError
from laketide.table.instant import Instant, InstantClock, State
from laketide.table.io import FileIO
from laketide.table.properties import TableConfig
from laketide.table.table import Table, TableNotFound
from laketide.table.timeline import Timeline
from laketide.table.view import FileGroup, FileSlice, FileSystemView

__all__ = [
    "CommitMetadata",
    "ErrorKind",
    "FileGroup",
    "FileIO",
    "FileSlice",
    "FileSystemView",
    "Instant",
    "InstantClock",
    "LaketideError",
    "State",
    "Table",
    "TableConfig",
    "TableNotFound",
    "Timeline",
    "UnsupportedTableError",
    "WriteStat",
]

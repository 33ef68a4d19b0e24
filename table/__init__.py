"""A Hudi table (``Table``) and what it is made of, by concern: ``format`` (the on-disk format), ``storage`` (the
storage seam), ``reading``, ``inspect`` (what an operator reads) and ``mirror`` (the Delta log). Each sub-package
imports only those below it (``tests/project/test_layers.py``): storage, then format, then reading and the mirror, then
inspect; the errors, the shared cache and ``Table`` live here."""

from laketide.table.errors import ErrorKind, LaketideError, UnsupportedTableError
from laketide.table.format.commit import CommitMetadata, WriteStat
from laketide.table.format.instant import Instant, InstantClock, State
from laketide.table.format.properties import TableConfig
from laketide.table.format.timeline import Timeline
from laketide.table.format.view import FileGroup, FileSlice, FileSystemView
from laketide.table.storage.io import FileIO
from laketide.table.table import Table, TableNotFound

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

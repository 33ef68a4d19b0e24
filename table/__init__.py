"""A Hudi table (``Table``) and what it is made of, by concern: ``format`` (the on-disk format), ``storage`` (the
storage seam), ``reading``, ``inspect`` (what an operator reads) and ``mirror`` (the Delta log). Each sub-package
imports only those below it (``tests/project/test_layers.py``): storage, then format, then reading and the mirror, then
inspect; the errors, the shared cache and ``Table`` live here.

The names below are imported at first use: a process that needs only the errors (the Kafka source's planning, in a
Python worker Spark starts for each query) does not pay for the format's modules."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from laketide.table.errors import ErrorKind, LaketideError, UnsupportedTableError
    from laketide.table.format.commit import CommitMetadata, WriteStat
    from laketide.table.format.instant import Instant, InstantClock, State
    from laketide.table.format.properties import TableConfig
    from laketide.table.format.timeline import Timeline
    from laketide.table.format.view import FileGroup, FileSlice, FileSystemView
    from laketide.table.storage.io import FileIO
    from laketide.table.table import Table, TableNotFound

_HOMES = {
    "laketide.table.errors": ("ErrorKind", "LaketideError", "UnsupportedTableError"),
    "laketide.table.format.commit": ("CommitMetadata", "WriteStat"),
    "laketide.table.format.instant": ("Instant", "InstantClock", "State"),
    "laketide.table.format.properties": ("TableConfig",),
    "laketide.table.format.timeline": ("Timeline",),
    "laketide.table.format.view": ("FileGroup", "FileSlice", "FileSystemView"),
    "laketide.table.storage.io": ("FileIO",),
    "laketide.table.table": ("Table", "TableNotFound"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str):
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'laketide.table' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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

"""A damaged table: a file that must be intact is not, and what to do about it.

The writer stops at such a finding and writes nothing more; the message names the file, what is
wrong with it, and the ways out. Nothing is "repaired" silently: a table whose files are wrong is
an operator's decision, not the writer's.

Errors raised inside Spark's tasks reach the driver as text, so the message carries everything:
``TableDamaged.from_text`` finds it again there.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa

from laketide.table.errors import LaketideError
from laketide.table.format.files import BaseFile, parse_data_file
from laketide.table.storage.io import FileIO

_IN_TEXT = re.compile(r"TableDamaged: (?P<path>\S+) is damaged: (?P<problem>.+?)\. Way out: (?P<way_out>[^\n]+)")


class TableDamaged(LaketideError, ValueError):
    """A file of the table is missing, cut short or unreadable."""

    def __init__(self, path: str, problem: str, way_out: str):
        self.path, self.problem, self.way_out = path, problem, way_out
        super().__init__(f"{path} is damaged: {problem}. Way out: {way_out}")

    def __reduce__(self):
        return TableDamaged, (self.path, self.problem, self.way_out)

    @classmethod
    def from_text(cls, text: str) -> TableDamaged | None:
        """The finding in an error's text (a task's traceback as Spark reports it), if there is one."""
        found = _IN_TEXT.search(text)
        return cls(found["path"], found["problem"], found["way_out"]) if found else None


def way_out_for_data_file(instant: str | None) -> str:
    written_by = (
        f"the instant that wrote it (laketide rollback TABLE {instant} --force)"
        if instant
        else "the instant that wrote it"
    )
    return (
        "put back an intact copy of the file (from a backup or the store's object versions); "
        f"or roll back {written_by}, or restore a savepoint before it (laketide restore TABLE SAVEPOINT). "
        "The job wrote nothing after finding it"
    )


def way_out_for_timeline_file() -> str:
    return (
        "put back an intact copy of the file (from a backup or the store's object versions); laketide cannot roll back "
        "or restore past an instant whose metadata it cannot read. The job wrote nothing after finding it"
    )


def _problem(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"it cannot be read ({text.rstrip('.')})"


@contextmanager
def reading_data_file(io: FileIO, path: str) -> Iterator[None]:
    """Reading a base or log file: a file cut short or not parquet is damage, named with the instant that
    wrote it. A missing file is not turned into damage here: callers tell a cleaned file from a lost one."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        data_file = parse_data_file("", posixpath.basename(path))
        written_by = (
            data_file.instant_time if isinstance(data_file, BaseFile) else None
        )  # a log's name gives its slice, not its writer
        raise TableDamaged(io.full_path(path), _problem(exc), way_out_for_data_file(written_by)) from exc


@contextmanager
def reading_timeline_file(path: str) -> Iterator[None]:
    """Parsing an instant's metadata: a file that is not what its name says is damage."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as exc:  # pydantic's and fastavro's errors are ValueErrors
        if isinstance(exc, TableDamaged):
            raise
        raise TableDamaged(path, _problem(exc), way_out_for_timeline_file()) from exc

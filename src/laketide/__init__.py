"""laketide: a streaming upsert writer for Apache Hudi tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from laketide.table.errors import (
        Conflict,
        ErrorKind,
        Invalid,
        LaketideError,
        NotFound,
        Refused,
        Unavailable,
        UnsupportedTableError,
    )
    from laketide.writer.job.write_api import write

__version__ = "0.1.0"

__all__ = [
    "Conflict",
    "ErrorKind",
    "Invalid",
    "LaketideError",
    "NotFound",
    "Refused",
    "Unavailable",
    "UnsupportedTableError",
    "__version__",
    "write",
]
_ERRORS = set(__all__) - {"__version__", "write"}


def __getattr__(name: str):
    # loaded when first used: ``import laketide`` loads neither pyarrow nor the writer, so a process of laketide's
    # own (``laketide.cli``) chooses Arrow's allocator before pyarrow starts
    if name == "write":
        from laketide.writer.job.write_api import write

        return write
    if name in _ERRORS:
        from laketide.table import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'laketide' has no attribute {name!r}")

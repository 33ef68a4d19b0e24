"""laketide: a streaming upsert writer for Apache Hudi tables."""

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

__version__ = "0.1.0"

__all__ = ["Conflict", "ErrorKind", "Invalid", "LaketideError", "NotFound", "Refused", "Unavailable", "UnsupportedTableError", "__version__", "write"]


def __getattr__(name: str):
    # ``laketide.write`` loads the writer only when used, so ``import laketide`` stays light
    if name == "write":
        from laketide.writer.write_api import write

        return write
    raise AttributeError(f"module 'laketide' has no attribute {name!r}")

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

__all__ = ["Conflict", "ErrorKind", "Invalid", "LaketideError", "NotFound", "Refused", "Unavailable", "UnsupportedTableError", "__version__"]

"""One error family: every error laketide raises on purpose is a ``LaketideError``.

Its ``kind`` says what the caller can do about it, and each adapter answers a
kind in one place: the CLI's exit codes (``laketide.cli.output.EXIT_CODES``) and the
REST API's statuses (``laketide.api.errors.STATUSES``). The concrete classes
keep the builtin base callers already catch (``KeyError`` for a missing
instant, ``ValueError`` for a bad value, ``FileNotFoundError`` for a missing
table), as delta-rs's ``DeltaError`` subclasses do.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    # the work failed on the server's side (a damaged file, a service that keeps failing): retrying will not help
    FAILED = "failed"
    NOT_FOUND = "not_found"  # a table, instant or savepoint that is not there
    INVALID = "invalid"  # a bad argument, setting or input: fix it and ask again
    REFUSED = "refused"  # a valid request that would break a guarantee (lose rows, roll back a savepoint)
    CONFLICT = "conflict"  # someone else holds what this needs (the lease, an instant file)
    UNAVAILABLE = "unavailable"  # a server or store it needs cannot be reached: try again later
    LEASE_LOST = "lease_lost"  # the writer lost its lease: its supervisor restarts it with a new epoch
    UNAUTHENTICATED = "unauthenticated"  # a change to the table was asked for without credentials
    FORBIDDEN = "forbidden"  # the credentials sent do not allow it
    BUSY = "busy"  # the API is answering as many requests as it may beside the writer: ask again after Retry-After


class LaketideError(Exception):
    """Base of laketide's errors; ``kind`` is the class's unless one is given."""

    kind: ErrorKind = ErrorKind.FAILED

    def __init__(self, *args: object, kind: ErrorKind | None = None):
        super().__init__(*args)
        if kind is not None:
            self.kind = kind


class NotFound(LaketideError):
    kind = ErrorKind.NOT_FOUND


class Invalid(LaketideError, ValueError):
    kind = ErrorKind.INVALID


class Refused(LaketideError):
    kind = ErrorKind.REFUSED


class Conflict(LaketideError):
    kind = ErrorKind.CONFLICT


class Unavailable(LaketideError):
    kind = ErrorKind.UNAVAILABLE


def first_line(error: BaseException) -> str:
    """An error's message up to its first line break (a library's may go on for pages: a backtrace, a
    request dump); empty when it has none."""
    text = str(error)
    return text.split("\n", 1)[0]


def kind_of(error: BaseException) -> ErrorKind | None:
    """The kind of one of laketide's errors; ``None`` for anything else (a bug, or a library's own error)."""
    return error.kind if isinstance(error, LaketideError) else None


class UnsupportedTableError(LaketideError, NotImplementedError):
    """The table uses a feature laketide cannot read or write yet; nothing was read or written."""

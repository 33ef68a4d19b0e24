"""How the CLI answers: text for people, JSON for scripts (``--json``), one exit code per error kind.

Every command renders through ``Output``, and every ``LaketideError`` leaves through ``fail`` with the
code ``EXIT_CODES`` gives its kind, so a script can tell "not found" from "refused" from "try again later".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from pydantic_core import to_jsonable_python

from laketide.table.errors import ErrorKind, LaketideError

OK = 0
EXIT_CODES: dict[ErrorKind, int] = {
    ErrorKind.FAILED: 1,
    ErrorKind.INVALID: 2,
    ErrorKind.NOT_FOUND: 3,
    ErrorKind.REFUSED: 4,
    ErrorKind.CONFLICT: 4,
    ErrorKind.UNAUTHENTICATED: 4,
    ErrorKind.FORBIDDEN: 4,
    ErrorKind.LEASE_LOST: 5,
    ErrorKind.UNAVAILABLE: 6,
    ErrorKind.BUSY: 6,  # a job's API asked too fast: try again later
}

Progress = Callable[[int, int], None] | None


class Output:
    """Where a command's result and errors go."""

    def __init__(self, as_json: bool = False):
        self.as_json = as_json

    def result(self, data: Any, text: str | Callable[[], str]) -> None:
        """``data`` as JSON for scripts, else ``text`` (a callable is only rendered for people)."""
        if self.as_json:
            typer.echo(json.dumps(to_jsonable_python(data), indent=2, default=str))
        else:
            typer.echo(text() if callable(text) else text)

    def rows(self, data: Sequence[Any], columns: Sequence[str], title: str, empty: str) -> None:
        """A list of models: JSON, or a table of ``columns``."""
        if self.as_json or not data:
            self.result(data, empty)
            return
        from rich.console import Console
        from rich.table import Table as RichTable

        view = RichTable(*columns, title=title)
        for item in to_jsonable_python(data):
            view.add_row(*("" if item.get(c) is None else str(item[c]) for c in columns))
        Console().print(view)

    def fail(self, message: str, kind: ErrorKind) -> typer.Exit:
        code = EXIT_CODES[kind]
        if self.as_json:
            typer.echo(json.dumps({"error": message, "kind": kind.value, "exit_code": code}))
        else:
            typer.echo(f"error: {message}", err=True)
        return typer.Exit(code)

    @contextmanager
    def progress(self, what: str, quiet: bool = False) -> Iterator[Progress]:
        """A progress callback ``(done, total)`` drawn as a bar, or ``None`` where output is for scripts."""
        if quiet or self.as_json:
            yield None
            return
        from rich.progress import Progress as Bar

        with Bar(transient=True) as bar:
            task = bar.add_task(what, total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)


def answers(command: Callable) -> Callable:
    """Turn a command's ``LaketideError`` into its message and exit code (``--json``: as a JSON object)."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except LaketideError as error:
            raise Output(kwargs.get("as_json", False)).fail(str(error), error.kind) from None
        except Exception as error:
            if not type(error).__module__.startswith("obstore"):
                raise
            from laketide.table.storage.store_requests import (
                store_failure,  # the store's own error no step told apart: a sentence
            )

            failure = store_failure(error, kwargs.get("table") or "the table")
            raise Output(kwargs.get("as_json", False)).fail(str(failure), failure.kind) from None

    return run

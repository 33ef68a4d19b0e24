"""How the REST API answers laketide's errors: one status per error kind, and a body that says what to do.

A ``LaketideError`` answers ``{"detail", "kind"}`` with the status ``STATUSES`` gives its kind; a lease
another job holds also names that job's API (``holder_api``), so a client can ask it instead. Anything
else is a bug, and FastAPI answers it 500.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from laketide.coordinator import LeaseHeld
from laketide.table.errors import ErrorKind, LaketideError

STATUSES: dict[ErrorKind, int] = {
    ErrorKind.INVALID: 400,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.REFUSED: 409,
    ErrorKind.CONFLICT: 409,
    ErrorKind.FAILED: 500,  # a damaged file, a corrupt commit, a service that keeps failing: the server's side
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.LEASE_LOST: 503,
}

# the kind a status stands for, for a client that got one (the CLI asking a job's API); 422 is FastAPI's own validation
KIND_OF_STATUS: dict[int, ErrorKind] = {**{status: kind for kind, status in reversed(STATUSES.items())}, 422: ErrorKind.INVALID}


# what the dashboard says instead of the REST API's wording, by kind
_UI_WORDING = {ErrorKind.UNAUTHENTICATED: "This action needs the API token: enter it in the token field at the top of the page."}


def _html(exc: LaketideError) -> HTMLResponse:
    """The dashboard's answer (its requests are under ``/ui``): a fragment it shows where the result would go."""
    text = _UI_WORDING.get(exc.kind, str(exc))
    return HTMLResponse(f'<p class="error" role="alert"><b>{escape(exc.kind.value)}</b> {escape(text)}</p>', status_code=STATUSES[exc.kind])


def install(app: FastAPI) -> None:
    """Answer every ``LaketideError`` from ``STATUSES``."""

    @app.exception_handler(LaketideError)
    async def _answer(request: Request, exc: LaketideError) -> Response:
        if request.url.path.startswith("/ui/"):
            return _html(exc)
        body = {"detail": str(exc), "kind": exc.kind.value}
        if isinstance(exc, LeaseHeld) and exc.holder is not None and exc.holder.api_address:
            body["holder_api"] = exc.holder.api_address
        return JSONResponse(status_code=STATUSES[exc.kind], content=body)

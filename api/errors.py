"""How the REST API answers laketide's errors: one status per error kind, and a body that says what to do.

A ``LaketideError`` answers ``{"detail", "kind"}`` with the status ``STATUSES`` gives its kind; a lease
another job holds also names that job's API (``holder_api``), so a client can ask it instead. The rest
answer in the same shape: a request FastAPI cannot validate is ``invalid`` 400 (with its ``errors``), an
unknown path or method the status Starlette gives it, and anything else, a bug, ``failed`` 500 naming
the exception (the traceback goes to the log). The dashboard's requests (under ``/ui``) get the same
words as an HTML fragment, shown where the panel's content would go.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from html import escape

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

from laketide.coordinator import LeaseHeld
from laketide.table.errors import ErrorKind, LaketideError

log = logging.getLogger(__name__)

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
    ErrorKind.BUSY: 429,  # answered by ``api/limits.py`` before the app
}

# the kind a status stands for, for a client that got one (the CLI asking a job's API), and for Starlette's own answers
KIND_OF_STATUS: dict[int, ErrorKind] = {
    **{status: kind for kind, status in reversed(STATUSES.items())},
    405: ErrorKind.INVALID,
    411: ErrorKind.INVALID,
    413: ErrorKind.INVALID,
    422: ErrorKind.INVALID,
}


# what the dashboard says instead of the REST API's wording, by kind
_UI_WORDING = {
    ErrorKind.UNAUTHENTICATED: "This action needs the API token: enter it in the token field at the top of the page."
}


def error_content(path: str, kind: ErrorKind, detail: str, **extra) -> tuple[bytes, str]:
    """An error's body and media type: ``{"detail", "kind", **extra}``; for the dashboard (its requests are
    under ``/ui``) a fragment it shows where the result would go."""
    if path.startswith("/ui/"):
        text = _UI_WORDING.get(kind, detail)
        return (
            f'<p class="error" role="alert"><b>{escape(kind.value)}</b> {escape(text)}</p>'.encode(),
            "text/html; charset=utf-8",
        )
    return json.dumps(
        {"detail": detail, "kind": kind.value, **extra}, ensure_ascii=False, separators=(",", ":")
    ).encode(), "application/json"


def _answer(request: Request, status: int, kind: ErrorKind, detail: str, **extra) -> Response:
    body, media = error_content(request.url.path, kind, detail, **extra)
    return Response(body, status_code=status, media_type=media)


async def send_error(
    send: Send, path: str, status: int, kind: ErrorKind, detail: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """An error answered by ASGI middleware in front of the app (``api/limits.py``, ``api/guard.py``), in the same
    shape."""
    body, media = error_content(path, kind, detail)
    start = [(b"content-type", media.encode()), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


def _invalid_detail(exc: RequestValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error.get('loc', ()))}: {error.get('msg', '')}" for error in exc.errors()
    )


def install(app: FastAPI) -> None:
    """Answer every error as ``{"detail", "kind"}``: a ``LaketideError`` with the status ``STATUSES`` gives its kind."""

    @app.exception_handler(LaketideError)
    async def _laketide(request: Request, exc: LaketideError) -> Response:
        extra = {}
        if isinstance(exc, LeaseHeld) and exc.holder is not None and exc.holder.api_address:
            extra["holder_api"] = exc.holder.api_address
        return _answer(request, STATUSES[exc.kind], exc.kind, str(exc), **extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return _answer(
            request,
            400,
            ErrorKind.INVALID,
            _invalid_detail(exc),
            errors=[
                {"loc": list(error.get("loc", ())), "msg": error.get("msg", ""), "type": error.get("type", "")}
                for error in exc.errors()
            ],
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        response = _answer(
            request, exc.status_code, KIND_OF_STATUS.get(exc.status_code, ErrorKind.INVALID), str(exc.detail)
        )
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _answer(
            request,
            500,
            ErrorKind.FAILED,
            f"the server failed to answer ({type(exc).__name__}: {exc}); its log has the traceback",
        )

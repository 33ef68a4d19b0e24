"""The REST API's request bodies and the error body. Responses are the domain's own models
(``table/inspect/__init__.py``, ``writer/report.py`` and the operations' results), never re-declared here."""

from __future__ import annotations

from pydantic import BaseModel, Field

from laketide.coordinator.lease import LeaseHolder

INSTANT_PATTERN = r"^\d{17}$"


class ErrorOut(BaseModel):
    detail: str
    kind: str | None = Field(
        default=None,
        description="the error's kind: not_found, invalid, refused, conflict, unavailable, lease_lost, failed, ...",
    )
    holder_api: str | None = Field(
        default=None, description="on a 409 for a held lease: the API of the job that holds it"
    )


class LeaseOut(BaseModel):
    held: bool
    holder: LeaseHolder | None = None


class RollbackRequest(BaseModel):
    dry_run: bool = False
    force: bool = Field(
        default=False,
        description="needed to roll back a completed instant that is not the newest; never allows a rollback that "
        "would "
        "lose rows (409)",
    )


class SavepointRequest(BaseModel):
    instant: str | None = Field(
        default=None, pattern=INSTANT_PATTERN, description="a completed write; default: the latest"
    )
    comment: str = Field(default="", max_length=4096)
    user: str | None = Field(default=None, max_length=256)


class RestoreRequest(BaseModel):
    savepoint: str = Field(pattern=INSTANT_PATTERN)


class Liveness(BaseModel):
    status: str = "ok"
    table: str

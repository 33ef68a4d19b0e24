"""The base of every section of a job's configuration: unknown keys refused, every assignment validated, and
each field's docstring its description, of which the configuration reference is made (``config.reference``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)

"""The value types of the configuration that are more than a Python type: sizes (``"128MB"``), trigger
intervals (``"10 seconds"``, ``available-now``) and parquet codecs."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?)\s*$", re.IGNORECASE)


def parse_size(value: Any) -> int:
    """Bytes from ``134217728``, ``"128MB"``, ``"128 MiB"`` or ``"1g"``."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a size; use bytes or a number with KB, MB, GB")
    return int(float(m[1]) * _UNITS[m[2][:1].lower()])


def parse_trigger(value: Any) -> str:
    text = str(value).strip().lower()
    if text in ("available-now", "availablenow", "once"):
        return "available-now"
    if not _DURATION.match(text):
        raise ValueError(f"{value!r} is not a trigger; use an interval like '10 seconds' or 'available-now'")
    return text


_SECONDS = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
}


def trigger_seconds(trigger: str | None) -> float | None:
    """A processing-time trigger's interval in seconds ("10 seconds", "500ms"); ``None`` for available-now or none."""
    found = _DURATION.match(trigger or "")
    return float(found[1]) * _SECONDS[found[2].lower()] if found else None


Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
Trigger = Annotated[str, BeforeValidator(parse_trigger)]
Codec = Literal["zstd", "snappy", "gzip", "none"]  # parquet's, as pyarrow names them

"""Value codecs of Kafka Connect and Debezium that pyarrow has no kernel for: base64, two's complement
decimals, times of day, and unit conversions of integer times."""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from decimal import Decimal
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
US_PER_DAY = 86_400_000_000


def to_micros(values: pa.Array, unit: str) -> pa.Array:
    per = PER_SECOND[unit]
    if per < 1_000_000:
        return pc.multiply_checked(values, 1_000_000 // per)
    if per > 1_000_000:
        return floor_div(values, per // 1_000_000)
    return values


def floor_div(values: pa.Array, by: int) -> pa.Array:
    """Integer division rounding down, so that a time before 1970 keeps its microsecond rather than
    being rounded towards zero."""
    numbers = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
    mask = values.is_null().to_numpy(zero_copy_only=False)
    return pa.array(np.floor_divide(numbers, by), pa.int64(), mask=mask)


def micros_of_year(year: int) -> int:
    """Microseconds since the epoch at the start of ``year`` (UTC)."""
    return (
        datetime.datetime(year, 1, 1, tzinfo=datetime.UTC) - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    ) // (datetime.timedelta(microseconds=1))


def fits_int32(values: pa.Array) -> bool:
    low, high = pc.min_max(values).values()
    return low.as_py() is None or (low.as_py() >= -(2**31) and high.as_py() < 2**31)


def fits_day(micros: pa.Array) -> bool:
    low, high = pc.min_max(micros).values()
    return low.as_py() is None or (low.as_py() >= 0 and high.as_py() < US_PER_DAY)


DATE_ONLY = re.compile(r"^\s*[+-]?\d{4,}-\d{2}-\d{2}(Z|[+-]\d{2}:?\d{2})?\s*$")


def all_dates(values: pa.Array) -> bool:
    """Whether every value is a date alone (IsoDate), not a date and time."""
    valid = values.drop_null()
    return len(valid) > 0 and pc.all(pc.match_substring_regex(valid, DATE_ONLY.pattern)).as_py()


TIME_OF_DAY = re.compile(r"^\s*(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})?\s*$")


def time_of_day(text: str | None):
    if text is None:
        return None
    m = TIME_OF_DAY.match(text)
    if not m:
        return None
    hours, minutes, seconds = int(m[1]), int(m[2]), int(m[3] or 0)
    micros = int((m[4] or "0").ljust(6, "0")[:6])
    try:
        return datetime.time(hours, minutes, seconds, micros)
    except ValueError:
        return None


DECIMAL_TEXT = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
BASE64 = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def decimal_forms(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per value, whether it reads as decimal text and whether it reads as base64: digits whose length is a
    multiple of four read as both (``"1234"`` is base64 of three bytes too)."""
    text = pc.fill_null(pc.match_substring_regex(values, DECIMAL_TEXT), False).to_numpy(zero_copy_only=False)
    b64 = pc.fill_null(pc.match_substring_regex(values, BASE64), False)
    b64 = pc.and_(b64, pc.fill_null(pc.greater(pc.utf8_length(values), 0), False)).to_numpy(zero_copy_only=False)
    return text, b64


def b64(text: str | None) -> bytes | Literal[False] | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False


def base64_decimals(values: pa.Array, scale: int) -> list[Decimal | bool | None]:
    """Kafka Connect's Decimal: the unscaled value, big-endian two's complement, in base64."""
    return decimals_of(base64_unscaled(values), scale)


def decimals_of(unscaled: list[int | Literal[False] | None], scale: int) -> list[Decimal | bool | None]:
    """Unscaled integers of ``scale`` as Python decimals (``False``, a value that did not decode, kept)."""
    return [u if u is None or u is False else Decimal(u).scaleb(-scale) for u in unscaled]


def base64_unscaled(values: pa.Array) -> list[int | Literal[False] | None]:
    """Kafka Connect's Decimal's unscaled integers (``False`` where a value is not base64)."""
    out: list[int | Literal[False] | None] = []
    for text in values.to_pylist():
        raw = b64(text)
        out.append(raw if raw is None or raw is False else int.from_bytes(raw, "big", signed=True))
    return out


def variable_decimals(values: pa.Array) -> list[Decimal | bool | None]:
    """Debezium's VariableScaleDecimal: ``{"scale": s, "value": <Connect Decimal's bytes>}`` per row."""
    out: list[Decimal | bool | None] = []
    for item in values.to_pylist():
        if item is None:
            out.append(None)
            continue
        raw, scale = b64(item.get("value")), item.get("scale")
        if raw is None or raw is False or not isinstance(scale, int):
            out.append(False)
            continue
        out.append(Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale))
    return out


def fits_decimal(value: Decimal | None, target: pa.Decimal128Type) -> bool:
    """Whether ``value`` is held exactly by ``target``: no digit below its scale, none beyond its precision."""
    if value is None:
        return True
    if not value.is_finite():
        return False
    quantum = Decimal(1).scaleb(-target.scale)
    if value != value.quantize(quantum, rounding="ROUND_DOWN"):
        return False
    digits = len(value.quantize(quantum).as_tuple().digits)
    return digits <= target.precision

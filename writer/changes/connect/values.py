"""Column values of change events, from the encoding a Kafka Connect connector chose to the table's Arrow type.

Debezium encodes a column by its database type and the connector's settings (its defaults:
``decimal.handling.mode = precise``, ``time.precision.mode = adaptive``). When the event carries its schema
(the JSON converter with ``schemas.enable``), each column's Connect type and semantic ``name`` say which
encoding it is, and ``decode`` follows them:

| name (Connect type)                                   | value                          | into                      |
|-------------------------------------------------------|--------------------------------|---------------------------|
| ``io.debezium.time.Date``, ``...connect.data.Date`` (int32) | days since 1970-01-01    | DATE, TIMESTAMP           |
| ``io.debezium.time.Timestamp``, ``...connect.data.Timestamp`` (int64) | milliseconds   | TIMESTAMP(_NTZ), DATE     |
| ``io.debezium.time.MicroTimestamp`` (int64)           | microseconds since the epoch   | TIMESTAMP(_NTZ), DATE     |
| ``io.debezium.time.NanoTimestamp`` (int64)            | nanoseconds (cut to µs)        | TIMESTAMP(_NTZ), DATE     |
| ``io.debezium.time.ZonedTimestamp``, ``IsoTimestamp`` (string) | ISO-8601          | TIMESTAMP(_NTZ), DATE     |
| ``io.debezium.time.IsoDate`` (string)                 | ``2018-06-20Z``                | DATE, TIMESTAMP           |
| ``io.debezium.time.Time``/``MicroTime``/``NanoTime``, ``...connect.data.Time`` | ms/µs/ns of the day | TIME |
| ``io.debezium.time.ZonedTime``, ``IsoTime`` (string)  | ``13:37:03.5Z``                | TIME                      |
| ``org.apache.kafka.connect.data.Decimal`` (bytes)     | base64, big-endian two's complement, ``parameters.scale`` |
DECIMAL, DOUBLE, FLOAT, integers, STRING |
| ``io.debezium.data.VariableScaleDecimal`` (struct)    | ``{scale, value}``, value as above | the same              |
| ``io.debezium.data.Json``, ``Uuid``, ``Enum``, ``Xml``, ``EnumSet`` (string) | text    | STRING                    |
| ``io.debezium.data.Bits`` (bytes), any bytes          | base64                         | BINARY                    |

A time of day or a timestamp under an integer column is its microseconds (of the day, since the epoch),
whatever unit the connector sent; a date under an integer column stays days. Without the event's schema, the declared
type decides: a string under a DATE or TIMESTAMP column is ISO-8601; an integer under DATE is days; an integer under
TIMESTAMP needs ``source.debezium.timestamp_unit`` (its unit differs by the column's precision in the database); a
string under DECIMAL is ``source.debezium.decimal_handling``'s encoding (``precise``: base64 at the declared scale;
``string``: the number as text), a number is a number.

A value that cannot be decoded is null with a reason that names the column and the encoding, and the row
goes to quarantine: a value is never stored wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.config import DebeziumSection
from laketide.writer.changes.connect import codecs as codecs
from laketide.writer.changes.connect.schema import (
    DAY_UNITS,
    DAYS,
    DECIMAL,
    EPOCH_UNITS,
    ISO_DATES,
    ISO_TIMES,
    ISO_TIMESTAMPS,
    VARIABLE_DECIMAL,
    Encoding,
)

# the years an integer timestamp of an event without its schema may fall in (``Column._plausible``)
PLAUSIBLE_YEARS = (1900, 2200)
TOO_FINE_BELOW = 59 * 86_400_000_000  # 1970-03-01: a ms timestamp of 1990-2100 read as µs falls before it


@dataclass(frozen=True)
class Decoding:
    """How values without a schema are read (``source.debezium.timestamp_unit`` and ``decimal_handling``), and
    what orders events (``ordering``: their position in the database's log, or its commit time first)."""

    timestamp_unit: str | None = None
    decimal_handling: str = "precise"
    ordering: str = "position"
    on_log_reset: str = "stop"  # what events whose log went back do (``changes.source_log``)

    @classmethod
    def of(cls, section: DebeziumSection) -> Decoding:
        """The decoding ``source.debezium`` sets."""
        return cls(section.timestamp_unit, section.decimal_handling, section.ordering, section.on_log_reset)


@dataclass
class Decoded:
    """A column decoded: its values in the target type, and per row the reason it could not be (or null)."""

    values: pa.Array
    reasons: pa.Array = field(default=None)  # type: ignore[assignment]

    def __post_init__(self):
        if self.reasons is None:
            self.reasons = pa.nulls(len(self.values), pa.string())


class Column:
    """The decoding of one column: what it is called (for reasons), its encoding if the event said, its target type."""

    def __init__(self, name: str, encoding: Encoding | None, target: pa.DataType, decoding: Decoding):
        self.name, self.encoding, self.target, self.decoding = name, encoding, target, decoding

    @property
    def described(self) -> str:
        e = self.encoding
        if e is None:
            return "no schema"
        return f"{e.name} ({e.type})" if e.name else e.type

    def fail(self, values: pa.Array, bad: np.ndarray | pa.Array, what: str) -> Decoded:
        """``values`` with the rows of ``bad`` nulled and given ``what`` as their reason."""
        mask = pa.array(bad, pa.bool_()) if isinstance(bad, np.ndarray) else pc.fill_null(bad, False)
        reason = f"column '{self.name}': {what} (encoding: {self.described})"
        return Decoded(
            pc.if_else(mask, pa.nulls(len(values), values.type), values),
            pc.if_else(mask, pa.scalar(reason), pa.scalar(None, pa.string())),
        )

    def refuse(self, values: pa.Array, what: str) -> Decoded:
        """Every non-null value of the column refused: the encoding cannot become the target type."""
        return self.fail(pa.nulls(len(values), self.target), pc.is_valid(values), what)

    def decode(self, values: pa.Array) -> Decoded:
        target, wire = self.target, values.type
        if pa.types.is_null(wire) or len(values) == values.null_count:
            return Decoded(pa.nulls(len(values), target))
        if pa.types.is_timestamp(target):
            return self._timestamp(values)
        if pa.types.is_date(target):
            return self._date(values)
        if pa.types.is_time(target):
            return self._time(values)
        if pa.types.is_decimal(target) or pa.types.is_floating(target) or pa.types.is_integer(target):
            return self._number(values)
        if pa.types.is_string(target) or pa.types.is_large_string(target):
            return self._text(values)
        if pa.types.is_binary(target) or pa.types.is_large_binary(target):
            return self._binary(values)
        if pa.types.is_list(target) and pa.types.is_list(wire):
            return self._list(values)
        if pa.types.is_struct(target) and pa.types.is_struct(wire):
            return self._struct(values)
        return self.cast(values, target)

    # -- the target types ------------------------------------------------------

    def cast(self, values: pa.Array, target: pa.DataType) -> Decoded:
        """``values`` cast as they are: a value the cast cannot make exactly gets its reason."""
        try:
            return Decoded(pc.cast(values, target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        out, bad = [], []
        for value in values:
            try:
                out.append(pc.cast(pa.array([value.as_py()], values.type), target)[0].as_py())
                bad.append(False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
                out.append(None)
                bad.append(True)
        return self.fail(pa.array(out, target), np.array(bad), f"a {values.type} value that is not a valid {target}")

    def _name_in(self, names: set[str] | dict) -> bool:
        return self.encoding is not None and self.encoding.name in names

    def _epoch_unit(self) -> str | None:
        e = self.encoding
        if e is None:
            return self.decoding.timestamp_unit
        return EPOCH_UNITS.get(e.name or "")

    def _timestamp(self, values: pa.Array) -> Decoded:
        target = self.target
        if pa.types.is_integer(values.type):
            if self._name_in(DAYS):
                return self._cast_micros(pc.multiply_checked(values.cast(pa.int64()), codecs.US_PER_DAY), values)
            unit = self._epoch_unit()
            if unit is None:
                what = (
                    (
                        "an integer timestamp without the event's schema, whose unit (ms, µs, ns) differs by "
                        "the column's "
                        "precision: turn on the converter's schemas (value.converter.schemas.enable = true), or set "
                        "source.debezium.timestamp_unit"
                    )
                    if self.encoding is None
                    else "an integer that is not a timestamp"
                )
                return self.refuse(values, what)
            micros = codecs.to_micros(values.cast(pa.int64()), unit)
            if self.encoding is None:  # the unit is the setting's: a value it makes implausible is not stored
                return self._plausible(micros, unit)
            return self._cast_micros(micros, values)
        if pa.types.is_string(values.type):
            if self._name_in(ISO_DATES) or (self.encoding is None and codecs.all_dates(values)):
                days = self._iso_dates(values)
                return Decoded(pc.cast(pc.cast(days.values, pa.timestamp("s")), target, safe=False), days.reasons)
            if self.encoding is not None and not self._name_in(ISO_TIMESTAMPS):
                return self.refuse(values, "text that is not an ISO-8601 timestamp encoding")
            return self._iso_timestamps(values)
        return self.refuse(values, f"a {values.type} value is not a timestamp")

    def _plausible(self, micros: pa.Array, unit: str) -> Decoded:
        """Integer timestamps of events without their schema, in ``timestamp_unit``: a value off by the factor of
        a thousand between units falls in the first weeks of 1970 or tens of thousands of years ahead, so one
        outside ``PLAUSIBLE_YEARS``, or after the epoch and before ``TOO_FINE_BELOW``, goes to quarantine rather than
        be stored a thousand times wrong."""
        low, high = (codecs.micros_of_year(y) for y in PLAUSIBLE_YEARS)
        odd = pc.or_(pc.less(micros, low), pc.greater_equal(micros, high))
        # where a timestamp of 1990-2100 falls when read a thousand times too fine; the epoch itself is unit-free
        too_fine = pc.and_(pc.greater(micros, 0), pc.less(micros, TOO_FINE_BELOW))
        odd = pc.or_(odd, too_fine)
        out = self._cast_micros(pc.if_else(odd, pa.scalar(None, pa.int64()), micros), micros)
        return self.fail(
            out.values,
            odd,
            f"an integer timestamp outside the years {PLAUSIBLE_YEARS[0]}-{PLAUSIBLE_YEARS[1]}, or in the first two "
            f"months after the epoch, in "
            f"source.debezium.timestamp_unit = '{unit}': likely sent in another unit (Debezium sends ms for a "
            "column of precision 0-3, µs for 4-6); turn on the converter's schemas to decode each by its own",
        )

    def _cast_micros(self, micros: pa.Array, values: pa.Array) -> Decoded:
        stamped = micros.cast(pa.timestamp("us"))
        if self.target.tz is not None:
            stamped = stamped.cast(pa.timestamp("us", "UTC"))
        return Decoded(stamped.cast(self.target))

    def _iso_timestamps(self, values: pa.Array) -> Decoded:
        """ISO-8601 text: with a zone (Debezium's ZonedTimestamp, in UTC), or without (IsoTimestamp, taken as UTC)."""
        text = pc.utf8_trim_whitespace(values)
        # more than microseconds (Oracle, Postgres' NanoTimestamp as text) are cut to microseconds, as Spark holds them
        text = pc.replace_substring_regex(text, r"(\.\d{6})\d+", r"\1")
        zoned = pc.match_substring_regex(text, r"(Z|[+-]\d{2}(:?\d{2})?)$")
        text = pc.if_else(pc.fill_null(zoned, False), text, pc.binary_join_element_wise(text, "Z", ""))
        decoded = self.cast(text, pa.timestamp("us", "UTC"))
        return Decoded(
            decoded.values.cast(self.target)
            if self.target.tz is not None
            else decoded.values.cast(pa.timestamp("us", "UTC")).cast(pa.int64()).cast(self.target),
            self._reworded(decoded, "text that is not an ISO-8601 timestamp"),
        )

    def _reworded(self, decoded: Decoded, what: str) -> pa.Array:
        reason = f"column '{self.name}': {what} (encoding: {self.described})"
        return pc.if_else(pc.is_valid(decoded.reasons), pa.scalar(reason), pa.scalar(None, pa.string()))

    def _date(self, values: pa.Array) -> Decoded:
        if pa.types.is_integer(values.type):
            if self.encoding is None or self._name_in(DAYS):
                return (
                    self.cast(values.cast(pa.int64()).cast(pa.int32()), pa.date32())
                    if codecs.fits_int32(values)
                    else self.refuse(values, "days out of range")
                )
            unit = self._epoch_unit()
            if unit is None:
                return self.refuse(values, "an integer that is not a date")
            micros = codecs.to_micros(values.cast(pa.int64()), unit)
            return Decoded(
                pc.cast(pc.floor(pc.divide(micros.cast(pa.float64()), codecs.US_PER_DAY)).cast(pa.int32()), pa.date32())
            )
        if pa.types.is_string(values.type):
            if self.encoding is None or self._name_in(ISO_DATES):
                if self.encoding is None and not codecs.all_dates(values):
                    stamps = Column(self.name, None, pa.timestamp("us", "UTC"), self.decoding)._iso_timestamps(values)
                    return Decoded(pc.cast(stamps.values, pa.date32()), stamps.reasons)
                return self._iso_dates(values)
            if self._name_in(ISO_TIMESTAMPS):
                stamps = self._iso_timestamps(values)
                return Decoded(pc.cast(stamps.values, pa.date32()), stamps.reasons)
            return self.refuse(values, "text that is not an ISO-8601 date encoding")
        return self.refuse(values, f"a {values.type} value is not a date")

    def _iso_dates(self, values: pa.Array) -> Decoded:
        """``2018-06-20``, with Debezium's IsoDate zone suffix (``Z``, ``+02:00``) left aside."""
        day = pc.replace_substring_regex(pc.utf8_trim_whitespace(values), r"(Z|[+-]\d{2}:?\d{2})$", "")
        decoded = self.cast(day, pa.date32())
        return Decoded(decoded.values, self._reworded(decoded, "text that is not an ISO-8601 date"))

    def _time(self, values: pa.Array) -> Decoded:
        unit = DAY_UNITS.get(self.encoding.name or "") if self.encoding is not None else None
        if pa.types.is_integer(values.type) and self.encoding is None:
            return self._time_without_schema(values)
        if pa.types.is_integer(values.type) and unit:
            micros = codecs.to_micros(values.cast(pa.int64()), unit)
            return self.cast(micros.cast(pa.time64("us")) if codecs.fits_day(micros) else micros, self.target)
        if pa.types.is_string(values.type) and (self.encoding is None or self._name_in(ISO_TIMES)):
            parsed = [codecs.time_of_day(v) for v in values.to_pylist()]
            bad = np.array([v is not None and p is None for v, p in zip(values.to_pylist(), parsed)])
            return self.fail(
                pa.array(parsed, pa.time64("us")).cast(self.target), bad, "text that is not an ISO-8601 time"
            )
        return self.refuse(values, f"a {values.type} value is not a time of day")

    def _time_without_schema(self, values: pa.Array) -> Decoded:
        """An integer time of day without the event's schema: ms (TIME of precision 0-3, and the ``connect``
        mode) or µs (4-6) by the column, so ``timestamp_unit`` says which; one not within a day is refused."""
        unit = self.decoding.timestamp_unit
        if unit is None:
            return self.refuse(
                values,
                "an integer time of day without the event's schema, whose unit (ms, µs) differs by the column's "
                "precision: turn on the converter's schemas, or set source.debezium.timestamp_unit",
            )
        micros = codecs.to_micros(values.cast(pa.int64()), unit)
        outside = pc.or_(pc.less(micros, 0), pc.greater_equal(micros, codecs.US_PER_DAY))
        kept = pc.if_else(outside, pa.scalar(None, pa.int64()), micros)
        return self.fail(
            self.cast(kept.cast(pa.time64("us")), self.target).values,
            outside,
            f"an integer that is not within a day in source.debezium.timestamp_unit = '{unit}'",
        )

    def _number(self, values: pa.Array) -> Decoded:
        """DECIMAL, DOUBLE, FLOAT and integer columns."""
        wire, e = values.type, self.encoding
        if (
            pa.types.is_integer(self.target)
            and pa.types.is_integer(wire)
            and e is not None
            and (e.name in DAY_UNITS or e.name in EPOCH_UNITS)
        ):
            unit = DAY_UNITS.get(e.name) or EPOCH_UNITS[e.name]
            return self.cast(codecs.to_micros(values.cast(pa.int64()), unit), self.target)
        if (
            pa.types.is_struct(wire)
            and (e is None or e.name == VARIABLE_DECIMAL)
            and {"scale", "value"} <= {f.name for f in wire}
        ):
            return self._from_decimals(codecs.variable_decimals(values))
        if pa.types.is_string(wire):
            if e is None and pa.types.is_decimal(self.target):
                return self._decimal_without_schema(values)
            if e is not None and e.name == DECIMAL:
                scale = e.scale if e.scale is not None else getattr(self.target, "scale", 0)
                return self._from_decimals(codecs.base64_decimals(values, scale))
            return self.cast(pc.utf8_trim_whitespace(values), self.target)
        if pa.types.is_floating(wire) and pa.types.is_decimal(self.target):
            return self.cast(pc.round(values, self.target.scale), self.target)
        if pa.types.is_integer(wire) or pa.types.is_floating(wire) or pa.types.is_boolean(wire):
            return self.cast(values, self.target)
        return self.refuse(values, f"a {wire} value is not a number")

    def _decimal_without_schema(self, values: pa.Array) -> Decoded:
        """Text under a DECIMAL column of events without their schema, by ``decimal_handling``. Digits whose length
        is a multiple of four read as decimal text and as base64 alike. Under ``precise`` such a value is base64
        only when another value of the column in the micro-batch could only be base64 (few base64 values are
        digits alone, most decimal text is); under ``string`` it is text unless another value could only be
        base64. Otherwise it goes to quarantine naming the setting, as does a value that is only the other one."""
        text, b64 = codecs.decimal_forms(values)
        precise = self.decoding.decimal_handling == "precise"
        proven_base64 = bool((b64 & ~text).any())
        other = text & ~b64 if precise else b64 & ~text
        ambiguous = text & b64 if proven_base64 != precise else np.zeros(len(values), bool)
        if precise:
            out = self._from_decimals(codecs.base64_decimals(values, getattr(self.target, "scale", 0)))
        else:
            out = self.cast(pc.utf8_trim_whitespace(values), self.target)
        setting, sent = ("'string'", "decimal text") if precise else ("'precise'", "base64")
        wrong = self.fail(
            out.values, other, f"{sent}, which source.debezium.decimal_handling = {setting} reads: set it so"
        )
        why = (
            "no other value of the column in the micro-batch is base64 alone, so decimal_handling = 'precise' is not "
            "proven: set source.debezium.decimal_handling = 'string' if the connector sends text"
            if precise
            else "other values of the column in the micro-batch are base64: the connector sends "
            "decimal.handling.mode = precise; set source.debezium.decimal_handling = 'precise'"
        )
        unsure = self.fail(
            wrong.values,
            ambiguous,
            f"digits that read as decimal text and as base64 alike, and {why} (or turn on the converter's schemas)",
        )
        return Decoded(unsure.values, pc.coalesce(wrong.reasons, unsure.reasons, out.reasons))

    def _from_decimals(self, parsed: list[Decimal | bool | None]) -> Decoded:
        """Python decimals (``False`` where the value did not decode) into the target, exactly or not at all."""
        bad = np.array([p is False for p in parsed])
        exact: list = [None if p is None or p is False else p for p in parsed]
        target = self.target
        if pa.types.is_decimal(target):
            fits = [codecs.fits_decimal(p, target) for p in exact]
            too_big = np.array([p is not None and not ok for p, ok in zip(exact, fits)])
            kept = [p if ok else None for p, ok in zip(exact, fits)]
            out = self.fail(pa.array(kept, target), bad, "a value that is not a valid decimal")
            if too_big.any():
                more = self.fail(out.values, too_big, f"a value that does not fit {target} exactly")
                return Decoded(more.values, pc.coalesce(out.reasons, more.reasons))
            return out
        return self.fail(
            self.cast(pa.array([None if p is None else str(p) for p in exact], pa.string()), target).values,
            bad,
            "a value that is not a valid decimal",
        )

    def _text(self, values: pa.Array) -> Decoded:
        wire = values.type
        if pa.types.is_string(wire):
            return Decoded(values)
        if (
            pa.types.is_struct(wire)
            and (self.encoding is None or self.encoding.name == VARIABLE_DECIMAL)
            and {"scale", "value"} <= {f.name for f in wire}
        ):
            parsed = codecs.variable_decimals(values)
            return self.fail(
                pa.array([None if p is None or p is False else str(p) for p in parsed], pa.string()),
                np.array([p is False for p in parsed]),
                "a value that is not a valid decimal",
            )
        if pa.types.is_integer(wire) or pa.types.is_floating(wire) or pa.types.is_boolean(wire):
            return self.cast(values, pa.string())
        return self.refuse(values, f"a {wire} value into a STRING column")

    def _binary(self, values: pa.Array) -> Decoded:
        if not pa.types.is_string(values.type):
            return self.refuse(values, f"a {values.type} value is not bytes")
        if self.encoding is not None and self.encoding.type != "bytes":
            return self.cast(values, self.target)  # text declared BINARY: its UTF-8 bytes
        decoded = [codecs.b64(v) for v in values.to_pylist()]
        bad = np.array([v is False for v in decoded])
        return self.fail(
            pa.array([None if v is False else v for v in decoded], self.target), bad, "text that is not base64"
        )

    def _list(self, values: pa.Array) -> Decoded:
        items = values.flatten()
        encoding = self.encoding.items if self.encoding is not None else None
        inner = Column(f"{self.name}[]", encoding, self.target.value_type, self.decoding).decode(items)
        rebuilt = pa.ListArray.from_arrays(values.offsets, inner.values, type=self.target, mask=values.is_null())
        owner = pc.list_parent_indices(values).to_numpy(zero_copy_only=False)
        bad_items = pc.is_valid(inner.reasons).to_numpy(zero_copy_only=False)
        reasons = pa.nulls(len(values), pa.string())
        if bad_items.any():
            first = {}
            for at in np.nonzero(bad_items)[0]:
                first.setdefault(int(owner[at]), inner.reasons[int(at)].as_py())
            reasons = pa.array([first.get(i) for i in range(len(values))], pa.string())
        return Decoded(rebuilt, reasons)

    def _struct(self, values: pa.Array) -> Decoded:
        encodings = dict(self.encoding.fields) if self.encoding is not None else {}
        wire_names = {f.name for f in values.type}
        children, reasons = [], []
        for target_field in self.target:
            name = target_field.name
            child = values.field(name) if name in wire_names else pa.nulls(len(values), target_field.type)
            decoded = Column(f"{self.name}.{name}", encodings.get(name), target_field.type, self.decoding).decode(child)
            children.append(decoded.values)
            reasons.append(decoded.reasons)
        rebuilt = pa.StructArray.from_arrays(children, fields=list(self.target), mask=values.is_null())
        return Decoded(rebuilt, pc.coalesce(*reasons) if reasons else None)

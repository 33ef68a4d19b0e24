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

from decimal import Decimal
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.writer.changes.connect import codecs as codecs
from laketide.writer.changes.connect.column import Decoded
from laketide.writer.changes.connect.schema import (
    DAY_UNITS,
    DECIMAL,
    EPOCH_UNITS,
    VARIABLE_DECIMAL,
)
from laketide.writer.changes.connect.temporal import TemporalColumn


class Column(TemporalColumn):
    """The decoding of one column: what it is called (for reasons), its encoding if the event said, its target type."""

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
                return self._from_base64(values, scale)
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

    def _from_base64(self, values: pa.Array, scale: int) -> Decoded:
        """Connect's Decimal of ``scale``: straight into the target's storage where it can (``_as_storage``), else
        through Python's decimals, exactly or not at all."""
        unscaled = codecs.base64_unscaled(values)
        stored = self._as_storage(unscaled, scale)
        return stored if stored is not None else self._from_decimals(codecs.decimals_of(unscaled, scale))

    def _as_storage(self, unscaled: list[int | Literal[False] | None], scale: int) -> Decoded | None:
        """Unscaled integers as a decimal of their scale, its bytes being the unscaled integer; ``None`` where the
        target's scale is another or an integer does not fit 64 bits."""
        target = self.target
        if not (pa.types.is_decimal128(target) and target.scale == scale):
            return None
        try:
            ints = pa.array([None if u is False else u for u in unscaled], pa.int64())
        except (OverflowError, pa.ArrowInvalid):
            return None
        bad = np.array([u is False for u in unscaled])
        if target.precision > 18:  # every 64-bit integer has at most 19 digits
            too_big = np.zeros(len(ints), bool)
        else:
            bound = 10**target.precision
            beyond = pc.or_(pc.greater_equal(ints, bound), pc.less_equal(ints, -bound))
            too_big = pc.fill_null(beyond, False).to_numpy(zero_copy_only=False)
        return self._exact(ints.cast(pa.decimal128(38, 0)).view(target), bad, too_big)

    def _exact(self, values: pa.Array, bad: np.ndarray, too_big: np.ndarray) -> Decoded:
        """Decimals of the target with the rows that did not decode (``bad``) and those it cannot hold exactly
        (``too_big``) nulled, each with its reason."""
        out = self.fail(values, bad, "a value that is not a valid decimal")
        if not too_big.any():
            return out
        more = self.fail(out.values, too_big, f"a value that does not fit {self.target} exactly")
        return Decoded(more.values, pc.coalesce(out.reasons, more.reasons))

    def _from_decimals(self, parsed: list[Decimal | bool | None]) -> Decoded:
        """Python decimals (``False`` where the value did not decode) into the target, exactly or not at all."""
        bad = np.array([p is False for p in parsed])
        exact: list = [None if p is None or p is False else p for p in parsed]
        target = self.target
        if pa.types.is_decimal(target):
            fits = [codecs.fits_decimal(p, target) for p in exact]
            too_big = np.array([p is not None and not ok for p, ok in zip(exact, fits)])
            kept = [p if ok else None for p, ok in zip(exact, fits)]
            return self._exact(pa.array(kept, target), bad, too_big)
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

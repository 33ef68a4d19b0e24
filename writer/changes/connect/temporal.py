"""Dates, times of day and timestamps of change events, from each of Debezium's and Kafka Connect's encodings
(the table in ``values``), or by the declared type and ``source.debezium.timestamp_unit`` when the event carries no
schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.writer.changes.connect import codecs as codecs
from laketide.writer.changes.connect.column import ColumnBase, Decoded
from laketide.writer.changes.connect.schema import (
    DAY_UNITS,
    DAYS,
    ISO_DATES,
    ISO_TIMES,
    ISO_TIMESTAMPS,
)

# the years an integer timestamp of an event without its schema may fall in (``TemporalColumn._plausible``)
PLAUSIBLE_YEARS = (1900, 2200)
TOO_FINE_BELOW = 59 * 86_400_000_000  # 1970-03-01: a ms timestamp of 1990-2100 read as µs falls before it


class TemporalColumn(ColumnBase):
    """A column's decoding into DATE, TIME and TIMESTAMP targets."""

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
                    stamps = TemporalColumn(self.name, None, pa.timestamp("us", "UTC"), self.decoding)._iso_timestamps(
                        values
                    )
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

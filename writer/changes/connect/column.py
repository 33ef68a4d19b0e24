"""What decoding a column of change events rests on: how values without a schema are read (``Decoding``), a column
decoded (``Decoded``), and a column's name, encoding and target type with the ways a value fails (``ColumnBase``).
The types themselves are decoded in ``temporal`` (dates, times, timestamps) and ``values`` (the rest)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.config import DebeziumSection
from laketide.writer.changes.connect.schema import EPOCH_UNITS, Encoding


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


class ColumnBase:
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

    def _reworded(self, decoded: Decoded, what: str) -> pa.Array:
        reason = f"column '{self.name}': {what} (encoding: {self.described})"
        return pc.if_else(pc.is_valid(decoded.reasons), pa.scalar(reason), pa.scalar(None, pa.string()))

"""Instants: one action on the timeline at one time, in one state.

An instant time is ``yyyyMMddHHmmssSSS`` in UTC. Readers compare instant times
as strings, so every instant laketide creates has all 17 digits and is
strictly greater than every instant before it.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from laketide.table.errors import Invalid

COMMIT = "commit"
DELTA_COMMIT = "deltacommit"
REPLACE_COMMIT = "replacecommit"
ROLLBACK = "rollback"
CLEAN = "clean"
COMPACTION = "compaction"
RESTORE = "restore"
SAVEPOINT = "savepoint"
WRITE_ACTIONS = frozenset({COMMIT, DELTA_COMMIT, REPLACE_COMMIT})


class Action(StrEnum):
    """Every action a Hudi timeline holds (a filter's choices in the API)."""

    COMMIT = COMMIT
    DELTACOMMIT = DELTA_COMMIT
    REPLACECOMMIT = REPLACE_COMMIT
    ROLLBACK = ROLLBACK
    CLEAN = CLEAN
    COMPACTION = COMPACTION
    RESTORE = RESTORE
    SAVEPOINT = SAVEPOINT
    INDEXING = "indexing"
    LOGCOMPACTION = "logcompaction"
    CLUSTERING = "clustering"


KNOWN_ACTIONS = frozenset(action.value for action in Action)

_FORMAT = "%Y%m%d%H%M%S"
_NAME = re.compile(r"^(\d{17}|\d{14})(?:_(\d{17}|\d{14}))?\.([a-z]+)(?:\.(requested|inflight))?$")
INSTANT_TIME = re.compile(r"^\d{17}$")


class State(StrEnum):
    REQUESTED = "REQUESTED"
    INFLIGHT = "INFLIGHT"
    COMPLETED = "COMPLETED"

    @property
    def rank(self) -> int:
        return list(State).index(self)


@dataclass(frozen=True)
class Instant:
    timestamp: str
    action: str
    state: State
    completion_time: str | None = None

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def is_write(self) -> bool:
        return self.action in WRITE_ACTIONS

    def file_name(self, layout_version: int = 1) -> str:
        if self.state is State.REQUESTED:
            return f"{self.timestamp}.{self.action}.requested"
        if self.state is State.INFLIGHT:
            return f"{self.timestamp}.inflight" if self.action == COMMIT else f"{self.timestamp}.{self.action}.inflight"
        if layout_version >= 2:
            return f"{self.timestamp}_{self.completion_time}.{self.action}"
        return f"{self.timestamp}.{self.action}"

    @classmethod
    def parse_file_name(cls, name: str, layout_version: int = 1) -> Instant | None:
        """The instant a timeline file stands for, or None for any other file."""
        m = _NAME.match(name)
        if not m:
            return None
        ts, completion, action, state = m.groups()
        if action == "inflight" and state is None:
            return cls(ts, COMMIT, State.INFLIGHT)
        if action not in KNOWN_ACTIONS:
            return None
        if state:
            return None if completion else cls(ts, action, State(state.upper()))
        if (layout_version >= 2) != (completion is not None):
            return None
        return cls(ts, action, State.COMPLETED, completion)

    def with_state(self, state: State, completion_time: str | None = None) -> Instant:
        return Instant(self.timestamp, self.action, state, completion_time)


def instant_to_datetime(ts: str) -> datetime:
    base = datetime.strptime(ts[:14], _FORMAT).replace(tzinfo=UTC)
    millis = int(ts[14:17] or 0)
    return base.replace(microsecond=millis * 1000)


def _epoch_ms(ts: str) -> int:
    return int(instant_to_datetime(ts).timestamp() * 1000)


def format_epoch_ms(ms: int) -> str:
    """The instant time of a moment in milliseconds since the epoch (UTC)."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime(_FORMAT) + f"{ms % 1000:03d}"


def validate_instant_time(ts: str) -> str:
    if not INSTANT_TIME.match(ts):
        raise Invalid(f"instant time must be 17 digits yyyyMMddHHmmssSSS, got {ts!r}")
    try:
        instant_to_datetime(ts)
    except ValueError:
        raise Invalid(f"instant time {ts!r} is not a date and time (yyyyMMddHHmmssSSS)") from None
    return ts


_DATETIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d")


def parse_instant_time(value: str | int | datetime) -> str:
    """A point in time as a 17-digit instant time (UTC), from any form Hudi's readers accept.

    Instant times of 17 or 14 digits; ``yyyy-MM-dd[ HH:mm:ss[.SSS]]`` (Hudi's
    ``as.of.instant`` forms, in the timeline's UTC); ISO 8601 / RFC 3339 with an
    offset; epoch seconds (10 digits) or milliseconds (13 digits), as hudi-rs takes them.
    """
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return format_epoch_ms(int(moment.timestamp() * 1000))
    text = str(value).strip()
    if text.isdigit():
        if len(text) in (17, 14):
            return validate_instant_time(text.ljust(17, "0"))
        if len(text) in (10, 13):
            return format_epoch_ms(int(text) * (1000 if len(text) == 10 else 1))
    for fmt in _DATETIME_FORMATS:
        try:
            return parse_instant_time(datetime.strptime(text, fmt))
        except ValueError:
            pass
    try:
        return parse_instant_time(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    raise Invalid(
        f"{value!r} is not a point in time; use an instant (yyyyMMddHHmmssSSS or yyyyMMddHHmmss), "
        "'yyyy-MM-dd HH:mm:ss[.SSS]', 'yyyy-MM-dd', ISO 8601 with an offset, or epoch seconds or milliseconds"
    )


class InstantClock:
    """Hands out instant times that strictly increase, even within one millisecond.

    When the wall clock has not moved past the last instant (or past the
    newest instant on the timeline, passed as ``after``), the next time is the
    last one plus one millisecond.
    """

    def __init__(self, now_ms=lambda: time.time_ns() // 1_000_000):
        self._now_ms = now_ms
        self._last_ms = 0
        self._lock = threading.Lock()

    def next(self, after: str | None = None) -> str:
        with self._lock:
            floor = max(self._last_ms, _epoch_ms(after) if after else 0)
            self._last_ms = max(self._now_ms(), floor + 1)
            return format_epoch_ms(self._last_ms)

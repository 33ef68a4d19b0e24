"""Where a table's change feed stands in its database's log, kept with the table, and the events that went back.

Under ``source.debezium.ordering = "position"`` an event's place in the database's log orders it against the
stored row of its key. A log that goes back (a MySQL failover to a server whose binlog numbers are lower,
``RESET MASTER``, a Postgres replica promoted behind its primary or a restored backup) makes every later event
look older than the rows it follows: ordered by position, each is dropped as late. So each commit records, per
stream of events (a Kafka partition, or ``files`` for landing files, each in its log's order), the newest point
of the log it saw (``LOG_KEY``), and every micro-batch, in any run, is checked against it.

An event has gone back when its point is below the newest one seen before it in its stream **and** its
``ts_ms`` is later than that point's: a connector that sends events again after a restart sends them with
their own, earlier, times, and those are rightly older. For MySQL, it must also come from another server
(``source.server_id``) or a lower binlog file number: a transaction that began earlier than one before it in
the binlog carries the earlier time, and is not a reset. For Postgres the point is the commit LSN of
``source.sequence`` (Debezium 1.4 and later), which rises in the order events are sent; a change's own LSN
does not (a long transaction's changes come after shorter ones that committed first), so events without
``sequence`` are not checked.

What a micro-batch with such events does is ``source.debezium.on_log_reset``: ``stop`` (the default) before
anything is written, naming the points; ``ts_ms`` orders the table's events by commit time from that micro-batch
on (recorded with the table, as ``ordering = "ts_ms"`` would); ``position`` writes them by position, counted.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laketide.table.errors import Invalid

LOG_KEY = "laketide.source.log"
FILES = "files"  # the stream of landing files' events: one, in the files' order

# one event's point in its log: null where the event is not a change, or its log has none to compare
POINT = pa.struct([("position", pa.string()), ("ts_ms", pa.int64()), ("server", pa.string())])


@dataclass(frozen=True)
class LogPoint:
    """A point of a database's log: ``position`` as ``changes.events`` writes it (``m`` binlog file, position,
    row; ``p`` commit LSN, LSN), the source's commit time, and the MySQL server it was written on."""

    position: str
    ts_ms: int
    server: str | None = None

    def describe(self) -> str:
        when = dt.datetime.fromtimestamp(self.ts_ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
        if self.position.startswith("m"):
            place = f"binlog file {int(self.position[1:11])} position {int(self.position[11:31])}"
            server = f" on server {self.server}" if self.server is not None else ""
            return f"{place}{server} at {when}"
        return f"commit LSN {int(self.position[1:21])} at {when}"

    def to_dict(self) -> dict:
        return {"position": self.position, "ts_ms": self.ts_ms, "server": self.server}

    @classmethod
    def from_dict(cls, data: dict) -> LogPoint:
        return cls(data["position"], int(data["ts_ms"]), data.get("server"))


@dataclass(frozen=True)
class FeedLog:
    """What a table has seen of its change feed's log, for decoding the next micro-batch: the ordering its events
    are decoded by (``None``: the decoder's own), and the newest point of each stream."""

    ordering: str | None = None
    points: dict[str, LogPoint] = field(default_factory=dict)


@dataclass
class LogCheck:
    """What a micro-batch's events were checked to hold: how many went back, the first of them (with the point it
    went back from and its stream), and the newest point of each stream after them."""

    behind: int = 0
    first: tuple[str, LogPoint, LogPoint] | None = None  # stream, the event's point, the newest point before it
    newest: dict[str, LogPoint] = field(default_factory=dict)

    def add(self, other: LogCheck) -> LogCheck:
        self.behind += other.behind
        self.first = self.first or other.first
        self.newest = newest_of(self.newest, other.newest)
        return self

    def describe(self) -> str:
        if self.first is None:
            return ""
        stream, point, before = self.first
        where = "landing files" if stream == FILES else f"Kafka partition {stream}"
        return f"{where}: an event at {point.describe()} came after one at {before.describe()}"

    def to_dict(self) -> dict:
        first = None if self.first is None else [self.first[0], self.first[1].to_dict(), self.first[2].to_dict()]
        return {"behind": self.behind, "first": first, "newest": points_json(self.newest)}

    @classmethod
    def from_dict(cls, data: dict) -> LogCheck:
        first = data.get("first")
        return cls(
            int(data.get("behind", 0)),
            None if first is None else (first[0], LogPoint.from_dict(first[1]), LogPoint.from_dict(first[2])),
            points_of(data.get("newest") or {}),
        )


def newest_of(a: dict[str, LogPoint], b: dict[str, LogPoint]) -> dict[str, LogPoint]:
    """Per stream, the higher of the points of ``a`` and ``b`` (parts of one micro-batch, checked apart)."""
    out = dict(a)
    for stream, point in b.items():
        if stream not in out or point.position > out[stream].position:
            out[stream] = point
    return out


def points_json(points: dict[str, LogPoint]) -> dict:
    return {stream: point.to_dict() for stream, point in sorted(points.items())}


def points_of(data: dict) -> dict[str, LogPoint]:
    return {stream: LogPoint.from_dict(point) for stream, point in data.items()}


def commit_value(points: dict[str, LogPoint]) -> str:
    """``LOG_KEY``'s value in a commit's metadata."""
    return json.dumps(points_json(points), sort_keys=True)


def read_commit_value(text: str | None) -> dict[str, LogPoint]:
    if not text:
        return {}
    try:
        return points_of(json.loads(text))
    except (ValueError, KeyError, TypeError):  # written by a later version in another shape: checked afresh
        return {}


def check(points: pa.Array, streams: pa.Array, seen: dict[str, LogPoint]) -> LogCheck:
    """The events at ``points`` (``POINT``), each in the stream ``streams`` names, after what the table has
    ``seen``: those that went back (see the module), and each stream's newest point after them."""
    valid = pc.is_valid(points.field("position")) if len(points) else pa.array([], pa.bool_())
    if not pc.any(valid).as_py():
        return LogCheck(newest=dict(seen))
    points, streams = points.filter(valid), streams.filter(valid)
    out = LogCheck()
    encoded = streams.dictionary_encode()
    places = encoded.indices.to_numpy(zero_copy_only=False)
    for place, stream in enumerate(encoded.dictionary.to_pylist()):
        mine = points.filter(pa.array(places == place))
        out.add(_stream_check(stream, mine, seen.get(stream)))
    out.newest = {**seen, **out.newest}  # a stream's newest after its events, which began from what was seen
    return out


def _stream_check(stream: str, points: pa.Array, seen: LogPoint | None) -> LogCheck:
    """One stream's events, in order, after ``seen``: each compared with the newest (highest) point before it."""
    if seen is not None:
        points = pa.concat_arrays([pa.array([seen.to_dict()], POINT), points])
    positions, servers = points.field("position"), points.field("server")
    if pc.all(pc.greater_equal(positions[1:], positions[:-1])).as_py() is not False:
        # in the log's order, as a stream nearly always is: nothing went back, the last point is the newest
        return LogCheck(newest={stream: LogPoint.from_dict(points[len(points) - 1].as_py())})
    ts = points.field("ts_ms").fill_null(0).to_numpy(zero_copy_only=False)
    # each position's dense rank, and where each rank first came (equal positions are one event sent again)
    rank = pc.rank(positions, sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64) - 1
    order = np.argsort(rank, kind="stable")
    first_of = order[np.unique(rank[order], return_index=True)[1]]
    before = np.concatenate([[-1], np.maximum.accumulate(rank)[:-1]])  # the newest rank before each event
    at = first_of[np.maximum(before, 0)]
    behind = (before >= 0) & (rank < before) & (ts > ts[at])
    # MySQL: the same server and binlog file is no reset (see the module)
    newest_before = pa.array(at)
    file = pc.utf8_slice_codeunits(positions, 0, 11)
    same_file = pc.equal(file, file.take(newest_before))
    same_server = pc.fill_null(pc.equal(servers, servers.take(newest_before)), False)
    mysql = pc.starts_with(positions, "m")
    behind &= ~pc.and_(pc.and_(mysql, same_server), same_file).to_numpy(zero_copy_only=False)
    hits = np.nonzero(behind[1:] if seen is not None else behind)[0] + (1 if seen is not None else 0)
    # a log that went back goes on from there: its newest point is the newest from the first event that went back
    start = int(hits[0]) if len(hits) else 0
    top = start + int(np.argmax(rank[start:]))
    out = LogCheck(len(hits), newest={stream: LogPoint.from_dict(points[top].as_py())})
    if len(hits):
        out.first = (
            stream,
            LogPoint.from_dict(points[start].as_py()),
            LogPoint.from_dict(points[int(at[start])].as_py()),
        )
    return out


class LogWentBack(Invalid):
    """Change events whose place in the database's log went back, under ``on_log_reset = "stop"`` (exit code 2):
    nothing of the micro-batch was written."""

    @classmethod
    def of(cls, batch_id: int, checked: LogCheck, table_uri: str) -> LogWentBack:
        return cls(
            f"micro-batch {batch_id}: {checked.behind} change events for table {table_uri} come after newer points "
            f"of their database's log ({checked.describe()}): the log went back (a failover to another server, "
            "RESET MASTER, a restored or promoted replica). Ordered by position they would be dropped as older "
            "than the rows they follow. Nothing of this micro-batch was written. Ways out: "
            "source.debezium.on_log_reset = 'ts_ms' orders this table's events by their commit time from this "
            "micro-batch on (kept with the table); source.debezium.ordering = 'ts_ms' does so from the start; "
            "on_log_reset = 'position' writes them by position, each older than its stored row dropped as late"
        )

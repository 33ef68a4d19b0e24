"""The job's health at a glance, from what it already keeps: its recent micro-batches, failures and backlog.

Pure: ``assess`` takes the reports and the clock and returns ``Health``, so the rules are tested
without a job. The rules, in the order they win:

- **failing**: a failure in the last ``RATE_WINDOW_SECONDS`` (a micro-batch, which stops the job, or
  a table service, which is retried); the summary names it and what to do.
- **behind**: micro-batches take longer than the trigger's interval (Spark's "falling behind"), the
  Kafka lag grew in each of the last three micro-batches, or landing files wait while no micro-batch
  runs for longer than the trigger allows.
- **idle**: nothing to do and nothing waiting; **healthy**: keeping up.

What waits comes with how long it takes at the recent rate (``catch_up``): a Kafka lag by how fast it shrank
over the last minutes (a lag one micro-batch takes whole is one micro-batch away; a lag that does not shrink grows,
and makes the job behind); landing files by the micro-batches they need (``source.max_files_per_trigger`` a
micro-batch, else one) at the recent micro-batch's length, or the trigger's interval when that is longer.

A catalog whose sync fails makes a healthy or idle job **behind**: the commits go on, the entries engines find
the table by lag behind them.
"""

from __future__ import annotations

import itertools
import time

from laketide.config.types import trigger_seconds
from laketide.writer.job.views import CatalogView, Health
from laketide.writer.report import Backlog, BatchReport, Failure

RATE_WINDOW_SECONDS = 300  # the rates, and how long a failure counts against the job's health


def _rates(done: list[BatchReport], now: float) -> tuple[float | None, float | None]:
    window = [r for r in done if r.ended_at and now - r.ended_at <= RATE_WINDOW_SECONDS]
    if not window:
        return None, None
    records = sum(r.records for r in window)
    span = now - min(r.ended_at - r.seconds for r in window)
    busy = sum(r.seconds for r in window)
    return round(records / span, 1) if span > 0 else None, round(records / busy, 1) if busy > 0 else None


def _kafka_backlog(done: list[BatchReport], now: float) -> Backlog | None:
    last = done[-1] if done else None
    if last is None or not last.lag:
        return None
    return Backlog(records=sum(last.lag.values()), age_seconds=round(now - last.ended_at, 1) if last.ended_at else None)


def spoken(seconds: float) -> str:
    """A length of time as people say it: ``40 s``, ``12 min``, ``3 h``, ``2 d``."""
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def catch_up(
    backlog: Backlog | None, done: list[BatchReport], interval: float | None, files_per_batch: int | None, now: float
) -> Backlog | None:
    """``backlog`` with how long it takes to write at the recent rate (``done``: the written micro-batches,
    oldest first; ``files_per_batch``: a landing source's cap on the files a micro-batch takes)."""
    if backlog is None or not done:
        return backlog
    cycle = max(_recent_seconds(done), interval or 0.0)
    if backlog.records is not None:
        return _kafka_catch_up(backlog, done, cycle, now)
    if backlog.files:
        batches = -(-backlog.files // files_per_batch) if files_per_batch else 1
        return backlog.model_copy(update={"catch_up_seconds": round(batches * cycle, 1)})
    return backlog


def _kafka_catch_up(backlog: Backlog, done: list[BatchReport], cycle: float, now: float) -> Backlog:
    """A lag's catch-up from how fast it shrank between the first and the last micro-batch of the rate window."""
    lag = backlog.records or 0
    if lag <= max(r.records for r in done[-3:]):
        return backlog.model_copy(update={"catch_up_seconds": round(cycle, 1) if lag else 0.0})
    points = [(r.ended_at, sum(r.lag.values())) for r in done if r.lag and now - r.ended_at <= RATE_WINDOW_SECONDS]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return backlog
    shrank = (points[0][1] - points[-1][1]) / (points[-1][0] - points[0][0])
    if shrank > 0:
        return backlog.model_copy(update={"catch_up_seconds": round(lag / shrank, 1), "rate": round(shrank, 1)})
    return backlog.model_copy(update={"growing": True, "rate": round(-shrank, 1)})


def _recent_seconds(done: list[BatchReport]) -> float:
    """The median length of the last three written micro-batches (of fewer, while there are fewer)."""
    recent = sorted(r.seconds for r in done[-3:])
    return recent[len(recent) // 2]


def _lag_growing(done: list[BatchReport]) -> bool:
    lags = [sum(r.lag.values()) for r in done[-4:] if r.lag]
    return len(lags) == 4 and all(b > a for a, b in itertools.pairwise(lags))


def assess(
    recent: list[BatchReport],
    failures: list[Failure],
    trigger: str | None,
    landing: Backlog | None,
    running_batch: bool,
    last_commit_at: float | None,
    now: float | None = None,
    catalog: CatalogView | None = None,
    files_per_batch: int | None = None,
) -> Health:
    """``landing``: a landing source's backlog (``None`` for Kafka and the generator); ``running_batch``: a
    micro-batch is in progress now; ``last_commit_at``: the newest completed write's time (epoch seconds);
    ``catalog``: where the catalog's entries stand, when the job keeps some; ``files_per_batch``: a landing source's
    ``max_files_per_trigger``."""
    now = time.time() if now is None else now
    done = [r for r in recent if not r.skipped and not r.empty]
    interval = trigger_seconds(trigger)
    input_rate, processing_rate = _rates(done, now)
    backlog = catch_up(landing or _kafka_backlog(done, now), done, interval, files_per_batch, now)
    slow = interval is not None and len(done) >= 3 and _recent_seconds(done) > interval
    stalled = (
        bool(landing and landing.files)
        and not running_batch
        and bool(done)
        and now - done[-1].ended_at > (interval or 0) + 30
    )
    behind = slow or _lag_growing(done) or stalled or bool(backlog and backlog.growing)
    fresh = [f for f in failures if now - f.at <= RATE_WINDOW_SECONDS]
    health = Health(
        state="healthy",
        summary="keeping up",
        last_commit_seconds_ago=round(now - last_commit_at, 1) if last_commit_at else None,
        input_rate=input_rate,
        processing_rate=processing_rate,
        falling_behind=behind,
        backlog=backlog,
        last_error=f"{failures[-1].what}: {failures[-1].error}" if failures else None,
    )
    if fresh:
        last = fresh[-1]
        health.state = "failing"
        health.summary = (
            f"{len(fresh)} failure{'s' if len(fresh) > 1 else ''} in the last {RATE_WINDOW_SECONDS // 60} "
            "minutes, the last of "
            f"{last.what}: {last.error}. A table service is retried after each micro-batch; the log has the traceback"
        )
    elif behind:
        health.state = "behind"
        health.summary = _behind_summary(slow, stalled, interval, done, backlog)
    elif not running_batch and not (backlog and (backlog.files or backlog.records)):
        health.state, health.summary = "idle", "nothing waiting: the job waits for data"
    elif backlog and backlog.files and not running_batch:
        health.summary = (
            f"keeping up; {backlog.files} landing file{'s' if backlog.files != 1 else ''} wait for the next micro-batch"
        )
        if files_per_batch and backlog.files > files_per_batch and backlog.catch_up_seconds is not None:
            health.summary += (
                f", written in about {spoken(backlog.catch_up_seconds)} at {files_per_batch} a micro-batch"
            )
    elif backlog and backlog.rate and backlog.catch_up_seconds is not None:
        health.summary = (
            f"catching up: {backlog.records:,} records wait in Kafka, written in about "
            f"{spoken(backlog.catch_up_seconds)} at the last minutes' rate (the lag shrinks by {backlog.rate:,.0f} "
            "records a second)"
        )
    if catalog is not None and catalog.failing_since is not None and health.state in ("healthy", "idle"):
        health.state, health.summary = "behind", _catalog_summary(catalog, now)
    return health


def _catalog_summary(catalog: CatalogView, now: float) -> str:
    since = now - (catalog.failing_since or now)
    at = f"stand at {catalog.synced}" if catalog.synced else "are not made yet"
    return (
        f"the commits go on, but the {catalog.catalog} catalog has failed {catalog.failures} sync"
        f"{'s' if catalog.failures != 1 else ''} over {since:.0f} s ({catalog.last_error}): the entries of "
        f"{catalog.database}.{catalog.table} {at}. They catch up when it answers (next try in "
        f"{catalog.retry_in_seconds or 0:.0f} s)"
    )


def _behind_summary(
    slow: bool, stalled: bool, interval: float | None, done: list[BatchReport], backlog: Backlog | None
) -> str:
    if slow:
        return (
            f"micro-batches take {_recent_seconds(done):.1f} s against a trigger of "
            f"{interval:g} s: the backlog grows. "
            "Give the job more cores or memory, raise the trigger interval, or cap a micro-batch "
            "(source.max_files_per_trigger, "
            "source.kafka.max_offsets_per_trigger) so each takes less"
        )
    if stalled and backlog is not None:
        return (
            f"{backlog.files} landing file{'s' if backlog.files != 1 else ''} "
            f"wait{'' if backlog.files != 1 else 's'} and no micro-batch "
            "has started: check the job's log for a stuck stage or a source error"
        )
    grows = (
        f" ({backlog.records:,} wait, {backlog.rate:,.0f} a second more than are written)"
        if backlog is not None and backlog.growing and backlog.rate
        else ""
    )
    return (
        "the Kafka lag grows: the job reads slower than the topics fill"
        f"{grows}. Give the job more cores, or a larger source.kafka.max_offsets_per_trigger, so a micro-batch's "
        "fixed cost is spread over more records"
    )

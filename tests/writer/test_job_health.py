"""The health rules (``writer/job/health.py``), on made-up micro-batch reports: pure logic, no job."""

from __future__ import annotations

from laketide.config.types import trigger_seconds
from laketide.writer.job.health import RATE_WINDOW_SECONDS, assess
from laketide.writer.report import Backlog, BatchReport, Failure

NOW = 1_800_000_000.0


def batches(
    seconds: list[float], every: float = 10.0, records: int = 1000, lag: list[int] | None = None
) -> list[BatchReport]:
    """Micro-batches ending ``every`` seconds apart, the last just now."""
    return [
        BatchReport(
            batch_id=n,
            instant=f"2027011500000{n:04d}",
            records=records,
            seconds=s,
            ended_at=NOW - every * (len(seconds) - 1 - n),
            lag={"t/0": lag[n]} if lag else {},
        )
        for n, s in enumerate(seconds)
    ]


def test_trigger_intervals():
    assert (
        trigger_seconds("10 seconds") == 10
        and trigger_seconds("500 milliseconds") == 0.5
        and trigger_seconds("2 minutes") == 120
    )
    assert trigger_seconds("available-now") is None and trigger_seconds(None) is None
    # every form the configuration takes (``parse_trigger``)
    assert (
        trigger_seconds("10s") == 10
        and trigger_seconds("500ms") == 0.5
        and trigger_seconds("1m") == 60
        and trigger_seconds("2 HOURS") == 7200
    )


def test_keeping_up_then_idle_with_rates_and_the_last_commits_age():
    health = assess(
        batches([1.0, 1.0, 1.0]), [], "10 seconds", Backlog(files=2, bytes=10, age_seconds=3), False, NOW - 4, NOW
    )
    assert health.state == "healthy" and "2 landing files wait" in health.summary and not health.falling_behind
    assert health.last_commit_seconds_ago == 4 and health.processing_rate == 1000.0 and 0 < health.input_rate < 1000
    idle = assess(batches([1.0, 1.0]), [], "10 seconds", Backlog(files=0, bytes=0), False, NOW, NOW)
    assert idle.state == "idle" and "waits for data" in idle.summary


def test_slower_than_the_trigger_is_behind_and_says_what_to_do():
    health = assess(batches([12.0, 14.0, 13.0], every=14), [], "10 seconds", None, True, NOW, NOW)
    assert health.state == "behind" and health.falling_behind and "13.0 s against a trigger of 10 s" in health.summary
    assert "max_files_per_trigger" in health.summary


def test_a_kafka_lag_that_keeps_growing_is_behind():
    health = assess(batches([1.0] * 4, lag=[10, 20, 30, 40]), [], "10 seconds", None, False, NOW, NOW)
    assert health.state == "behind" and health.backlog.records == 40 and health.backlog.age_seconds == 0
    shrinking = assess(batches([1.0] * 4, lag=[40, 30, 20, 10]), [], "10 seconds", None, False, NOW, NOW)
    assert shrinking.state == "healthy"


def test_files_waiting_while_no_micro_batch_starts_is_behind():
    health = assess(
        batches([1.0], every=10),
        [],
        "10 seconds",
        Backlog(files=3, bytes=1, age_seconds=120),
        False,
        NOW - 100,
        NOW + 100,
    )
    assert health.state == "behind" and "3 landing files wait and no micro-batch has started" in health.summary


def test_a_recent_failure_wins_and_an_old_one_is_only_the_last_error():
    failure = Failure(at=NOW - 5, what="clean", instant="20270115000000001", error="OSError: disk full")
    health = assess(batches([1.0]), [failure], "10 seconds", None, False, NOW, NOW)
    assert (
        health.state == "failing"
        and "clean: OSError: disk full" in health.summary
        and health.last_error == "clean: OSError: disk full"
    )
    old = failure.model_copy(update={"at": NOW - RATE_WINDOW_SECONDS - 1})
    later = assess(batches([1.0]), [old], "10 seconds", None, False, NOW, NOW)
    assert later.state == "idle" and later.last_error == "clean: OSError: disk full"


def test_the_job_state_says_running_then_failed_with_the_error_and_a_stale_writer_says_nothing(tmp_path):
    from laketide.coordinator.lease import LeaseLost
    from laketide.table import FileIO
    from laketide.writer.job.state import JobState, JobStateRecorder

    io = FileIO.for_uri(str(tmp_path))
    held = [True]

    def hold():
        if not held[0]:
            raise LeaseLost("taken over")

    recorder = JobStateRecorder(io, hold, JobState(state="running", writer_id="w", started_at=NOW, updated_at=NOW))
    recorder.started()
    assert JobState.read(io).state == "running"
    recorder.committed(3, "20270115000000003")
    recorder.ended(OSError("No space left on device\nmore"))
    failed = JobState.read(io)
    assert failed.state == "failed" and failed.error == "OSError: No space left on device" and failed.last_batch == 3
    held[0] = False
    recorder.ended()
    assert JobState.read(io).state == "failed", "a writer without the lease does not speak over the new holder"
    io.write_atomic(".hoodie/.laketide/job.json", b"{broken", overwrite=True)
    assert JobState.read(io) is None


def test_a_shrinking_lag_says_when_it_is_written_and_a_growing_one_is_behind():
    # 10 s apart, 1,000 records each; the lag shrank by 40,000 in 30 s
    draining = assess(
        batches([1.0] * 4, lag=[100_000, 80_000, 70_000, 60_000]), [], "10 seconds", None, False, NOW, NOW
    )
    backlog = draining.backlog
    assert draining.state == "healthy" and backlog.rate == round(40_000 / 30, 1)
    assert backlog.catch_up_seconds == 45.0 and not backlog.growing
    assert "catching up: 60,000 records wait in Kafka, written in about 45 s" in draining.summary
    growing = assess(batches([1.0] * 4, lag=[50_000, 60_000, 55_000, 65_000]), [], "10 seconds", None, False, NOW, NOW)
    assert growing.state == "behind" and growing.backlog.growing and growing.backlog.catch_up_seconds is None
    assert "65,000 wait, 500 a second more than are written" in growing.summary
    # a lag the next micro-batch takes whole is one micro-batch away, however it moved
    live = assess(batches([2.0] * 4, lag=[10, 400, 20, 900]), [], "10 seconds", None, False, NOW, NOW)
    assert live.state == "healthy" and live.backlog.catch_up_seconds == 10.0 and not live.backlog.growing
    # one micro-batch says nothing of a rate yet
    first = assess(batches([1.0], lag=[60_000]), [], "10 seconds", None, False, NOW, NOW).backlog
    assert first.catch_up_seconds is None and not first.growing


def test_landing_files_take_the_micro_batches_their_cap_allows():
    capped = assess(
        batches([4.0] * 3), [], None, Backlog(files=25, bytes=1, age_seconds=3), False, NOW, NOW, files_per_batch=10
    )
    assert capped.backlog.catch_up_seconds == 12.0 and "written in about 12 s at 10 a micro-batch" in capped.summary
    uncapped = assess(batches([4.0] * 3), [], "10 seconds", Backlog(files=25, bytes=1), False, NOW, NOW)
    assert uncapped.backlog.catch_up_seconds == 10.0  # all in the next micro-batch, which the trigger spaces

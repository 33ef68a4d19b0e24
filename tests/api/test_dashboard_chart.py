"""The micro-batch chart's geometry (pure logic): bars stacked by step to the batch's seconds, the records line, tidy
axes."""

from __future__ import annotations

import pytest

from laketide.api.chart import HEIGHT, STEPS, _round_up, batch_chart
from laketide.writer.report import BatchReport


@pytest.mark.parametrize(
    "value, top", [(0.03, 0.05), (0.33, 0.5), (1.0, 1.0), (1.2, 2.0), (7, 10), (20_000, 20_000), (0, 1.0)]
)
def test_axis_tops_are_1_2_or_5_times_a_power_of_ten(value, top):
    assert _round_up(value) == pytest.approx(top)


def test_each_bar_stacks_its_steps_to_the_batchs_seconds():
    reports = [
        BatchReport(
            0,
            "a",
            records=1000,
            seconds=2.0,
            stage_seconds={"read": 0.5, "write": 1.0, "write_tasks": 1.6},
            ran_on="tasks",
        ),
        BatchReport(
            1,
            "b",
            records=500,
            seconds=0.5,
            stage_seconds={"read": 0.1, "plan": 0.1, "write": 0.2, "commit": 0.05},
            ran_on="driver",
        ),
    ]
    chart = batch_chart(reports)
    first, second = chart.bars
    assert [s.step for s in first.segments] == ["read", "write", "other"], (
        "task seconds are not wall time; the rest is 'other'"
    )
    assert [s.step for s in second.segments] == ["read", "plan", "write", "commit", "other"]
    scale = first.segments[0].height / 0.5
    assert sum(s.height for s in first.segments) == pytest.approx(2.0 * scale, abs=0.05)
    assert sum(s.height for s in second.segments) == pytest.approx(0.5 * scale, abs=0.05)
    assert first.segments[-1].y + first.segments[-1].height <= HEIGHT
    assert (first.ran_on, second.ran_on) == ("tasks", "driver") and "micro-batch 1" in second.title
    assert len(chart.records_points.split()) == 2 and chart.seconds_ticks[-1][1] == "2 s"
    assert set(STEPS) >= {s.step for b in chart.bars for s in b.segments} - {"other"}


def test_no_reports_no_bars():
    assert batch_chart([]).bars == []


def test_runs_of_cleans_fold_into_one_row_of_the_timeline_panel():
    from laketide.api.ui import _folded_cleans
    from laketide.table.inspect.timeline import TimelineRow

    def row(instant: str, kind: str, state: str = "COMPLETED") -> TimelineRow:
        return TimelineRow(instant=instant, action="commit" if kind == "compaction" else kind, kind=kind, state=state)

    rows = [
        row("9", "deltacommit"),
        row("8", "clean"),
        row("7", "clean"),
        row("6", "clean"),
        row("5", "compaction"),
        row("4", "clean"),
        row("3", "clean", "INFLIGHT"),
        row("2", "clean"),
    ]
    shown = _folded_cleans(rows)
    assert [r.instant if not isinstance(r, list) else [c.instant for c in r] for r in shown] == [
        "9",
        ["8", "7", "6"],
        "5",
        "4",
        "3",
        "2",
    ]

"""The micro-batch chart's geometry: a stacked bar per micro-batch (its seconds, split by step) and a line of
its records, drawn as SVG by the dashboard's template. Pure: reports in, shapes out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from laketide.writer.report import BatchReport

# the wall-clock steps of a micro-batch, in the order they run (``writer/clock.py``); "*_tasks" are summed task seconds
STEPS = ("read", "quarantine", "plan", "write", "commit", "services")
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 200, 44, 56, 10, 22


@dataclass(frozen=True)
class Segment:
    step: str
    y: float
    height: float


@dataclass(frozen=True)
class Bar:
    batch_id: int
    x: float
    width: float
    ran_on: str
    title: str
    segments: list[Segment]


@dataclass(frozen=True)
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    bars: list[Bar] = field(default_factory=list)
    records_points: str = ""  # the records line, as an SVG polyline's points
    seconds_ticks: list[tuple[float, str]] = field(default_factory=list)  # (y, label)
    records_ticks: list[tuple[float, str]] = field(default_factory=list)
    steps: tuple[str, ...] = STEPS
    baseline: float = HEIGHT - BOTTOM


def _title(r: BatchReport) -> str:
    steps = ", ".join(f"{k} {v:.2f}s" for k, v in r.stage_seconds.items() if not k.endswith("_tasks"))
    state = (
        " (empty)" if r.empty else " (replayed, skipped)" if r.skipped else " (rolled back)" if r.rolled_back else ""
    )
    return (
        f"micro-batch {r.batch_id}{state}: instant {r.instant or '-'}, {r.seconds:.2f} s, {r.records:,} records, on "
        f"{r.ran_on}; {steps}"
    )


def _round_up(value: float) -> float:
    """A tidy axis top: 1, 2 or 5 times a power of ten, at least ``value``."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale >= value)


def batch_chart(reports: list[BatchReport]) -> Chart:
    """The chart of ``reports`` (oldest first): seconds stacked by step, records as a line."""
    if not reports:
        return Chart()
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top_s = _round_up(max(r.seconds for r in reports))
    top_r = _round_up(max(r.records for r in reports))
    slot = plot_w / len(reports)
    bars, points = [], []
    for i, r in enumerate(reports):
        x = LEFT + i * slot
        y = float(HEIGHT - BOTTOM)
        segments = []
        steps = {k: v for k, v in r.stage_seconds.items() if not k.endswith("_tasks")}
        other = max(0.0, r.seconds - sum(steps.values()))
        for step, seconds in [*((s, steps.get(s, 0.0)) for s in STEPS), ("other", other)]:
            h = seconds / top_s * plot_h
            if h > 0:
                y -= h
                segments.append(Segment(step, round(y, 2), round(h, 2)))
        width = min(max(slot * 0.8, 1.0), 28.0)
        bars.append(Bar(r.batch_id, round(x + (slot - width) / 2, 2), round(width, 2), r.ran_on, _title(r), segments))
        points.append(f"{x + slot / 2:.1f},{HEIGHT - BOTTOM - r.records / top_r * plot_h:.1f}")
    ticks = [(HEIGHT - BOTTOM - f * plot_h, f * top_s) for f in (0, 0.5, 1)]
    return Chart(
        bars=bars,
        records_points=" ".join(points),
        seconds_ticks=[(round(y, 1), f"{v:g} s") for y, v in ticks],
        records_ticks=[(round(y, 1), f"{f * top_r:,.0f}") for (y, _), f in zip(ticks, (0, 0.5, 1))],
    )

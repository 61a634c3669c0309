"""Small inline SVG charts: a sparkline for one case's errors, a line chart for speedups, stacked
bars for verdict counts per run.

Hand-written so the report needs no plotting library and no script to draw; every text that
reaches the markup is escaped.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")

# Errors span many decades (1e-7 when right, 1e-1 when a replay used stale constants): the
# sparkline's y axis is log10, and an exact zero is drawn at this floor.
ERROR_FLOOR = 1e-12


def _log(value: float) -> float:
    return math.log10(max(value, ERROR_FLOOR))


def _scale(lo: float, hi: float, out_lo: float, out_hi: float):
    span = hi - lo or 1.0
    return lambda v: out_lo + (v - lo) / span * (out_hi - out_lo)


def sparkline(
    points: list[tuple[int, float]],
    x_range: tuple[int, int],
    reference: float | None,
    width: int = 180,
    height: int = 36,
    label: str = "",
) -> str:
    """Errors over runs on a log axis; `reference` (the tolerance) as a dashed line."""
    ys = [_log(v) for _, v in points] + ([_log(reference)] if reference else [])
    x = _scale(x_range[0], x_range[1], 4, width - 4)
    y = _scale(min(ys) - 0.5, max(ys) + 0.5, height - 3, 3)
    parts = [
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(label)}">'
    ]
    if reference:
        ty = y(_log(reference))
        parts.append(
            f'<line x1="0" x2="{width}" y1="{ty:.1f}" y2="{ty:.1f}" class="tol">'
            f"<title>tolerance {reference:.3g}</title></line>"
        )
    coords = [(x(i), y(_log(v)), i, v) for i, v in points]
    if len(coords) > 1:
        path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy, _, _ in coords)
        parts.append(f'<polyline points="{path}" class="line"/>')
    for cx, cy, i, v in coords:
        kind = "over" if reference is not None and v > reference else "dot"
        parts.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.5" class="{kind}">'
            f"<title>run #{i + 1}: {v:.3g}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _ticks(hi: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least `hi`."""
    raw = hi / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [step * k for k in range(count + 2) if step * (k - 1) < hi]


def _y_axis(ticks, y, xs: tuple[int, int], ys: tuple[int, int], label: str) -> list[str]:
    """Grid lines with their tick values, and the axis label turned upright."""
    parts = [
        f'<line x1="{xs[0]}" x2="{xs[1]}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" class="grid"/>'
        f'<text x="{xs[0] - 6}" y="{y(tick) + 4:.1f}" class="ytick">{tick:g}</text>'
        for tick in ticks
    ]
    middle = (ys[0] + ys[1]) / 2
    parts.append(
        f'<text x="14" y="{middle:.0f}" class="ylabel" transform="rotate(-90 14 {middle:.0f})">'
        f"{escape(label)}</text>"
    )
    return parts


def line_chart(
    series: dict[str, list[tuple[int, float]]],
    x_labels: dict[int, str],
    title: str,
    y_label: str,
    baseline: float | None = None,
    width: int = 720,
    height: int = 260,
) -> str:
    """Several named series over shared x positions (run indexes), with a legend; `baseline`
    draws a dashed horizontal line (speedup 1: capture no faster than eager)."""
    left, right, top, bottom = 56, 16, 28, 48
    xs = sorted(x_labels)
    values = [v for pts in series.values() for _, v in pts] + ([baseline] if baseline else [])
    ticks = _ticks(max(values))
    x = (
        _scale(xs[0], xs[-1], left + 8, width - right - 8)
        if len(xs) > 1
        else (lambda _: (left + width - right) / 2)
    )
    y = _scale(0, ticks[-1], height - bottom, top)
    parts = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="16" class="title">{escape(title)}</text>',
    ]
    parts += _y_axis(ticks, y, (left, width - right), (top, height - bottom), y_label)
    every = max(1, math.ceil(len(xs) / 12))
    for n, i in enumerate(xs):
        if n % every == 0 or i == xs[-1]:
            parts.append(
                f'<text x="{x(i):.1f}" y="{height - bottom + 16}" class="xtick">'
                f"{escape(x_labels[i])}</text>"
            )
    if baseline:
        by = y(baseline)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{by:.1f}" y2="{by:.1f}" class="baseline"/>'
        )
    legend_x = left
    for (name, points), color in zip(series.items(), PALETTE * 4, strict=False):
        coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in points)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        for i, v in points:
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">'
                f"<title>{escape(name)}, run {escape(x_labels[i])}: {v:.2f}x</title>"
                f"</circle>"
            )
        legend_x = _legend_entry(parts, legend_x, height, f'fill="{color}"', name)
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars(
    bars: list[tuple[tuple[str, ...], str, dict[str, int]]],
    kinds: dict[str, str],
    title: str,
    y_label: str,
    flagged: tuple[str, ...] = (),
    width: int = 720,
    height: int = 240,
) -> str:
    """One bar per x position, stacked by kind (bottom up, in `kinds` order; class ``k-KIND``
    colours a segment). Each bar is (x label lines, tooltip heading, count per kind); as many x
    labels are drawn as fit side by side, each line of a label below the last. The `flagged`
    kinds' total is written above each bar where it is not zero (a handful of failures among
    thousands of passes is a sliver), while bars are wide enough for it."""
    left, right, top, bottom = 56, 16, 28, 62
    ticks = _ticks(max([sum(counts.values()) for _, _, counts in bars] + [1]))
    y = _scale(0, ticks[-1], height - bottom, top)
    slot = (width - left - right) / max(len(bars), 1)
    bar = max(slot * 0.7, 1.0)
    parts = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="16" class="title">{escape(title)}</text>',
    ]
    parts += _y_axis(ticks, y, (left, width - right), (top, height - bottom), y_label)
    widest = max((len(line) for label, _, _ in bars for line in label), default=0) * 6.5 + 10
    every = max(1, math.ceil(widest / slot))  # labels that do not overlap
    for n, (label, heading, counts) in enumerate(bars):
        cx = left + slot * (n + 0.5)
        base = 0
        for kind, name in kinds.items():
            count = counts.get(kind, 0)
            if count:
                parts.append(
                    f'<rect x="{cx - bar / 2:.1f}" y="{y(base + count):.1f}" width="{bar:.1f}" '
                    f'height="{y(base) - y(base + count):.1f}" class="k-{escape(kind)}">'
                    f"<title>{escape(heading)}: {count} {escape(name)}</title></rect>"
                )
            base += count
        flags = sum(counts.get(kind, 0) for kind in flagged)
        if flags and slot >= 16:
            parts.append(f'<text x="{cx:.1f}" y="{y(base) - 4:.1f}" class="flag">{flags}</text>')
        last = len(bars) - 1
        if n == last or (n % every == 0 and last - n >= every):
            lines = "".join(
                f'<tspan x="{cx:.1f}" dy="{0 if i == 0 else 13}">{escape(line)}</tspan>'
                for i, line in enumerate(label)
            )
            parts.append(f'<text y="{height - bottom + 16}" class="xtick">{lines}</text>')
    legend_x = left
    for kind, name in kinds.items():
        legend_x = _legend_entry(parts, legend_x, height, f'class="k-{escape(kind)}"', name)
    parts.append("</svg>")
    return "".join(parts)


def _legend_entry(parts: list[str], x: int, height: int, swatch: str, name: str) -> int:
    """A coloured square and its name along the chart's bottom edge; the next entry's x."""
    parts.append(
        f'<rect x="{x}" y="{height - 14}" width="10" height="10" {swatch}/>'
        f'<text x="{x + 14}" y="{height - 5}" class="legend">{escape(name)}</text>'
    )
    return x + 24 + len(name) * 7

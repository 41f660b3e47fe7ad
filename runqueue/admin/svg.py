"""Server-side SVG charts for the dashboard: no JavaScript, nothing fetched.

Two shapes cover the dashboard: stacked horizontal bars (queue depth by
class, latency per class) and stacked columns over time (throughput per
minute). Labels go through ``format_html``; numbers are formatted here.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    name: str
    value: float
    colour: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Bar:
    label: str
    segments: tuple[Segment, ...]

    @property
    def total(self) -> float:
        return sum(s.value for s in self.segments)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.1f}"


def legend(segments: list[tuple[str, str]], *, y: float, x: float = 0) -> SafeString:
    """Coloured swatches with names, in a row."""
    parts = []
    for i, (name, colour) in enumerate(segments):
        left = x + i * 130
        parts.append(
            format_html(
                '<rect x="{}" y="{}" width="10" height="10" fill="{}"/>'
                '<text x="{}" y="{}" font-size="11">{}</text>',
                left,
                y,
                colour,
                left + 14,
                y + 9,
                name,
            )
        )
    return mark_safe("".join(parts))  # noqa: S308 - every part went through format_html


def hbars(bars: list[Bar], *, title: str, unit: str = "", width: int = 520) -> SafeString:
    """Stacked horizontal bars, one row per bar, the total at the end."""
    label_w, row_h, top = 110, 26, 24
    plot_w = width - label_w - 70
    peak = max((b.total for b in bars), default=0) or 1
    height = top + row_h * len(bars) + 30
    rows = []
    for i, bar in enumerate(bars):
        y = top + i * row_h
        x = float(label_w)
        rects = []
        for seg in bar.segments:
            w = plot_w * seg.value / peak
            rects.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
                    "<title>{}: {}{}</title></rect>",
                    f"{x:.1f}",
                    y,
                    f"{w:.1f}",
                    row_h - 8,
                    seg.colour,
                    seg.name,
                    _number(seg.value),
                    unit,
                )
            )
            x += w
        rows.append(
            format_html(
                '<text x="0" y="{}" font-size="12">{}</text>{}'
                '<text x="{}" y="{}" font-size="12">{}{}</text>',
                y + 13,
                bar.label,
                mark_safe("".join(rects)),  # noqa: S308 - built with format_html
                f"{x + 6:.1f}",
                y + 13,
                _number(bar.total),
                unit,
            )
        )
    names = list(dict.fromkeys((s.name, s.colour) for b in bars for s in b.segments))
    return _svg(
        width,
        height,
        title,
        mark_safe("".join(rows)),  # noqa: S308 - built with format_html
        legend(names, y=height - 16) if len(names) > 1 else mark_safe(""),
    )


def columns(
    buckets: list[tuple[str, tuple[Segment, ...]]], *, title: str, width: int = 720
) -> SafeString:
    """Stacked columns over time; labels under the first, middle and last."""
    left, top, plot_h = 40, 24, 140
    plot_w = width - left - 10
    peak = max((sum(s.value for s in segs) for _l, segs in buckets), default=0) or 1
    step = plot_w / max(len(buckets), 1)
    parts = [
        format_html(
            '<text x="0" y="{}" font-size="11">{}</text>'
            '<text x="0" y="{}" font-size="11">0</text>'
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"/>',
            top + 10,
            _number(peak),
            top + plot_h,
            left,
            top + plot_h,
            width - 10,
            top + plot_h,
        )
    ]
    marks = {0, len(buckets) // 2, len(buckets) - 1}
    for i, (label, segments) in enumerate(buckets):
        x = left + i * step
        y = float(top + plot_h)
        for seg in segments:
            h = plot_h * seg.value / peak
            y -= h
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
                    "<title>{} {}: {}</title></rect>",
                    f"{x + 1:.1f}",
                    f"{y:.1f}",
                    f"{max(step - 2, 1):.1f}",
                    f"{h:.1f}",
                    seg.colour,
                    label,
                    seg.name,
                    _number(seg.value),
                )
            )
        if i in marks:
            parts.append(
                format_html(
                    '<text x="{}" y="{}" font-size="11" text-anchor="{}">{}</text>',
                    f"{x + step / 2:.1f}",
                    top + plot_h + 14,
                    "end" if i == len(buckets) - 1 else "start" if i == 0 else "middle",
                    label,
                )
            )
    names = list(dict.fromkeys((s.name, s.colour) for _l, segs in buckets for s in segs))
    height = top + plot_h + 40
    return _svg(
        width,
        height,
        title,
        mark_safe("".join(parts)),  # noqa: S308 - built with format_html
        legend(names, y=height - 12, x=left),
    )


def _svg(width: int, height: int, title: str, body: SafeString, extra: SafeString) -> SafeString:
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="rq-chart" role="img" '
        'aria-label="{}" width="{}" height="{}" viewBox="0 0 {} {}" '
        'font-family="sans-serif"><text x="0" y="14" font-size="13" '
        'font-weight="bold">{}</text>{}{}</svg>',
        title,
        width,
        height,
        width,
        height,
        title,
        body,
        extra,
    )


__all__ = ["Bar", "Segment", "columns", "hbars"]

"""Server-side SVG charts: line charts with axes, ticks, labels and a legend, and an effect-with-interval chart.

Why our own few lines instead of a charting library: the dashboard must work offline (nothing fetched at
view time, no front-end build), pages are rendered on the server, and we need only two kinds of plot — a
metric over training steps, and a backtest effect with its confidence interval. A chart is a ``Markup``
string of SVG placed straight into the page; every piece of text in it (series names, titles, tooltips) is
escaped, and colours are SVG attributes, so it needs neither inline styles nor scripts (the page's Content
Security Policy forbids both).

Ticks follow the 1-2-5 rule over the data range; NaN and infinite values are dropped; a chart with no data
says so instead of drawing empty axes. Colours are the Okabe-Ito palette (distinguishable with colour-vision
deficiencies); dashed lines and hollow markers tell series apart without colour too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MAX_HOVER_POINTS = 60  # tooltips on at most this many points per series, evenly spread (the SVG stays small)


@dataclass
class Series:
    """One line (or set of markers) on a chart: ``points`` are (x, y); non-finite ones are dropped."""

    name: str
    points: Sequence[tuple[float, float]]
    color: str | None = None
    dashed: bool = False
    markers: bool = False
    line: bool = True
    hollow: bool = False

    def clean(self) -> list[tuple[float, float]]:
        out = []
        for x, y in self.points:
            if x is None or y is None:
                continue
            x, y = float(x), float(y)
            if math.isfinite(x) and math.isfinite(y):
                out.append((x, y))
        return sorted(out)


def nice_step(span: float, target: int = 5) -> float:
    """A 1, 2 or 5 × 10^k step that cuts ``span`` into about ``target`` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def ticks(lo: float, hi: float, target: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] (the axis is widened to the outer ticks); ``integer``: steps >= 1."""
    step = nice_step(hi - lo, target)
    if integer:
        step = max(step, 1.0)
    start = math.floor(lo / step + 1e-9) * step
    out, v = [], start
    while v <= hi + step * 1e-6 and len(out) < 50:
        out.append(round(v, 12))
        v += step
    if out[-1] < hi - step * 1e-6:
        out.append(round(out[-1] + step, 12))
    return out


def fmt(v: float, step: float) -> str:
    """A tick label with as many decimals as the step needs (1e4 and up with a thousands separator)."""
    if step >= 1 and abs(v) >= 1e4:
        return f"{v:,.0f}"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 2
    return f"{v:.{min(decimals, 6)}f}"


def _range(values: list[float], lo: float | None, hi: float | None) -> tuple[float, float]:
    a = min(values) if lo is None else lo
    b = max(values) if hi is None else hi
    if lo is None and hi is None and a == b:
        pad = abs(a) * 0.05 or 0.5
        a, b = a - pad, b + pad
    elif a == b:
        b = a + 1.0
    return a, b


def _empty(title: str, message: str, width: int, height: int) -> Markup:
    return Markup(
        f'<svg class="chart chart-empty" role="img" aria-label="{escape(title)}: {escape(message)}" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="12" y="22" class="chart-title">{escape(title)}</text>'
        f'<text x="{width / 2:.0f}" y="{height / 2:.0f}" text-anchor="middle" class="chart-note">{escape(message)}</text>'
        "</svg>")


def _series_svg(s: Series, color: str, pts: list[tuple[float, float]], sx: Callable[[float], float],
                sy: Callable[[float], float], span: tuple[float, float, float], x_label: str, xstep: float) -> list[str]:
    """One series: its path (decimated to the plot's width), then markers, or invisible hover points on a line."""
    x0, x1, pw = span
    out: list[str] = []
    name = escape(s.name)
    if s.line:
        pts = decimate(pts, x0, x1, max(10, pw // 2))
    if s.line and len(pts) > 1:
        d = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(pts))
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"{dash} class="series">'
                   f"<title>{name}</title></path>")
    show = s.markers or not s.line or len(pts) == 1
    every = 1 if show else math.ceil(len(pts) / MAX_HOVER_POINTS)
    r, fill = (3.5 if show else 6), ("white" if s.hollow else color)
    cls = "marker" if show else "hover"
    for x, y in pts[::every]:
        tip = f"{s.name}: {x_label} {fmt(x, xstep if xstep < 1 else 1)}, {_num(y)}"
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{r}" fill="{fill}" stroke="{color}" '
                   f'class="{cls}"><title>{escape(tip)}</title></circle>')
    return out


def _legend_svg(data: list[tuple[int, Series, list[tuple[float, float]]]], legend_rows: list[list[int]],
                left: float) -> list[str]:
    """The legend above the plot: a line (or a marker) in each series' colour and its name, in rows."""
    out: list[str] = []
    for row_i, row in enumerate(legend_rows):
        x = left
        y = 32 + 16 * row_i
        for idx in row:
            _, s, _ = data[idx]
            color = s.color or PALETTE[data[idx][0] % len(PALETTE)]
            dash = ' stroke-dasharray="4 3"' if s.dashed else ""
            if s.line:
                out.append(f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" stroke="{color}" stroke-width="2"{dash}/>')
            else:
                out.append(f'<circle cx="{x + 9}" cy="{y - 4}" r="3.5" fill="{"white" if s.hollow else color}" '
                           f'stroke="{color}"/>')
            out.append(f'<text x="{x + 23}" y="{y}" class="legend">{escape(s.name)}</text>')
            x += 23 + _text_width(s.name) + 14
    return out


def line_chart(series: Sequence[Series], *, title: str, x_label: str = "step", y_label: str = "",
               width: int = 520, height: int = 250, y_min: float | None = None, y_max: float | None = None,
               x_integer: bool = True, empty: str = "no data yet") -> Markup:
    """An SVG line chart: title, legend, y and x axes with ticks and labels, one path per series.

    ``x_integer``: the x values are counts (training steps), so x ticks are whole numbers.
    """
    data = [(i, s, s.clean()) for i, s in enumerate(series)]
    data = [(i, s, pts) for i, s, pts in data if pts]
    if not data:
        return _empty(title, empty, width, height)
    xs = [x for _, _, pts in data for x, _ in pts]
    ys = [y for _, _, pts in data for _, y in pts]
    x0, x1 = _range(xs, None, None)
    y0, y1 = _range(ys, y_min if y_min is not None and y_min <= min(ys) else None,
                    y_max if y_max is not None and y_max >= max(ys) else None)
    yt = ticks(y0, y1, 4)
    xt = ticks(x0, x1, 6, integer=x_integer)
    y0, y1, x0, x1 = yt[0], yt[-1], xt[0], xt[-1]
    ystep, xstep = (yt[1] - yt[0]) if len(yt) > 1 else 1.0, (xt[1] - xt[0]) if len(xt) > 1 else 1.0
    ylabels = [fmt(v, ystep) for v in yt]
    left = 18 + 7 * max(len(s) for s in ylabels) + (14 if y_label else 0)
    legend_rows = _legend_rows([s.name for _, s, _ in data], width - left - 10)
    top = 30 + 16 * len(legend_rows)
    right, bottom = 14, 40
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f"<title>{escape(title)}</title>",
           f'<text x="{left}" y="18" class="chart-title">{escape(title)}</text>']
    for v, label in zip(yt, ylabels):
        y = sy(v)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{escape(label)}</text>')
    for v in xt:
        x = sx(v)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph}" y2="{top + ph + 4}" class="axis"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle" class="tick">{escape(fmt(v, xstep))}</text>')
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" class="axis"/>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" class="axis"/>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle" class="axis-label">'
               f"{escape(x_label)}</text>")
    if y_label:
        out.append(f'<text transform="translate(12 {top + ph / 2:.0f}) rotate(-90)" text-anchor="middle" '
                   f'class="axis-label">{escape(y_label)}</text>')
    for i, s, pts in data:
        out += _series_svg(s, s.color or PALETTE[i % len(PALETTE)], pts, sx, sy, (x0, x1, pw), x_label, xstep)
    out += _legend_svg(data, legend_rows, left)
    out.append("</svg>")
    return Markup("".join(out))


def decimate(pts: list[tuple[float, float]], x0: float, x1: float, buckets: int) -> list[tuple[float, float]]:
    """At most two points per x bucket — the lowest and the highest, in x order — so a line of 10,000 steps
    draws the same picture (spikes included) as the full series with a few hundred points."""
    if len(pts) <= 2 * buckets:
        return pts
    out: list[tuple[float, float]] = []
    width = (x1 - x0) / buckets or 1.0
    bucket: list[tuple[float, float]] = []
    current = None
    for p in pts:
        b = min(int((p[0] - x0) / width), buckets - 1)
        if b != current and bucket:
            lo, hi = min(bucket, key=lambda q: q[1]), max(bucket, key=lambda q: q[1])
            out.extend(sorted({lo, hi}))
            bucket = []
        current = b
        bucket.append(p)
    if bucket:
        lo, hi = min(bucket, key=lambda q: q[1]), max(bucket, key=lambda q: q[1])
        out.extend(sorted({lo, hi}))
    return out


def _num(y: float) -> str:
    return f"{y:.4g}" if abs(y) < 1e4 else f"{y:,.0f}"


def _text_width(text: str) -> int:
    return int(6.3 * len(text))


def _legend_rows(names: list[str], room: int) -> list[list[int]]:
    rows: list[list[int]] = [[]]
    used = 0
    for i, n in enumerate(names):
        w = 23 + _text_width(n) + 14
        if rows[-1] and used + w > room:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += w
    return rows


def interval_chart(effect: float, low: float, high: float, *, per_seed: Sequence[float] = (),
                   threshold: float | None = None, confidence: float | None = None, title: str = "effect",
                   width: int = 520, height: int = 120, scale: float = 100.0, unit: str = "points") -> Markup:
    """Effect (dot) with its confidence interval (bar), per-seed differences (hollow dots), zero and a threshold.

    Values are fractions (held-out accuracy); they are shown × ``scale`` (points of accuracy by default).
    """
    vals = [effect, low, high, 0.0, *(v for v in per_seed if v is not None and math.isfinite(v))]
    if threshold is not None:
        vals.append(threshold)
    if not all(math.isfinite(v) for v in (effect, low, high)):
        return _empty(title, "no interval (the backtest has no finished pairs)", width, height)
    lo, hi = _range([v * scale for v in vals], None, None)
    t = ticks(lo, hi, 6)
    lo, hi = t[0], t[-1]
    step = (t[1] - t[0]) if len(t) > 1 else 1.0
    left, right, top = 16, 16, 30
    pw = width - left - right
    axis_y = height - 32

    def sx(v: float) -> float:
        return left + (v * scale - lo) / (hi - lo) * pw

    conf = f"{confidence:.0%} interval" if confidence is not None else "interval"
    label = f"{title}: {effect * scale:+.2f} {unit} ({conf} {low * scale:+.2f} … {high * scale:+.2f})"
    out = [f'<svg class="chart interval" role="img" aria-label="{escape(label)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f"<title>{escape(label)}</title>",
           f'<text x="{left}" y="18" class="chart-title">{escape(label)}</text>']
    for v in t:
        x = left + (v - lo) / (hi - lo) * pw
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{axis_y}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 15}" text-anchor="middle" class="tick">{escape(fmt(v, step))}</text>')
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{axis_y}" y2="{axis_y}" class="axis"/>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 3}" text-anchor="middle" class="axis-label">'
               f"treatment − control, held-out accuracy ({escape(unit)})</text>")
    zx = sx(0.0)
    out.append(f'<line x1="{zx:.1f}" x2="{zx:.1f}" y1="{top - 4}" y2="{axis_y}" class="zero"/>')
    if threshold is not None:
        tx = sx(threshold)
        out.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{top - 4}" y2="{axis_y}" stroke="#D55E00" '
                   f'stroke-dasharray="5 4" stroke-width="1.5"><title>minimum effect to promote: '
                   f"{threshold * scale:+.2f} {escape(unit)}</title></line>")
    cy = top + (axis_y - top) / 2
    x_lo, x_hi = sx(low), sx(high)
    out.append(f'<line x1="{x_lo:.1f}" x2="{x_hi:.1f}" y1="{cy:.1f}" y2="{cy:.1f}" stroke="#0072B2" stroke-width="4">'
               f"<title>{escape(conf)}: {low * scale:+.2f} … {high * scale:+.2f}</title></line>")
    for x in (x_lo, x_hi):
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{cy - 8:.1f}" y2="{cy + 8:.1f}" stroke="#0072B2" stroke-width="2"/>')
    for i, v in enumerate(per_seed):
        if v is None or not math.isfinite(v):
            continue
        out.append(f'<circle cx="{sx(v):.1f}" cy="{cy - 14:.1f}" r="3.5" fill="white" stroke="#000000">'
                   f"<title>pair {i + 1}: {v * scale:+.2f} {escape(unit)}</title></circle>")
    out.append(f'<circle cx="{sx(effect):.1f}" cy="{cy:.1f}" r="6" fill="#0072B2" stroke="white">'
               f"<title>effect {effect * scale:+.2f} {escape(unit)}</title></circle>")
    out.append("</svg>")
    return Markup("".join(out))


__all__ = ["Series", "line_chart", "interval_chart", "ticks", "nice_step", "fmt", "decimate", "PALETTE"]

"""A hand-made SVG of the results: makespan per scenario against the ideal bound, and per-model share."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from chaos_mode_tools.bench.swarm.report import models_of

WIDTH, HEIGHT = 980, 430
TOP, BOTTOM = 50, 330  # plot area, in y
PANELS = ((60, 430), (570, 870))  # (left, right) x of the makespan and the share panels
# Heavy models warm, medium blue, light green; one colour per catalog model.
COLOURS = {
    "glm-4.7": "#b2182b",
    "glm-4.6": "#d6604d",
    "glm-4.5-x": "#f4a582",
    "glm-4.5": "#2166ac",
    "glm-4.5-air": "#67a9cf",
    "glm-4.7-flashx": "#1b7837",
    "glm-4.7-flash": "#5aae61",
    "glm-4.5-flash": "#a6dba0",
}
SPARE = ("#999999", "#777777", "#555555", "#333333")


def svg_text(
    x: float, y: float, text: str, *, size: int = 12, anchor: str = "middle", extra: str = ""
) -> str:
    attributes = f'x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}'
    return f"<text {attributes}>{escape(text)}</text>"


def nice_max(value: float) -> float:
    """A round axis maximum at or above `value`."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _bar_slots(left: float, right: float, count: int) -> list[tuple[float, float]]:
    """(x, width) of `count` bars spread over [left, right]."""
    pitch = (right - left) / max(count, 1)
    width = pitch * 0.62
    return [(left + i * pitch + (pitch - width) / 2, width) for i in range(count)]


def _label(x: float, name: str) -> str:
    return svg_text(
        x, BOTTOM + 14, name, size=11, anchor="end", extra=f' transform="rotate(-30 {x:.1f} {BOTTOM + 14})"'
    )


def _makespan_panel(scenarios: Sequence[Mapping[str, Any]], ideal: float, fair: float | None) -> list[str]:
    left, right = PANELS[0]
    top_value = nice_max(max([ideal, *(s["makespanSeconds"] for s in scenarios)]) * 1.05)

    def y(value: float) -> float:
        return BOTTOM - (BOTTOM - TOP) * value / top_value

    out = [svg_text((left + right) / 2, TOP - 22, "Makespan per scenario (s) against the ideal", size=14)]
    for i in range(5):
        tick = top_value * i / 4
        out.append(f'<line x1="{left}" x2="{right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e5e5e5"/>')
        out.append(svg_text(left - 6, y(tick) + 4, f"{tick:g}", size=11, anchor="end"))
    for (x, width), s in zip(_bar_slots(left, right, len(scenarios)), scenarios, strict=True):
        value = s["makespanSeconds"]
        colour = "#888888" if s["name"] == "baseline" else "#2166ac"
        out.append(
            f'<rect x="{x:.1f}" y="{y(value):.1f}" width="{width:.1f}" height="{BOTTOM - y(value):.1f}" '
            f'fill="{colour}"><title>{escape(s["name"])}: {value:.2f} s</title></rect>'
        )
        out.append(
            svg_text(x + width / 2, y(value) - 4, f"{value:.2f}" if value < 10 else f"{value:.1f}", size=11)
        )
        out.append(_label(x + width / 2, s["name"]))
    # The bound's label goes under its line, the fair queue's (never lower) above its own.
    lines = [(ideal, "ideal LB", "#d6604d", "6 4", 12.0)]
    if fair is not None:
        lines.append((fair, "fair queue", "#555555", "2 3", -4.0))
    for value, name, colour, dash, dy in lines:
        out.append(
            f'<line x1="{left}" x2="{right}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="{colour}" '
            f'stroke-width="2" stroke-dasharray="{dash}"/>'
        )
        label = f"{name} {value:.2f} s"
        out.append(
            svg_text(right + 4, y(value) + dy, label, size=11, anchor="start", extra=f' fill="{colour}"')
        )
    out.append(f'<line x1="{left}" x2="{right}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="#333"/>')
    return out


def _share_panel(scenarios: Sequence[Mapping[str, Any]]) -> list[str]:
    left, right = PANELS[1]
    models = models_of(scenarios)
    spare = iter(SPARE * 8)
    colours = {m: COLOURS.get(m) or next(spare) for m in models}

    def y(fraction: float) -> float:
        return BOTTOM - (BOTTOM - TOP) * fraction

    out = [svg_text((left + right) / 2, TOP - 22, "Share of requests by model", size=14)]
    for i in range(5):
        out.append(svg_text(left - 6, y(i / 4) + 4, f"{25 * i}%", size=11, anchor="end"))
        out.append(
            f'<line x1="{left}" x2="{right}" y1="{y(i / 4):.1f}" y2="{y(i / 4):.1f}" stroke="#e5e5e5"/>'
        )
    for (x, width), s in zip(_bar_slots(left, right, len(scenarios)), scenarios, strict=True):
        base = 0.0
        for model in models:
            share = float(s["share"].get(model, 0.0))
            if share <= 0:
                continue
            out.append(
                f'<rect x="{x:.1f}" y="{y(base + share):.1f}" width="{width:.1f}" '
                f'height="{y(base) - y(base + share):.1f}" fill="{colours[model]}">'
                f"<title>{escape(s['name'])}: {escape(model)} {100 * share:.1f}%</title></rect>"
            )
            base += share
        out.append(_label(x + width / 2, s["name"]))
    out.append(f'<line x1="{left}" x2="{right}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="#333"/>')
    for i, model in enumerate(models):  # legend, right of the panel
        ly = TOP + 4 + 18 * i
        out.append(f'<rect x="{right + 14}" y="{ly}" width="12" height="12" fill="{colours[model]}"/>')
        out.append(svg_text(right + 32, ly + 10, model, size=11, anchor="start"))
    return out


def render_svg(doc: Mapping[str, Any]) -> str:
    """The SVG document for a benchmark document (see `run.run_benchmark`)."""
    scenarios = doc["scenarios"]
    w = doc["workload"]
    caption = (
        f"{w['requests']} streamed requests ({w['agents']} agents x {w['requestsPerAgent']}, mix "
        f"opus:sonnet:haiku {w['mix']}), simulator at catalog limits; {doc['machine']['cpus']} CPUs"
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        *_makespan_panel(scenarios, float(doc["ideal"]["seconds"]), doc["ideal"].get("fairQueueSeconds")),
        *_share_panel(scenarios),
        svg_text(WIDTH / 2, HEIGHT - 12, caption, size=11, extra=' fill="#555"'),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"

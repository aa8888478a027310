"""The benchmarks' hand-made SVG plots: the swarm's (makespan per scenario against the ideal bound, and
per-model share) and the field's (per preset, one small panel per model and one for the account, with the
true limit, the catalog's, the learned one when the proxy reports it, and the slots in use over time)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from chaos_mode_tools.bench.swarm.report import MODEL_ORDER, models_of

# The swarm's plot.
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


def colours(models: Sequence[str]) -> dict[str, str]:
    """Each model's colour: the catalog's own, grey for the others."""
    spare = iter(SPARE * 8)
    return {model: COLOURS.get(model) or next(spare) for model in models}


def document(width: float, height: float, parts: Sequence[str]) -> str:
    """An SVG document on a white ground."""
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    return "\n".join(p for p in [*head, *parts, "</svg>"] if p) + "\n"


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
    colour = colours(models)

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
                f'height="{y(base) - y(base + share):.1f}" fill="{colour[model]}">'
                f"<title>{escape(s['name'])}: {escape(model)} {100 * share:.1f}%</title></rect>"
            )
            base += share
        out.append(_label(x + width / 2, s["name"]))
    out.append(f'<line x1="{left}" x2="{right}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="#333"/>')
    for i, model in enumerate(models):  # legend, right of the panel
        ly = TOP + 4 + 18 * i
        out.append(f'<rect x="{right + 14}" y="{ly}" width="12" height="12" fill="{colour[model]}"/>')
        out.append(svg_text(right + 32, ly + 10, model, size=11, anchor="start"))
    return out


def render_svg(doc: Mapping[str, Any]) -> str:
    """The SVG document for a benchmark document (see `swarm.run.run_benchmark`)."""
    scenarios = doc["scenarios"]
    w = doc["workload"]
    caption = (
        f"{w['requests']} streamed requests ({w['agents']} agents x {w['requestsPerAgent']}, mix "
        f"opus:sonnet:haiku {w['mix']}), simulator at catalog limits; {doc['machine']['cpus']} CPUs"
    )
    parts = [
        *_makespan_panel(scenarios, float(doc["ideal"]["seconds"]), doc["ideal"].get("fairQueueSeconds")),
        *_share_panel(scenarios),
        svg_text(WIDTH / 2, HEIGHT - 12, caption, size=11, extra=' fill="#555"'),
    ]
    return document(WIDTH, HEIGHT, parts)


# The field's plot.
PANEL_W, PANEL_H, GAP = 112, 92, 14  # one panel's plot area and the space between panels
LEFT, FIELD_TOP, ROW_H = 36, 70, 150  # the first panel's x, the first row's y, one preset's height
TRUE, CATALOG, ACCOUNT, WAITING = "#000000", "#999999", "#6a3d9a", "#e66101"

Point = tuple[float, float]


def _steps(points: Sequence[Point], end: float) -> list[Point]:
    """Corners of a step line through (t, value) points: each value holds until the next t (or `end`)."""
    out: list[Point] = []
    for index, (t, value) in enumerate(points):
        upto = points[index + 1][0] if index + 1 < len(points) else end
        out += [(t, value), (upto, value)]
    return out


class Panel:
    """One small chart: data coordinates (seconds, slots) to SVG ones."""

    def __init__(self, x: float, y: float, end: float, top: float) -> None:
        self.x, self.y, self.end, self.top = x, y, max(end, 1e-9), float(math.ceil(max(top, 1.0) * 1.15))

    def at(self, t: float, value: float) -> Point:
        value = min(max(value, 0.0), self.top)
        return self.x + PANEL_W * t / self.end, self.y + PANEL_H * (1 - value / self.top)

    def line(self, points: Sequence[Point], colour: str, width: float = 1.5, dash: str = "") -> str:
        if not points:
            return ""
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in (self.at(*p) for p in points))
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        return f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="{width}"{dashes}/>'

    def area(self, points: Sequence[Point], colour: str) -> str:
        if not points:
            return ""
        outline = [(points[0][0], 0.0), *points, (points[-1][0], 0.0)]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in (self.at(*p) for p in outline))
        return f'<polygon points="{coords}" fill="{colour}" fill-opacity="0.3" stroke="none"/>'

    def frame(self, title: str) -> list[str]:
        bottom = self.y + PANEL_H
        return [
            f'<rect x="{self.x}" y="{self.y}" width="{PANEL_W}" height="{PANEL_H}" fill="none" '
            'stroke="#ccc"/>',
            svg_text(self.x + PANEL_W / 2, self.y - 4, title, size=10),
            svg_text(self.x - 3, self.y + 8, f"{self.top:g}", size=9, anchor="end"),
            svg_text(self.x - 3, bottom, "0", size=9, anchor="end"),
            svg_text(self.x + PANEL_W, bottom + 10, f"{self.end:.3g} s", size=9, anchor="end"),
        ]


def _series(samples: Sequence[Mapping[str, Any]], pick: Any) -> list[Point]:
    """(t, value) of the samples where `pick(sample)` is a number."""
    points = [(float(s["t"]), pick(s)) for s in samples]
    return [(t, float(v)) for t, v in points if isinstance(v, int | float)]


def _model_panel(panel: Panel, model: str, preset: Mapping[str, Any], colour: str) -> list[str]:
    samples, end = preset["samples"], panel.end

    def of(key: str) -> Any:
        return lambda s: s["models"].get(model, {}).get(key)

    true = [(float(c["at"]), float(c["models"].get(model, 0))) for c in preset["truth"]["slots"]]
    band = _band(preset, model)
    return [
        *panel.frame(model.removeprefix("glm-")),
        panel.area(_steps(_series(samples, of("inFlight")), end), colour),
        panel.line(_steps(_series(samples, of("catalogLimit")), end), CATALOG, dash="4 3"),
        panel.line(_steps([(t, v + band) for t, v in true], end), TRUE, width=0.8, dash="1 2")
        if band
        else "",
        panel.line(_steps(true, end), TRUE),
        panel.line(_steps(_series(samples, of("learnedLimit")), end), colour, width=2.2),
    ]


def _band(preset: Mapping[str, Any], model: str) -> int:
    """The width of the model's soft band in the run (0: a hard limit)."""
    return int((preset["truth"]["settings"].get("bands") or {}).get(model, 0))


def _account_panel(panel: Panel, preset: Mapping[str, Any]) -> list[str]:
    samples, end = preset["samples"], panel.end
    true = [(float(c["at"]), float(c["account"])) for c in preset["truth"]["slots"]]
    return [
        *panel.frame("account"),
        panel.area(_steps(_series(samples, lambda s: s["used"]), end), ACCOUNT),
        panel.line(_steps(_series(samples, lambda s: s["totalCapacity"]), end), CATALOG, dash="4 3"),
        panel.line(_steps(true, end), TRUE),
        panel.line(_steps(_series(samples, lambda s: s["accountLimit"]), end), ACCOUNT, width=2.2),
        panel.line(_steps(_series(samples, lambda s: s["waiting"]), end), WAITING, width=1, dash="1 2"),
    ]


def _models(preset: Mapping[str, Any]) -> list[str]:
    seen = set(preset["truth"]["slots"][0]["models"])
    return [m for m in MODEL_ORDER if m in seen] + sorted(seen - set(MODEL_ORDER))


def _row(preset: Mapping[str, Any], y: float) -> list[str]:
    models = _models(preset)
    samples = preset["samples"]
    end = max([preset["makespanSeconds"], *(s["t"] for s in samples)])
    colour = colours(models)
    out = [
        svg_text(
            LEFT - 30,
            y - 22,
            f"{preset['name']}: {preset['description']} — makespan {preset['makespanSeconds']:.1f} s, "
            f"LB {preset['idealSeconds']:.1f} s",
            size=12,
            anchor="start",
            extra=' font-weight="bold"',
        )
    ]
    for index, model in enumerate(models):
        values = [c["models"].get(model, 0) + _band(preset, model) for c in preset["truth"]["slots"]]
        for s in samples:
            m = s["models"].get(model, {})
            values += [
                v for v in (m.get("inFlight"), m.get("catalogLimit"), m.get("learnedLimit")) if v is not None
            ]
        panel = Panel(LEFT + index * (PANEL_W + GAP), y, end, max(values))
        out += _model_panel(panel, model, preset, colour[model])
    values = [c["account"] for c in preset["truth"]["slots"]]
    values += [
        v for s in samples for v in (s["used"], s["totalCapacity"], s["accountLimit"]) if v is not None
    ]
    panel = Panel(LEFT + len(models) * (PANEL_W + GAP), y, end, max(values))
    return out + _account_panel(panel, preset)


def _legend(y: float) -> list[str]:
    items = [
        (TRUE, "", "true slots (limit - held; 0 refused)"),
        (TRUE, "1 2", "top of a soft band"),
        (CATALOG, "4 3", "catalog limit (proxy)"),
        ("#b2182b", "", "learned limit (proxy, when reported)"),
        (WAITING, "1 2", "waiting in the proxy (account panel)"),
    ]
    out, x = [], float(LEFT)
    for colour, dash, label in items:
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line x1="{x}" x2="{x + 22}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2"{dashes}/>'
        )
        out.append(svg_text(x + 27, y + 4, label, size=11, anchor="start"))
        x += 40 + 6.2 * len(label)
    out.append(f'<rect x="{x}" y="{y - 6}" width="14" height="10" fill="{ACCOUNT}" fill-opacity="0.3"/>')
    out.append(svg_text(x + 19, y + 4, "slots in use (proxy)", size=11, anchor="start"))
    return out


def render_field_svg(doc: Mapping[str, Any]) -> str:
    """The SVG document for a field document (see `field.run.run_field`)."""
    presets = doc["presets"]
    columns = max([len(_models(p)) + 1 for p in presets] or [1])
    width = LEFT + columns * (PANEL_W + GAP) + 10
    height = FIELD_TOP + ROW_H * len(presets) + 10
    parts = [
        svg_text(
            LEFT - 30,
            20,
            "Learned against true limits over time (slots; x: seconds of the run)",
            size=14,
            anchor="start",
        ),
        *_legend(40),
    ]
    for index, preset in enumerate(presets):
        parts += _row(preset, FIELD_TOP + 30 + index * ROW_H)
    return document(width, height, parts)

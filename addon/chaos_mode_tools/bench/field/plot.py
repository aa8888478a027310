"""A hand-made SVG of the field runs: per preset, one small panel per model and one for the account, with
the true limit, the catalog's, the learned one (when the proxy reports it) and the slots in use over time."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from chaos_mode_tools.bench.swarm.plot import COLOURS, SPARE, svg_text
from chaos_mode_tools.bench.swarm.report import MODEL_ORDER

PANEL_W, PANEL_H, GAP = 112, 92, 14  # one panel's plot area and the space between panels
LEFT, TOP, ROW_H = 36, 70, 150  # the first panel's x, the first row's y, one preset's height
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
    spare = iter(SPARE * 8)
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
        out += _model_panel(panel, model, preset, COLOURS.get(model) or next(spare))
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
    height = TOP + ROW_H * len(presets) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
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
        parts += _row(preset, TOP + 30 + index * ROW_H)
    parts.append("</svg>")
    return "\n".join(p for p in parts if p) + "\n"

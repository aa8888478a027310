"""The field benchmark's document as text: one row per preset against the bound of its true limits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chaos_mode.bench.report import check_lines, fmt_num, fmt_pair, share_table, table_rows


def field_table(presets: Sequence[Mapping[str, Any]]) -> list[str]:
    header = [
        "preset", "requests", "makespan s", "LB s", "LB/makespan", "req/s", "429 client", "429 upstream",
        "by code", "one-piece", "longest stall s", "stalled", "TTFT p50/p99 ms", "wait p50/p99 ms",
    ]  # fmt: skip
    rows = []
    for p in presets:
        w, stalls = p["workload"], p["stalls"]
        rows.append(
            [
                p["name"],
                f"{w['agents']}x{w['requestsPerAgent']}",
                f"{p['makespanSeconds']:.2f}",
                f"{p['idealSeconds']:.2f}",
                fmt_num(p["utilization"], ".0%"),
                fmt_num(p["requestsPerSecond"], ".1f"),
                str(p["client429"]),
                str(p["upstream429"]),
                " ".join(f"{code}:{n}" for code, n in p["upstreamByCode"].items()) or "-",
                str(p["unstreamed"]),
                f"{stalls['longestStallSeconds']:.2f}",
                fmt_num(stalls["stalledShare"], ".1%"),
                fmt_pair(p["ttftMs"]),
                fmt_pair(p["queueWaitMs"]),
            ]
        )
    return table_rows(header, rows)


def bound_line(preset: Mapping[str, Any]) -> str:
    """`lower: LB 11.33 s (heavy+medium+light); true slots heavy 4, heavy+medium 19, all 21, account 26`."""
    ideal, slots = preset["ideal"], preset["truth"]["slots"]
    named = {"heavy": "heavy", "heavy+medium": "heavy+medium", "heavy+medium+light": "all"}
    first = ", ".join(
        f"{short} {ideal['slots'][key]}" for key, short in named.items() if key in ideal["slots"]
    )
    line = (
        f"  {preset['name']}: LB {ideal['seconds']:.2f} s (binding {ideal['binding']}); true slots at 0 s: "
        f"{first}, account {slots[0]['account']}; max agent work {ideal['terms'].get('max agent', 0):.2f} s"
    )
    if len(slots) > 1:
        line += "; slots change at " + ", ".join(
            f"{s['at']:.2f} s (all {sum(s['models'].values())}, account {s['account']})" for s in slots[1:]
        )
    return line


def render_field(doc: Mapping[str, Any]) -> str:
    """The whole field report, ready to print."""
    presets = doc["presets"]
    lines = [
        "field: chaos mode (least-loaded) on the built-in catalog against a simulator with other true limits",
        *field_table(presets),
        "",
        "LB = the makespan bound of the TRUE limits (limit - held slots, 0 when refused, the account limit; "
        "changing limits integrated over time);",
        "LB/makespan = efficiency; one-piece = answers that reached the client unstreamed (failed over);",
        "stall = requests waiting in the proxy while it used no slot (sampled from /api/status).",
        *(bound_line(p) for p in presets),
        "",
        *share_table(presets),
    ]
    checks = check_lines(presets)
    if checks:
        lines += ["", *checks]
    return "\n".join(lines)

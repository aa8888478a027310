"""The field benchmark's document as text: one row per preset against the bound of its true limits."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from chaos_mode_tools.bench.swarm.report import check_lines, fmt_num, fmt_pair, share_table, table_rows


def field_table(presets: Sequence[Mapping[str, Any]]) -> list[str]:
    header = [
        "preset", "requests", "makespan s", "LB s", "LB/makespan", "req/s", "429 client", "429 upstream",
        "per 50", "by code", "filtered", "zai wait max s", "one-piece", "longest stall s", "stalled",
        "TTFT p50/p99 ms", "wait p50/p99 ms",
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
                fmt_num(p.get("upstreamPer50"), ".1f"),
                " ".join(f"{code}:{n}" for code, n in p["upstreamByCode"].items()) or "-",
                str(p.get("upstreamFiltered", 0)),
                _longest_wait(p),
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
    if ideal.get("queueSeconds"):
        queue = ideal["queueSeconds"]
        line += (
            f"; an ideal queue {queue:.2f} s (LB/queue {ideal['seconds'] / queue:.2f}; the run "
            f"{queue / preset['makespanSeconds']:.2f} of it)"
        )
    if len(slots) > 1:
        line += "; slots change at " + ", ".join(
            f"{s['at']:.2f} s (all {sum(s['models'].values())}, account {s['account']})" for s in slots[1:]
        )
    return line


def _longest_wait(preset: Mapping[str, Any]) -> str:
    waits = preset.get("zaiWaits") or {}
    return f"{waits['maxMs'] / 1000:.2f}" if waits.get("waited") else "-"


def shape_lines(preset: Mapping[str, Any]) -> list[str]:
    """What the preset's shape did: against its twin, the filtered agent, the limits after each change, the
    learned limits' range, the waits inside z.ai, the refusals by reason."""
    name, lines = preset["name"], []
    twin = preset.get("twin")
    if twin:
        points = fmt_num(twin["pointsBelowTwin"], "+.1f")
        lines.append(
            f"  {name}: {fmt_num(preset['utilization'], '.2f')} of the bound against "
            f"{fmt_num(twin['efficiency'], '.2f')} for {twin['name']} ({points} points below it); makespan "
            f"{preset['makespanSeconds']:.2f} s against {twin['makespanSeconds']:.2f} s "
            f"(x{fmt_num(twin['makespanRatio'], '.3f')})"
        )
    filtered = preset.get("filtered")
    if filtered:
        answer = filtered["firstAnswer"] or {}
        cooled = ", ".join(f"{m} {s:.1f} s" for m, s in preset["cooled"].items()) or "none"
        ended = (
            "still retrying when the others were done"
            if filtered["stoppedWithOthers"]
            else f"gave up after {fmt_num(filtered['gaveUpAfterSeconds'], '.1f')} s"
        )
        own = (preset.get("proxy") or {}).get("requestRefusals")
        lines.append(
            f"  {name}: agent {filtered['agent']} (filtered) got HTTP {answer.get('status', '-')} first: "
            f"{str(answer.get('body', '-'))[:160]}; {filtered['attempts']} attempts, {ended}; upstream "
            f"filtered {preset['upstreamFiltered']}; models cooled: {cooled}"
            + (f"; refusals the proxy found the request's own: {own}" if own is not None else "")
        )
    for change in preset.get("convergence", []):
        late = [m for m, s in change["byModel"].items() if s is None or s > 5]
        seconds = change["seconds"]
        when = "never (before the next change)" if seconds is None else f"after {seconds:.2f} s"
        lines.append(
            f"  {name}: change at {change['at']:.2f} s: learned limits all within one step of the truth "
            f"{when}" + (f"; later than 5 s or never: {', '.join(late)}" if late else "")
        )
    ranges = {m: r for m, r in preset.get("learned", {}).items() if r["min"] is not None}
    if ranges:
        lines.append(
            f"  {name}: learned limits min-max (last): "
            + ", ".join(
                f"{m.removeprefix('glm-')} {r['min']:g}-{r['max']:g} ({r['last']:g})"
                for m, r in ranges.items()
            )
        )
    waits = preset.get("zaiWaits") or {}
    if waits.get("waited"):
        lines.append(
            f"  {name}: waited inside z.ai: {waits['waited']} requests, max {waits['maxMs'] / 1000:.2f} s, "
            f"p99 {waits['p99Ms'] / 1000:.2f} s, {waits['over1s']} over 1 s"
        )
        known = preset.get("zaiWaitsOnceKnown")
        if known:
            lines.append(
                f"  {name}: once its model's level was known: {known['waited']} waited, max "
                f"{known['maxSeconds']:.2f} s, {known['over1s']} over 1 s"
            )
    if preset.get("refusalReasons"):
        reasons = ", ".join(f"{k} {v}" for k, v in preset["refusalReasons"].items())
        lines.append(f"  {name}: upstream refusals by reason: {reasons}")
    return lines


def seed_lines(presets: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each preset run on more than one seed, across its seeds: the median efficiency and its range, and the
    upstream refusals per 50 requests, and the points below its twin where it has one (`realistic: 0.86
    (0.80-0.90) of the bound over seeds 1, 2, 3; ...`)."""
    runs: dict[str, list[Mapping[str, Any]]] = {}
    for preset in presets:
        runs.setdefault(preset.get("preset", preset["name"]), []).append(preset)
    lines = []
    for name, seeded in runs.items():
        if len(seeded) < 2:
            continue
        shares = [p["utilization"] for p in seeded if p["utilization"] is not None]
        per_50 = [p["upstreamPer50"] for p in seeded if p.get("upstreamPer50") is not None]
        seeds = ", ".join(str(p["workload"]["seed"]) for p in seeded)
        line = f"  {name}: {_median_range(shares, '.2f')} of the bound over seeds {seeds}"
        if per_50:
            line += f"; upstream refusals per 50 requests {_median_range(per_50, '.1f')}"
        twins = [p["twin"] for p in seeded if p.get("twin")]
        below = [t["pointsBelowTwin"] for t in twins if t.get("pointsBelowTwin") is not None]
        if below:
            line += f"; points below its twin {_median_range(below, '+.1f')}"
        lines.append(line)
    return ["across seeds (median, min-max):", *lines, ""] if lines else []


def _median_range(values: Sequence[float], spec: str) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}} ({min(values):{spec}}-{max(values):{spec}})"


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
        "stall = requests waiting in the proxy while it used no slot (sampled from /api/status);",
        "per 50 = upstream refusals per 50 requests; filtered = refused by the content filter (not counted "
        "as 429s); zai wait = the longest a request waited inside z.ai for its head.",
        *(bound_line(p) for p in presets),
        "",
        *(line for p in presets for line in shape_lines(p)),
        "",
        *seed_lines(presets),
        *share_table(presets),
    ]
    checks = check_lines(presets)
    if checks:
        lines += ["", *checks]
    return "\n".join(lines)

"""The benchmark document as text: the scenario table, per-model shares, overhead and the pure core."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chaos_mode.zai.catalog import DEFAULT_CATALOG, EARLY_2026_CATALOG

MODEL_ORDER = (*EARLY_2026_CATALOG, *DEFAULT_CATALOG)  # the simulator's early-2026 names, then today's


def fmt_num(value: Any, fmt: str, missing: str = "-") -> str:
    return missing if value is None else format(value, fmt)


def fmt_pair(spread: Mapping[str, Any]) -> str:
    return f"{fmt_num(spread.get('p50'), '.0f')} / {fmt_num(spread.get('p99'), '.0f')}"


def table_rows(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Columns padded to width; the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def models_of(scenarios: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every model that served a request, in catalog order."""
    seen = {m for s in scenarios for m in s.get("share", {})}
    return [m for m in MODEL_ORDER if m in seen] + sorted(seen - set(MODEL_ORDER))


def scenario_table(doc: Mapping[str, Any]) -> list[str]:
    ideal = doc["ideal"]
    header = [
        "scenario", "makespan s", "vs ideal", "req/s", "speedup", "429 client", "429 upstream",
        "TTFT p50/p99 ms", "wait p50/p99 ms",
    ]  # fmt: skip
    rows = []
    for s in doc["scenarios"]:
        rows.append(
            [
                s["name"],
                f"{s['makespanSeconds']:.2f}",
                f"{fmt_num(s['vsIdeal'], '.2f')}x ({fmt_num(s['utilization'], '.0%')})",
                fmt_num(s["requestsPerSecond"], ".1f"),
                "-" if s.get("speedup") is None else f"{s['speedup']:.2f}x",
                str(s["client429"]),
                str(s["upstream429"]),
                fmt_pair(s["ttftMs"]),
                fmt_pair(s["queueWaitMs"]),
            ]
        )
    size = doc["workload"]["requests"]
    references = [
        (name, ideal[key])
        for name, key in (
            ("fair queue (sim)", "fairQueueSeconds"),
            ("clairvoyant (sim)", "clairvoyantSeconds"),
        )
        if key in ideal
    ]
    references.append(("ideal (LB)", ideal["seconds"]))
    for name, seconds in references:
        ratio = seconds / ideal["seconds"]
        rows.append(
            [name, f"{seconds:.2f}", f"{ratio:.2f}x ({1 / ratio:.0%})", f"{size / seconds:.1f}", *[""] * 5]
        )
    return table_rows(header, rows)


def share_table(scenarios: Sequence[Mapping[str, Any]]) -> list[str]:
    models = models_of(scenarios)
    header = ["share %", *models]
    rows = [[s["name"], *(f"{100 * s['share'].get(m, 0):.1f}" for m in models)] for s in scenarios]
    return table_rows(header, rows)


def workload_line(doc: Mapping[str, Any]) -> str:
    w = doc["workload"]
    return (
        f"workload: {w['requests']} streamed requests = {w['agents']} agents x {w['requestsPerAgent']} "
        "sequential, "
        f"mix opus:sonnet:haiku {w['mix']} ({w['tierCounts']['heavy']}/{w['tierCounts']['medium']}/"
        f"{w['tierCounts']['light']}), latency {w['latencyMs']:g} ms, {w['outputTokens']} tokens every "
        f"{w['tokenIntervalMs']:g} ms (+-{100 * w['jitter']:.0f}%), "
        f"mean service {w['meanServiceSeconds']:.2f} s, "
        f"upstream 429 after {w['rejectDelayMs']:g} ms, seed {w['seed']}"
    )


def ideal_lines(doc: Mapping[str, Any]) -> list[str]:
    ideal = doc["ideal"]
    w = doc["workload"]["workSeconds"]
    slots = ideal["slots"]
    hm, everything = "heavy+medium", "heavy+medium+light"
    terms = ideal["terms"]
    parts = []
    if "heavy" in slots:
        parts.append(f"W_heavy/{slots['heavy']} = {w['heavy']:.1f}/{slots['heavy']} = {terms['heavy']:.2f}")
    if hm in slots:
        parts.append(
            f"(W_heavy+W_medium)/{slots[hm]} = {w['heavy'] + w['medium']:.1f}/{slots[hm]} = {terms[hm]:.2f}"
        )
    if everything in slots:
        parts.append(
            f"W_all/{slots[everything]} = {sum(w.values()):.1f}/{slots[everything]} = {terms[everything]:.2f}"
        )
    if "max agent" in terms:
        parts.append(f"max agent work = {terms['max agent']:.2f}")
    base = ideal["baselineMapping"]
    lines = [
        f"ideal: LB = {ideal['seconds']:.2f} s (binding: {ideal['binding']})",
        "  LB = max(W_heavy/S_heavy, (W_heavy+W_medium)/S_heavy+medium, W_all/S_all, max over agents of its",
        "       service time sum); W_t = sum over tier t of latency + (tokens-1) x interval (s)",
        "     = max(" + ", ".join(parts) + ")",
    ]
    if "fairQueueSeconds" in ideal:
        lines.append(
            f"  fair queue (sim) = {ideal['fairQueueSeconds']:.2f} s: a zero-overhead fair queue (FIFO, "
            "least-loaded placement) on the same slots, what a router that cannot see the future can approach"
        )
    if "clairvoyantSeconds" in ideal:
        lines.append(
            f"  clairvoyant (sim) = {ideal['clairvoyantSeconds']:.2f} s: the same queue serving the "
            "agent with the most work left first, which needs the future: how close LB is to reachable at all"
        )
    lines.append(
        f"  the baseline mapping's own LB = {base['seconds']:.2f} s"
        + (f", fair queue {base['fairQueueSeconds']:.2f} s" if "fairQueueSeconds" in base else "")
    )
    return lines


def overhead_lines(overhead: Mapping[str, Any] | None) -> list[str]:
    if overhead is None:
        return ["overhead: not measured (--no-overhead)"]
    t, f = overhead["throughput"], overhead["ttftP50Ms"]
    lines = [
        f"overhead: addon (chaos on, no contention) vs plain mitmdump, {overhead['rounds']} alternating "
        "rounds, medians over rounds",
        f"  small non-streamed, {overhead['concurrency']} clients x {overhead['requestsPerRound']}/round: "
        f"addon {t['addonMedian']:.0f} req/s, plain {t['plainMedian']:.0f} req/s -> ratio {t['ratio']:.3f} "
        f"(cost {t['costPercent']:.1f}%)",
        f"  streams, {overhead['streamConcurrency']} clients x {overhead['streamsPerRound']}/round: TTFT p50 "
        f"addon {f['addonMedian']:.2f} ms, plain {f['plainMedian']:.2f} ms -> added {f['addedMs']:+.2f} ms "
        f"(ratio {f['ratio']:.2f})",
    ]
    cpu = overhead.get("cpuMsPerRequest")
    if cpu and cpu.get("ratio") is not None:
        lines.insert(
            2,
            f"  proxy CPU per small request (/proc): addon {cpu['addonMedian']:.3f} ms, plain "
            f"{cpu['plainMedian']:.3f} ms -> ratio {cpu['ratio']:.3f} (added {cpu['addedMs']:+.3f} ms)",
        )
    errors = overhead.get("errors", {})
    if any(errors.values()):
        lines.append(f"  errors: {errors}")
    return lines


def pool_lines(pool: Mapping[str, Any] | None) -> list[str]:
    if pool is None:
        return ["pure core: not measured (--no-pool-bench)"]
    if "skipped" in pool:
        return [f"pure core: skipped: {pool['skipped']}"]
    rows = pool.get("rows") or []
    lines = [f"pure core (pool_bench, repeats={pool['repeats']}, number={pool['number']}):"]
    if rows and all(isinstance(r, dict) for r in rows):
        keys = list(dict.fromkeys(k for r in rows for k in r))
        cells = [[_cell(r.get(k)) for k in keys] for r in rows]
        lines += ["  " + line for line in table_rows(keys, cells)]
    else:
        lines.append(f"  {rows}")
    return lines


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def check_lines(scenarios: Sequence[Mapping[str, Any]]) -> list[str]:
    bad = [f"{s['name']}: {k}" for s in scenarios for k, ok in s["checks"].items() if not ok]
    return [f"CHECK FAILED: {b}" for b in bad]


def render(doc: Mapping[str, Any]) -> str:
    """The whole report, ready to print."""
    lines = [workload_line(doc), *ideal_lines(doc), "", *scenario_table(doc), ""]
    lines += [
        "vs ideal = makespan / LB (in brackets LB / makespan); speedup = req/s over baseline;",
        "TTFT = first send to first content_block_delta; wait = first send to the 200's response headers",
        "(queue wait + proxy overhead through chaos mode; time lost to 429s and back-off in the baseline);",
        "both include retries.",
        "",
        *share_table(doc["scenarios"]),
        "",
        *overhead_lines(doc.get("overhead")),
        "",
        *pool_lines(doc.get("poolBench")),
    ]
    checks = check_lines(doc["scenarios"])
    if checks:
        lines += ["", *checks]
    return "\n".join(lines)

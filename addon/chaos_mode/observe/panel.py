"""The Chaos Mode panel as a text table (the `chaos.status` command)."""

from __future__ import annotations

import time
from typing import Any

from chaos_mode.routing.pool_status import pause_span


def _bar(in_flight: int, capacity: int, width: int = 10) -> str:
    cells = min(max(capacity, 1), width)
    filled = 0 if capacity <= 0 else round(cells * min(in_flight, capacity) / capacity)
    if in_flight > 0 and filled == 0:
        filled = 1
    return "█" * filled + "░" * (cells - filled)


def _cooldown(model: dict[str, Any]) -> str:
    if model.get("outOfRotation"):
        return f"out: {model['outOfRotation']}"
    remaining = model.get("cooldownRemaining") or 0
    if remaining > 0:
        reason = model.get("cooldownReason") or "cooldown"
        code = reason.split("(")[-1].rstrip(")") if "(" in reason else reason
        return f"{code} ({remaining:.1f}s)"
    return "-"


def _limit(model: dict[str, Any]) -> str:
    """`3` while the learned limit is the catalog's, `3→2 (why)` once learning moved it; `probing` marks."""
    learned, catalog = model.get("learnedLimit"), model.get("catalogLimit")
    if learned is None:  # not in the catalog (dropped by a reload while busy)
        return "-"
    cell = str(learned) if learned == catalog else f"{catalog}→{learned} ({model.get('limitReason')})"
    return cell + " probing" if model.get("probing") else cell


def _learning(stats: dict[str, Any]) -> str:
    """The learning switch and the account's limit: learned, configured, or none known."""
    learning, account = stats["learning"], stats["account"]
    if not learning["enabled"]:
        switch = "Learning: off (catalog limits fixed)"
    else:
        switch = (
            f"Learning: on (probe interval {learning['probeIntervalSeconds']:g}s, "
            f"drift {learning['driftSeconds']:g}s)"
        )
    limit, configured = account["limit"], account["configured"]
    if limit is None:
        text = "none learned" if learning["enabled"] else "none"
    elif limit == configured:
        text = f"{limit} (configured)"
    else:
        start = "" if configured is None else f"{configured}→"
        text = f"{start}{limit} ({account['reason']})"
    if account["probing"]:
        text += " probing"
    return f"{switch}    Account limit: {text}"


def _out(out: dict[str, Any]) -> str:
    """The slots no request can use now, apart from the usable ones: how many, whose, why."""
    if not out["models"]:
        return ""
    models = ", ".join(f"{name} ({why})" for name, why in out["models"].items())
    finishing = f", {out['inFlight']} still finishing" if out["inFlight"] else ""
    return f"    Out: {out['slots']} slots{finishing}: {models}"


def _slots(model: dict[str, Any]) -> str:
    """`held/limit`, never above the limit: what is held above it (a probe, an overdue attempt riding there
    until its verdict, or a request sent before the limit fell) is said apart."""
    capacity, above = model["capacity"], model["aboveLimit"]
    held = f"{model['inFlight'] - above}/{capacity}"
    if not above:
        return held
    if model["probes"] >= above:
        return f"{held} +{above} probe"
    if model["overdue"] >= above:
        return f"{held} +{above} overdue"
    return f"{held} +{above}"


def _duration(seconds: float) -> str:
    minutes = max(round(seconds / 60), 0)
    if minutes >= 24 * 60:
        return f"{minutes // 1440}d{minutes % 1440 // 60:02d}h"
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def _window(window: dict[str, Any], now: float) -> str:
    """One window known: used (credits where said), the reset, the burn and the forecast."""
    if not window.get("started", True):
        return f"not started ({window['cap']:g} credits; it starts at first use)"
    line = f"{window['usedPercent']:.1f}% used"
    if window.get("used") is not None and window.get("cap") is not None:
        line += f" ({window['used']:g} of {window['cap']:g} credits)"
    if window["resetsAt"] is not None:
        line += f", resets in {_duration(window['resetsAt'] - now)}"
    line += f", {window['burnPerHour']:.1f}%/h, "
    runs_out = window["runsOutAt"]
    return line + ("lasts" if runs_out is None else f"runs out in {_duration(runs_out - now)}")


def _quota(quota: dict[str, Any] | None, now: float) -> str | None:
    """The quota in one line: each window's used, reset, burn and forecast (the 5-hour one first, read
    or estimated); pacing; what failed."""
    if quota is None:
        return None
    line = f"Quota ({quota['source']}): "
    windows = {w["name"]: w for w in quota.get("windows", [])}
    five = {**windows.get("5h", {}), **quota}  # the top figures are the 5-hour window's too
    if five["usedPercent"] is None:
        counted, unit = quota["estimate"]["units"], quota["estimate"].get("unit", "prompts")
        line += f"not known yet ({counted:g} {unit} counted; the scale comes with a 1308 or a reading)"
    else:
        line += _window(five, now)
    for name, window in windows.items():
        if name != "5h" and window["usedPercent"] is not None:
            line += f"; {name}: {_window(window, now)}"
    pacing = quota.get("pacing")
    if pacing and pacing["enabled"]:
        by = f" by {pacing['window']}" if pacing.get("window") not in (None, "5h") else ""
        if pacing["maxConcurrency"] == 0:
            line += f"; paced{by}: none until back on an even pace"
        elif pacing["maxConcurrency"] is not None:
            line += f"; paced{by}: at most {pacing['maxConcurrency']} at once"
        elif pacing["preferLowerWeight"]:
            line += f"; paced{by}: lighter models first"
        if pacing.get("budget") is not None:
            line += f"; {pacing['budget']:g} prompts left to send"
        if pacing["pacedWaits"]:
            line += f" ({pacing['pacedWaits']} paced waits)"
    if quota["error"]:
        line += f"; {quota['error']}"
    return line


def render_panel(stats: dict[str, Any], now: float | None = None) -> str:
    """Render `chaos_stats()` output like the Chaos Mode design's dashboard panel (`now`: unix seconds,
    for the quota's times)."""
    out = stats["outCapacity"]
    used, total, above = stats["inLimits"], stats["totalCapacity"], stats["aboveLimits"]
    percent = round(100 * used / total) if total else 0
    state = stats["strategy"] if stats["enabled"] else f"{stats['strategy']} (chaos mode OFF)"
    models = stats["modelDistribution"]
    limits = {name: _limit(model) for name, model in models.items()}
    width = max(len("Limit"), *map(len, limits.values())) + 2
    slots = {name: _slots(model) for name, model in models.items()}
    slots_width = max(len("Capacity"), *map(len, slots.values())) + 2
    rows = [
        f"Strategy: {state}    Utilization: {percent}% ({used}/{total} usable slots)"
        + (f" +{above} above the limits" if above else "")
        + _out(out),
        _learning(stats),
        "",
        f"{'Model':<16} {'In-Flight':<11}{'Capacity':<{slots_width}}{'Limit':<{width}}Cooldown",
    ]
    for name, model in models.items():
        capacity = model["capacity"]
        rows.append(
            f"{name:<16} {_bar(model['inFlight'], capacity):<11}"
            f"{slots[name]:<{slots_width}}{limits[name]:<{width}}{_cooldown(model)}"
        )
    queue = stats["queue"]
    rows.append("")
    rows.append(
        f"Queue: {queue['waiting']} waiting, longest {queue['longestWait']:.1f}s, "
        f"avg wait {stats['avgQueueWait']:.0f} ms, {queue['timeouts']} timeouts; "
        f"failovers: {stats['failovers']}"
    )
    if stats.get("accountPause"):
        pause = stats["accountPause"]
        span = pause_span(pause["remaining"], pause.get("resetsAt") or 0.0)
        rows.append(f"Account paused for {span}: {pause['reason']}")
    quota = _quota(stats.get("quota"), time.time() if now is None else now)
    if quota is not None:
        rows.append(quota)
    width = max(len(row) for row in rows) + 2
    title = "─ Chaos Mode "
    lines = ["┌" + title + "─" * (width - len(title)) + "┐"]
    lines += [f"│ {row:<{width - 2}} │" for row in rows]
    lines.append("└" + "─" * width + "┘")
    return "\n".join(lines)

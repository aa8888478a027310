"""The seed's Chaos Mode panel as a text table (the `chaos.status` command)."""

from __future__ import annotations

from typing import Any


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


def render_panel(stats: dict[str, Any]) -> str:
    """Render `chaos_stats()` output like the seed's dashboard panel."""
    used, total = stats["usedCapacity"], stats["totalCapacity"]
    percent = round(100 * used / total) if total else 0
    state = stats["strategy"] if stats["enabled"] else f"{stats['strategy']} (chaos mode OFF)"
    rows = [
        f"Strategy: {state}    Utilization: {percent}% ({used}/{total})",
        "",
        f"{'Model':<16} {'In-Flight':<11}{'Capacity':<10}Cooldown",
    ]
    for name, model in stats["modelDistribution"].items():
        capacity = model["capacity"]
        rows.append(
            f"{name:<16} {_bar(model['inFlight'], capacity):<11}"
            f"{str(model['inFlight']) + '/' + str(capacity):<10}{_cooldown(model)}"
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
        rows.append(f"Account paused {pause['remaining']:.0f}s: {pause['reason']}")
    width = max(len(row) for row in rows) + 2
    title = "─ Chaos Mode "
    lines = ["┌" + title + "─" * (width - len(title)) + "┐"]
    lines += [f"│ {row:<{width - 2}} │" for row in rows]
    lines.append("└" + "─" * width + "┘")
    return "\n".join(lines)

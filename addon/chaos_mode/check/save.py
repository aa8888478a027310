"""The aliases a check found, written where the proxy reads them: its learned-limits file, as learned rows
(`routing.aliases`), restored at the proxy's next start. What the file held is kept."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from chaos_mode.learning.file import read_state, write_state
from chaos_mode.learning.limits import STATE_FORMAT, STATE_VERSION
from chaos_mode.routing.aliases import ROW_PREFIX


def save_aliases(path: Path, aliases: Mapping[str, str], now: float) -> None:
    """Add `aliases` (asked -> served) to the learned-limits file at `path` as learned at `now` (wall
    clock); `ValueError` (one line) when the file is not the proxy's or cannot be written."""
    data = read_state(path)
    if data is None:
        data = {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "savedAt": now,
            "models": {},
            "account": None,
        }
    rows = data.get("aliases")
    rows = dict(rows) if isinstance(rows, dict) else {}
    rows.update(
        {ROW_PREFIX + asked: {"servedAs": served, "changedAt": now} for asked, served in aliases.items()}
    )
    try:
        write_state(path, {**data, "aliases": rows})
    except OSError as exc:
        raise ValueError(f"{path}: cannot write: {exc.strerror or exc}") from None

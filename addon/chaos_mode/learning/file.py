"""The learned-limits state file: read at start, written atomically whenever what was learned changes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Final

from chaos_mode.learning.limits import STATE_FORMAT

FILE_NAME: Final = "chaos-mode-limits.json"
MAX_BYTES: Final = 1024 * 1024  # ours are a few KB: anything larger is not ours


def state_path(option: str, confdir: str) -> Path | None:
    """Where learned limits are kept: the option's path, else `FILE_NAME` in confdir; None when `off`."""
    return None if option.strip().lower() == "off" else Path(option or Path(confdir) / FILE_NAME).expanduser()


def read_state(path: Path) -> dict[str, Any] | None:
    """The file's JSON, or None when there is no file; `ValueError` (one line) when it is not a learned-limits
    file, or cannot be read (then it must not be written over: it may be another file of the user's)."""
    try:
        if not path.is_file():
            if path.exists():
                raise ValueError(f"{path}: not a regular file")
            return None
        if path.stat().st_size > MAX_BYTES:
            raise ValueError(f"{path}: larger than {MAX_BYTES} bytes, not a learned-limits file")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ValueError(f"{path}: not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: not a chaos-mode learned-limits file")
    return data


def write_state(path: Path, data: Any) -> None:
    """Write `data` as JSON in one step: a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=1, sort_keys=True, allow_nan=False)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

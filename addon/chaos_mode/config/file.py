"""Reading a config file (YAML or JSON) into a `ModelRouting`: every failure is one `ConfigError` line.

The file is checked before it is read (a FIFO or a device would block start-up or never end), its size
and shape are bounded (deep nesting, YAML aliases that expand without end), and syntax errors say where.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

from chaos_mode.config.schema import ConfigError, ModelRouting, parse_config

MAX_BYTES: Final = 1 << 20  # a config is a few kB
MAX_DEPTH: Final = 16  # the deepest real key is modelRouting.models.<name>.<field>: 4
MAX_VALUES: Final = 100_000  # a catalog of thousands of models; not an alias bomb
_LONG_NUMBER: Final = re.compile(rf"[0-9a-fA-F_]{{{sys.get_int_max_str_digits() or 4300},}}")


def load_config(path: str | Path) -> ModelRouting:
    """Read a YAML or JSON config file (`~`: the home folder); raise `ConfigError` in one line."""
    path = Path(path).expanduser()
    text = _read_text(path)
    data = _decode(text, path)
    _check_shape(data, str(path))
    return parse_config(data, source=str(path))


def _read_text(path: Path) -> str:
    """The file's text, opened without blocking and only when it is a regular file of bounded size."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{path}: not a regular file (a FIFO, device or folder cannot be a config)")
    with os.fdopen(fd, "rb") as file:
        try:
            data = file.read(MAX_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: over {MAX_BYTES} bytes; a config is a few kB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None


def _decode(text: str, path: Path) -> Any:
    kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
    try:
        return _decode_json(text, path) if kind == "JSON" else _decode_yaml(text, path)
    except RecursionError:
        raise ConfigError(f"{path}: not valid {kind}: nested too deeply") from None
    except ConfigError:
        raise
    except ValueError as exc:  # Python's own limits, e.g. an integer of thousands of digits
        where = _long_number_line(text)
        at = f"line {where}: " if where else ""
        raise ConfigError(f"{path}: not valid {kind}: {at}{str(exc).split(';')[0]}") from None


def _decode_json(text: str, path: Path) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        """A key given twice is refused, as YAML refuses it (json would keep the last one silently)."""
        data = dict(pairs)
        if len(data) < len(pairs):
            twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
            shown = json.dumps(twice[:40]) + ("..." if len(twice) > 40 else "")
            raise ConfigError(f"{path}: not valid JSON: duplicate key {shown}")
        return data

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None


def _decode_yaml(text: str, path: Path) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        return YAML(typ="safe", pure=True).load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = exc.problem or exc.context or type(exc).__name__
        raise ConfigError(f"{path}: not valid YAML: {at}{problem}") from None
    except YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def _long_number_line(text: str) -> int | None:
    match = _LONG_NUMBER.search(text)
    return None if match is None else text.count("\n", 0, match.start()) + 1


def _check_shape(data: Any, source: str) -> None:
    """Refuse nesting deeper than any real key and more values than any real catalog, naming where."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    seen = 0
    while stack:
        value, where, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(f"{source}: more than {MAX_VALUES} values (YAML aliases expanding?)")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{source}: {where}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend(
                (item, f"{where}.{key}" if where else str(key), depth + 1) for key, item in value.items()
            )
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))

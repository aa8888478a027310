"""The learned-limits file: where it lives, what of it is read, and a write that is never seen half done."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from chaos_mode.learning.file import FILE_NAME, MAX_BYTES, read_state, state_path, write_state
from chaos_mode.learning.limits import STATE_FORMAT


def test_the_file_lives_in_the_confdir_unless_named_or_turned_off(tmp_path: Path) -> None:
    assert state_path("", str(tmp_path)) == tmp_path / FILE_NAME
    assert state_path(str(tmp_path / "mine.json"), "/elsewhere") == tmp_path / "mine.json"
    assert state_path("~/limits.json", "/elsewhere") == Path.home() / "limits.json"
    assert state_path(" OFF ", str(tmp_path)) is None


def test_no_file_is_nothing_learned_yet(tmp_path: Path) -> None:
    assert read_state(tmp_path / FILE_NAME) is None


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_directory, "not a regular file"),
        (_fifo, "not a regular file"),  # never opened: a read would wait for a writer
        (lambda p: p.write_bytes(b" " * (MAX_BYTES + 1)), f"larger than {MAX_BYTES} bytes"),
        (lambda p: p.write_bytes(b'{"models": "\xff"}'), "not valid JSON"),
        (lambda p: p.write_text('{"models": ', encoding="utf-8"), "not valid JSON"),
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8"), "not valid JSON"),
        (lambda p: p.write_text('{"models": {}}', encoding="utf-8"), "not a chaos-mode learned-limits file"),
        (lambda p: p.write_text("[]", encoding="utf-8"), "not a chaos-mode learned-limits file"),
    ],
    ids=["directory", "fifo", "too-large", "not-utf8", "cut-short", "too-deep", "no-format", "not-object"],
)
def test_a_file_that_cannot_be_used_is_one_line_naming_it(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    path = tmp_path / FILE_NAME
    make(path)
    with pytest.raises(ValueError, match=r"chaos-mode-limits\.json: ") as raised:
        read_state(path)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_what_is_written_is_read_back_and_its_folders_made(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / FILE_NAME
    state = {"format": STATE_FORMAT, "version": 2, "models": {"glm-5.3": {"value": 3, "reason": "1302 at 4"}}}
    write_state(path, state)
    assert read_state(path) == state
    write_state(path, {**state, "version": 3})
    assert read_state(path) == {**state, "version": 3}
    assert [p.name for p in path.parent.iterdir()] == [FILE_NAME]  # no temporary file left


def test_a_write_that_fails_leaves_the_old_file_and_no_trace(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    write_state(path, {"version": 1})
    before = path.read_bytes()
    with pytest.raises(ValueError):
        write_state(path, {"version": 2, "cost": math.nan})  # not JSON: refused mid-write
    assert path.read_bytes() == before
    assert json.loads(before) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]

"""The config file's watch: a change is reported once, when the file has held still for one look."""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.config.watch import FileWatch

type Look = tuple[int, int, int] | None  # (mtime in ns, size, inode); None: no file


def watch_of(looks: list[Look]) -> tuple[FileWatch, list[bool]]:
    """A watch whose file's stat is `looks[0]` when it is read, then each next look; and its answers."""
    stats = iter(looks)

    def stat(path: str) -> os.stat_result:
        assert path == "chaos.yaml"
        look = next(stats)
        if look is None:
            raise FileNotFoundError(path)
        mtime_ns, size, inode = look
        return os.stat_result((0o100644, inode, 0, 1, 0, 0, size, 0, 0, 0, 0.0, 0.0, 0.0, 0, mtime_ns, 0))

    watch = FileWatch("chaos.yaml", stat)
    return watch, [watch.changed() for _ in looks[1:]]


A, B, C = (1_000, 10, 7), (2_000, 10, 7), (3_000, 12, 7)


def test_an_unchanged_file_is_never_reported() -> None:
    assert watch_of([A] * 5)[1] == [False] * 4


def test_an_edit_is_reported_once_when_it_has_held_still_for_one_look() -> None:
    assert watch_of([A, A, B, B, B, B])[1] == [False, False, True, False, False]


def test_a_file_being_written_is_reported_only_when_its_writer_is_done() -> None:
    assert watch_of([A, B, C, (4_000, 20, 7), (4_000, 20, 7)])[1] == [False, False, False, True]


def test_the_time_the_size_or_the_inode_alone_is_a_change() -> None:
    for edited in [(9_000, 10, 7), (1_000, 11, 7), (1_000, 10, 8)]:
        assert watch_of([A, edited, edited])[1] == [False, True]


def test_a_file_removed_is_reported_once_and_its_return_again() -> None:
    assert watch_of([A, None, None, None, B, B])[1] == [False, True, False, False, True]
    assert watch_of([None, None, A, A])[1] == [False, False, True]


def test_a_change_undone_before_the_next_look_is_not_reported() -> None:
    assert watch_of([A, B, A, A])[1] == [False, False, False]


@given(st.lists(st.tuples(st.sampled_from([A, B, C, None]), st.integers(1, 3)), min_size=1, max_size=12))
def test_each_steady_state_that_differs_from_the_last_read_is_reported_once(
    runs: list[tuple[Look, int]],
) -> None:
    # Runs of one state (merged when the same state follows itself); the first run is the file as read.
    merged = [(look, sum(n for _, n in group)) for look, group in itertools.groupby(runs, key=lambda r: r[0])]
    looks = [look for look, n in merged for _ in range(n)]
    read = merged[0][0]
    expected = [False] * (merged[0][1] - 1)  # the first look of all is the read itself
    for look, n in merged[1:]:
        report = n >= 2 and look != read  # held still for one look, and not what was last read
        expected += [False, report, *[False] * (n - 2)][:n]
        read = look if report else read
    assert watch_of(looks)[1] == expected


def test_a_path_from_the_home_folder_is_watched_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    looked: list[str] = []

    def stat(path: str) -> os.stat_result:
        looked.append(path)
        raise FileNotFoundError(path)

    watch = FileWatch("~/chaos.yaml", stat)
    watch.changed()
    assert watch.path == "/home/someone/chaos.yaml" and looked == ["/home/someone/chaos.yaml"] * 2

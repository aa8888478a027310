"""The check's findings: the verdict on heads, the alias it tests, the file and the report."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.check.findings import Findings, NameResult, Verdict, alias_to_test, heads_verdict

NOW = datetime(2026, 12, 5, 7, 40, tzinfo=UTC)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([(0.01, 0.30)], False),  # the head at once, the first token later
        ([(0.30, 0.30), (0.31, 0.32)], True),  # the head with the first token
        ([(2.0, 2.05)], True),
        ([(0.01, 0.30), (0.30, 0.30), (0.29, 0.30)], True),  # the most samples win
        ([(0.01, 0.30), (0.30, 0.30)], None),  # a tie
        ([(0.01, 0.05)], None),  # a first token too soon to tell
        ([(0.15, 0.30)], False),  # the head half-way: still well before
        ([(0.22, 0.30)], None),  # the head 80 ms before: neither
        ([], None),
    ],
)
def test_heads_verdict(samples: list[tuple[float, float]], expected: bool | None) -> None:
    assert heads_verdict(samples).value is expected


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), max_size=8))
def test_heads_verdict_never_fails(samples: list[tuple[float, float]]) -> None:
    verdict = heads_verdict(samples)
    assert verdict.value in (True, False, None) and verdict.why


def test_the_alias_tested_is_one_of_the_target_with_the_most_aliases() -> None:
    names = {
        "glm-5.3": NameResult(served="glm-5.3"),
        "glm-5.1": NameResult(served="glm-5.3"),
        "glm-5.2": NameResult(served="glm-5.3"),
        "glm-4.7": NameResult(served="glm-5.3-flash"),
        "glm-4.5": NameResult(code="1311"),
    }
    assert alias_to_test(names) == ("glm-5.1", "glm-5.3")
    assert alias_to_test({"glm-5.3": NameResult(served="glm-5.3")}) is None


def test_the_file_holds_the_map_and_the_facts() -> None:
    findings = Findings("https://api.z.ai", "anthropic", NOW, requests=20, budget=40)
    findings.names = {
        "glm-5.3": NameResult(served="glm-5.3"),
        "glm-5.1": NameResult(served="glm-5.3"),
        "glm-4.5": NameResult(code="1311"),
        "glm-x": NameResult(code="1211"),
        "glm-4.6v": NameResult(code="1305", why="1305"),
        "glm-9": NameResult(why="budget spent"),
    }
    findings.alias_counters = Verdict("shared", "glm-5.1 refused 1302")
    findings.heads_with_first_token = Verdict(False, "head 0.01 s")
    findings.limits = {"glm-5.3": 3}
    document = json.loads(json.dumps(findings.document()))
    assert document == {
        "host": "https://api.z.ai",
        "checked": "2026-12-05T07:40:00Z",
        "door": "anthropic",
        "aliases": {"glm-5.1": "glm-5.3"},
        "served": ["glm-5.3"],
        "notServed": {"glm-4.5": "1311", "glm-x": "1211"},
        "unchecked": {"glm-4.6v": "1305", "glm-9": "budget spent"},
        "facts": {"aliasCounters": "shared", "headsWithFirstToken": False, "limits": {"glm-5.3": 3}},
    }
    report = findings.report()
    assert report[0].endswith("20 requests of 40")
    assert [line.split()[:3] for line in report[1:3]] == [
        ["glm-5.3", "served", "as"],
        ["glm-5.1", "->", "glm-5.3"],
    ]
    assert report[-2] == "alias concurrency counter: shared with its target (glm-5.1 refused 1302)"
    assert report[-1] == "stream heads: before the first token (head 0.01 s)"


def test_nothing_found_is_said_so() -> None:
    report = Findings("http://127.0.0.1:1", "openai", NOW).report()
    assert report[-2:] == [
        "alias concurrency counter: not found (not checked)",
        "stream heads: not found (not checked)",
    ]

"""`chaos-mode check` against the simulator's 2026-12 catalog over loopback: the alias map it finds is the
simulator's, each fact is found in both of its settings, the budget holds, the key is never shown, and a
key refused, a key no header can hold or a host not reached ends in one line."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos_mode.check.run import main
from chaos_mode.config.schema import parse_config
from chaos_mode.learning.file import read_state
from chaos_mode.routing.pool import ChaosPool
from chaos_mode_tools.devtools.certs import make_certs
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings
from chaos_mode_tools.sim.catalog import DEC_2026_ALIASES, DEC_2026_RETIRED
from support.run import run_module

pytestmark = pytest.mark.e2e

KEY = "sk-check-0123456789abcdef"
SETTINGS: dict[str, Any] = {
    "catalog": "2026-12",
    "latency_ms": 300,  # the first token 0.3 s after the request: a head sent at once is seen before it
    "token_interval_ms": 20,
    "output_tokens": 400,  # 8 s: a held stream holds its slot for the whole check
    "reject_delay_ms": 200,
    "quota_key": KEY,  # the models endpoint takes this key only
}


def sim(**overrides: Any) -> SimProcess:
    return SimProcess(SimSettings.from_mapping({**SETTINGS, **overrides}))


def seen(process: SimProcess) -> int:
    """Requests the simulator saw: at the doors and at the models endpoint."""
    with urllib.request.urlopen(process.base_url + "/sim/stats", timeout=5) as response:
        stats = json.load(response)
    return int(stats["requests"]) + int(stats["modelListReads"])


def check(
    process: SimProcess, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str]:
    monkeypatch.setenv("ZAI_KEY_FOR_TEST", KEY)
    code = main(["--key-env", "ZAI_KEY_FOR_TEST", "--base-url", process.base_url, "--settle", "0.4", *args])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture(scope="module")
def shared_early() -> Iterator[SimProcess]:
    with sim(alias_counters="shared", head_with_first_token=False) as process:
        yield process


@pytest.mark.parametrize("door", ["anthropic", "openai"])
def test_the_map_found_is_the_simulators(
    shared_early: SimProcess,
    door: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = seen(shared_early)
    written = tmp_path / "zai-check.json"
    code, out = check(shared_early, monkeypatch, capsys, "--door", door, "--write", str(written))
    assert code == 0, out
    document = json.loads(written.read_text(encoding="utf-8"))
    assert document["aliases"] == DEC_2026_ALIASES
    assert document["served"] == [
        "glm-4.6v",
        "glm-5.3",
        "glm-5.3-flash",
        "glm-5.4",
    ]  # glm-4.6v: not listed, built in
    assert document["notServed"] == dict.fromkeys(DEC_2026_RETIRED, "1311")
    assert document["unchecked"] == {}
    assert document["facts"] == {
        "aliasCounters": "shared",
        "headsWithFirstToken": False,
        "limits": {"glm-5.3-flash": 5},
    }
    assert document["host"] == shared_early.base_url and document["door"] == door
    used = seen(shared_early) - before
    assert f": {used} requests of 40" in out.splitlines()[0]
    assert used <= 40
    assert KEY not in out and KEY not in written.read_text(encoding="utf-8")


def test_the_aliases_found_are_saved_where_the_proxy_reads_them(
    shared_early: SimProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    limits_file = tmp_path / "chaos-mode-limits.json"
    code, out = check(shared_early, monkeypatch, capsys, "--save-aliases", str(limits_file))
    assert code == 0, out
    assert f"{len(DEC_2026_ALIASES)} aliases saved to {limits_file}" in out
    # The proxy's next start: an older catalog naming glm-4.7 and glm-5.1 folds them at once.
    config = parse_config(
        {
            "modelRouting": {
                "models": {
                    "glm-4.7": {"tier": "HEAVY", "maxConcurrency": 3},
                    "glm-5.1": {"tier": "HEAVY", "maxConcurrency": 2},
                    "glm-4.5": {"tier": "MEDIUM", "maxConcurrency": 4},
                }
            }
        }
    )
    pool = ChaosPool(config)
    assert pool.learned.restore(read_state(limits_file)) == len(DEC_2026_ALIASES)
    assert list(pool.config.models) == ["glm-5.3-flash", "glm-5.3", "glm-4.5"]
    assert pool.config.eligible_models("heavy") == ["glm-5.3"]
    assert KEY not in limits_file.read_text(encoding="utf-8")
    limits_file.write_text('{"not": "ours"}', encoding="utf-8")  # another program's file is left alone
    code, out = check(shared_early, monkeypatch, capsys, "--save-aliases", str(limits_file))
    assert code == 1 and "aliases not saved" in out and "Traceback" not in out
    assert limits_file.read_text(encoding="utf-8") == '{"not": "ours"}'


@pytest.mark.parametrize(
    ("counters", "heads_late"), [("own", False), ("shared", True), ("own", True)], ids=str
)
def test_each_fact_is_found_in_each_setting(
    counters: str,
    heads_late: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    written = tmp_path / "zai-check.json"
    with sim(alias_counters=counters, head_with_first_token=heads_late) as process:
        code, out = check(process, monkeypatch, capsys, "--write", str(written))
    assert code == 0, out
    facts = json.loads(written.read_text(encoding="utf-8"))["facts"]
    assert (facts["aliasCounters"], facts["headsWithFirstToken"]) == (counters, heads_late)
    said = {"own": "its own", "shared": "shared with its target"}[counters]
    assert f"alias concurrency counter: {said} (" in out
    assert ("stream heads: only with the first token" in out) is heads_late


@pytest.mark.parametrize("counters", ["shared", "own"])
def test_the_alias_counters_are_found_on_the_simulators_defaults(
    counters: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its 30-token answers end in 0.9 s, before its 1302 (after 1 s) says the target is full: the held
    # streams must be held again for the alias, and an alias answered only while they are open.
    written = tmp_path / "zai-check.json"
    settings = {"catalog": "2026-12", "quota_key": KEY, "alias_counters": counters}
    with SimProcess(SimSettings.from_mapping(settings)) as process:
        code, out = check(process, monkeypatch, capsys, "--write", str(written))
    assert code == 0, out
    facts = json.loads(written.read_text(encoding="utf-8"))["facts"]
    assert (facts["aliasCounters"], facts["limits"]) == (counters, {"glm-5.3-flash": 5}), out


def test_an_alias_answered_as_the_held_streams_end_is_not_its_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Answers that end 0.1 s after their head: no held stream is open 0.2 s after the alias's answer.
    settings = {"catalog": "2026-12", "quota_key": KEY, "alias_counters": "own", "output_tokens": 0}
    with SimProcess(SimSettings.from_mapping({**settings, "latency_ms": 100})) as process:
        code, out = check(process, monkeypatch, capsys)
    assert code == 0, out
    assert "alias concurrency counter: not found (glm-4.5-flash answered only after a held stream" in out


@pytest.mark.parametrize(
    ("budget", "said"),
    [(9, "no verdict (budget spent)"), (19, "alias concurrency counter: not found (budget spent with")],
)
def test_the_budget_is_kept(
    shared_early: SimProcess,
    budget: int,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = seen(shared_early)
    code, out = check(shared_early, monkeypatch, capsys, "--budget", str(budget))
    assert code == 0, out
    used = seen(shared_early) - before
    assert used <= budget
    assert f": {used} requests of {budget}" in out
    assert said in out
    assert "alias concurrency counter: not found" in out


def test_a_key_not_taken_is_one_line(shared_early: SimProcess) -> None:
    result = run_module(
        "chaos_mode",
        "check",
        "--base-url",
        shared_early.base_url,
        "--key-env",
        "ZAI_WRONG_KEY",
        timeout=60,
        env={"ZAI_WRONG_KEY": KEY + "-wrong"},
    )
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "chaos-mode check: z.ai did not take the key (HTTP 401, code 1002): check its variable"
    ]
    assert result.stderr == ""


def test_a_host_not_reached_is_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the check runs: nothing listens there
    result = run_module(
        "chaos_mode", "check", "--base-url", f"http://127.0.0.1:{port}", timeout=60, env={"ZAI_API_KEY": KEY}
    )
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 1
    assert result.stdout.startswith(f"chaos-mode check: cannot reach http://127.0.0.1:{port}: ")
    assert result.stderr == ""
    assert KEY not in result.stdout


def test_no_key_is_one_line() -> None:
    result = run_module("chaos_mode", "check", "--key-env", "ZAI_UNSET_FOR_TEST", timeout=60, env={})
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        "chaos-mode check: set ZAI_UNSET_FOR_TEST to your z.ai key (or name another with --key-env)"
    ]


@pytest.mark.parametrize("tail", ["\n" + KEY, " " + KEY, "\x1b[2J", "\x7f", "\u00e9"])
def test_a_key_no_header_can_hold_is_one_line_never_shown(
    tail: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZAI_KEY_FOR_TEST", KEY + tail)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there: a request sent would not be reached
    assert main(["--key-env", "ZAI_KEY_FOR_TEST", "--base-url", f"http://127.0.0.1:{port}"]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "chaos-mode check: ZAI_KEY_FOR_TEST holds a character no key has (a newline, a space, non-ASCII)"
    ]
    assert err == ""


@pytest.mark.parametrize(
    "args",
    [
        ["--timeout", "nan"],
        ["--timeout", "inf"],
        ["--timeout", "1e10"],  # finite, yet more than a socket's timeout can be
        ["--settle", "inf"],
        ["--settle", "nan"],
        ["--base-url", "http://127.0.0.1:99999"],
        ["--base-url", "http://127.0.0.1:abc"],
        ["--base-url", "http://[::1"],
        ["--base-url", "http://a b"],
        ["--base-url", "ftp://127.0.0.1"],
    ],
    ids=" ".join,
)
def test_a_bad_argument_is_one_line_before_any_request(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZAI_KEY_FOR_TEST", KEY)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert main(["--key-env", "ZAI_KEY_FOR_TEST", "--base-url", url, "--budget", "3", *args]) == 2
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.accept()  # no request came
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and out.startswith("chaos-mode check: ") and err == ""


def test_a_certificate_not_trusted_is_one_line(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    with sim(tls_cert=str(certs.cert), tls_key=str(certs.key)) as process:
        result = run_module(
            "chaos_mode", "check", "--base-url", process.base_url, timeout=60, env={"ZAI_API_KEY": KEY}
        )
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"chaos-mode check: cannot reach {process.base_url}: TLS: CERTIFICATE_VERIFY_FAILED"
    ]
    assert result.stderr == ""

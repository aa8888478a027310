"""`chaos-mode check` against a z.ai that echoes the key in every answer, lists names that are no names and
leaves one unanswered: the key never shows, the odd names are not asked for, and a request that gets no head
is given up after `--timeout`; against one whose answers are pings without end: each is given up too;
against one that answers escapes, a status line or an error's message: they are printed escaped and cut."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chaos_mode.check.run import main
from support.run import run_module

pytestmark = pytest.mark.e2e

KEY = "sk-echoed-0123456789abcdef"
SILENT = "glm-silent"  # never answered


class Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ListsOne(Quiet):
    """Lists one name, `NAME`."""

    NAME = ""

    def do_GET(self) -> None:
        self._send(200, json.dumps({"object": "list", "data": [{"id": self.NAME}]}).encode())


class Echoing(Quiet):
    def do_GET(self) -> None:
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        names = [f"glm-{key}", "glm-\x1b[31m", "glm-\ud800", "", 7, SILENT, "glm-refused"]
        self._send(200, json.dumps({"object": "list", "data": [{"id": n} for n in names]}).encode())

    def do_POST(self) -> None:
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        model = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["model"]
        if model == SILENT:
            time.sleep(3)
            return
        if model == "glm-refused":
            error = {"type": "error", "error": {"code": "1311", "message": f"[1311][no plan for {key}]"}}
            self._send(429, json.dumps(error).encode())
            return
        start = {"type": "message_start", "message": {"model": f"served-as-{key}", "content": []}}
        self._send(
            200, b"event: message_start\ndata: " + json.dumps(start).encode() + b"\n\n", "text/event-stream"
        )


class Pinging(ListsOne):
    """Lists one name, and answers it with a stream of pings that names no model (for 30 s at most)."""

    NAME = "glm-pings"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for _ in range(300):
            try:
                self.wfile.write(b'event: ping\ndata: {"type": "ping"}\n\n')
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.1)


# Retitles the terminal, turns it red; the key straddles where a message is cut.
ESCAPES = "\x1b]0;pwned\x07\x1b[31m" + "x" * 110 + KEY


class Escaping(ListsOne):
    """Lists one name, and refuses it with a message of escapes (and no code)."""

    NAME = "glm-escaped"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send(503, json.dumps({"error": {"message": ESCAPES}}).encode())


class NotHttp(socketserver.StreamRequestHandler):
    """Answers anything with a status line of escapes, far too long."""

    def handle(self) -> None:
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        self.wfile.write(ESCAPES.encode() + b"y" * 5000 + b"\r\n\r\n")


def serve(handler: type[socketserver.BaseRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def echoing() -> Iterator[str]:
    yield from serve(Echoing)


@pytest.fixture
def pinging() -> Iterator[str]:
    yield from serve(Pinging)


@pytest.fixture
def escaping() -> Iterator[str]:
    yield from serve(Escaping)


@pytest.fixture
def not_http() -> Iterator[str]:
    yield from serve(NotHttp)


def test_the_key_never_shows_and_a_silent_name_times_out(
    echoing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZAI_API_KEY", KEY)
    written = tmp_path / "found.json"
    argv = [
        "--base-url",
        echoing,
        "--budget",
        "4",
        "--timeout",
        "0.5",
        "--settle",
        "0",
        "--write",
        str(written),
    ]
    started = time.monotonic()
    assert main(argv) == 0
    assert time.monotonic() - started < 2.5  # the silent name given up after its timeout, not its 3 s
    out = capsys.readouterr().out
    text = written.read_text(encoding="utf-8")
    assert KEY not in out and KEY not in text
    document = json.loads(text)
    assert document["aliases"] == {"glm-***": "served-as-***"}
    assert document["unchecked"][SILENT] == "no head in 0.5 s"
    assert document["notServed"] == {"glm-refused": "1311"}
    assert "\x1b" not in out and "glm-\ud800" not in out


def test_an_answer_of_pings_is_given_up_after_the_timeout(pinging: str) -> None:
    started = time.monotonic()
    result = run_module(
        "chaos_mode",
        "check",
        *("--base-url", pinging, "--budget", "2", "--timeout", "1", "--settle", "0"),
        timeout=20,
        env={"ZAI_API_KEY": KEY},
    )
    assert time.monotonic() - started < 10  # the name given up 1 s after it was sent, not after 30 s of pings
    assert result.returncode == 0, result.stdout + result.stderr
    said = [line.split(None, 1) for line in result.stdout.splitlines() if line.startswith("  glm-pings ")]
    assert said == [["glm-pings", "no verdict (no model named)"]]


def test_a_status_line_of_escapes_is_printed_escaped_and_cut(
    not_http: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZAI_API_KEY", KEY)
    assert main(["--base-url", not_http, "--budget", "2", "--timeout", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"chaos-mode check: cannot reach {not_http}: '\\x1b]0;pwned\\x07")
    assert len(out.splitlines()) == 1 and out.rstrip("\n").isprintable() and len(out) < 250
    assert KEY[:5] not in out


def test_a_message_of_escapes_is_printed_escaped_and_cut(
    escaping: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZAI_API_KEY", KEY)
    assert main(["--base-url", escaping, "--budget", "2", "--timeout", "2", "--settle", "0"]) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if line.startswith("  glm-escaped ")]
    assert len(said) == 1 and "no verdict ('\\x1b]0;pwned\\x07" in said[0] and len(said[0]) < 200
    assert all(line.isprintable() for line in out.splitlines())
    assert KEY[:5] not in out

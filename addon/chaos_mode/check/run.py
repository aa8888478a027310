"""`chaos-mode check`: what z.ai does on the user's own account, in a few dozen short requests.

1. Which names z.ai routes to which model: one tiny streamed request per name (its models list and the
   built-in catalog), read until the answer names the model that serves it; 1311/1211/1113 = not served.
2. Whether an alias shares its target's concurrency counter: the target held full (long streams added until
   a 1302, those ended since replaced), then the alias sent: refused 1302 = shared (unless another model is
   refused too: the account is full), answered with every held stream still open after = a counter of its
   own.
3. Whether a stream's head comes before its first token or only with it: timed on the held streams.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from chaos_mode.check.findings import Counters, Findings, NameResult, Verdict, alias_to_test, heads_verdict
from chaos_mode.check.save import save_aliases
from chaos_mode.check.wire import DOORS, BudgetSpent, CheckError, Stream, Upstream
from chaos_mode.learning.file import FILE_NAME
from chaos_mode.zai.catalog import DEFAULT_ALIASES, DEFAULT_CATALOG, EARLY_2026_CATALOG

DEFAULT_BUDGET = 40
DEFAULT_KEY_ENV = "ZAI_API_KEY"
MIN_KEY_LENGTH = 8
MAX_SECONDS = 3600  # --timeout and --settle at most: more is a mistake (NaN, inf) or overflows a socket
_KEY = re.compile(r"[\x21-\x7e]+")  # what a key sent in a header can hold: visible ASCII
# An alias answered counts apart only if every held stream is still open this long after its answer came:
# longer than an answer's end takes to reach the check, so each held its slot when the alias was let in.
HELD_MARGIN = 0.2
BUSY_CODES = frozenset({"1302", "1303", "1305", "1312"})  # refused for load, not for the name


@dataclass
class Held:
    """A stream kept open (and read) so that it holds its slot."""

    stream: Stream
    reader: threading.Thread


class Check:
    def __init__(self, upstream: Upstream, *, settle: float, sleep: Callable[[float], None] = time.sleep):
        self.up = upstream
        self.settle = settle
        self.sleep = sleep
        self.done = threading.Event()  # the held streams stop reading and close
        self.held: list[Held] = []

    def names(self, listed: Sequence[str]) -> dict[str, NameResult]:
        """What a request for each name (listed first, then the built-in catalog's, its aliases and early
        2026's) is answered as; a name refused for load (its model's slots still taken by the requests
        before it) is asked once more."""
        known = [*DEFAULT_CATALOG, *DEFAULT_ALIASES, *EARLY_2026_CATALOG]
        results = {name: self.name(name) for name in dict.fromkeys([*listed, *known])}
        busy = [name for name, result in results.items() if result.code in BUSY_CODES]
        if busy:
            self.sleep(self.settle)
            results.update((name, self.name(name)) for name in busy)
        return results

    def name(self, name: str) -> NameResult:
        if self.up.left <= 0:
            return NameResult(why="budget spent")
        stream = self.up.open(name, long=False)
        if not stream.answered:
            return NameResult(code=stream.code, why=_refusal(stream))
        self.up.read_model(stream)
        return NameResult(served=stream.served, why="" if stream.served else "no model named")

    def hold(self, name: str) -> Stream:
        """Send a long streamed request for `name`; an answered one is kept open and read in a thread."""
        stream = self.up.open(name, long=True)
        if stream.answered:
            reader = threading.Thread(target=self.up.read_first_token, args=(stream, self.done), daemon=True)
            reader.start()
            self.held.append(Held(stream, reader))
        return stream

    def alias_counters(self, names: dict[str, NameResult]) -> tuple[Verdict[Counters], dict[str, int]]:
        """Hold the target of an alias full, then send the alias (see the module's docstring): measures
        `zai.assumptions.ALIAS_SHARES_COUNTER`. Held streams that ended (short answers) are replaced
        before the alias is sent, and again when one ends as it is answered."""
        pair = alias_to_test(names)
        if pair is None:
            return Verdict(None, "no name was answered as another model"), {}
        alias, target = pair
        self.sleep(self.settle)  # the probes' requests, closed early, leave z.ai's counters
        limit: int | None = None  # streams answered before the target refused one 1302
        spent = "budget spent"
        while True:
            held = [h for h in self.held if h.reader.is_alive()]
            full = limit is not None and len(held) >= limit
            if self.up.left < (1 if full else 2):
                verdict: Verdict[Counters] = Verdict(None, f"{spent} with {len(held)} {target} streams held")
                break
            if full:
                found = self.probe(alias, target, held, names)
                if found is None:  # a held stream ended: replaced, the alias sent again
                    spent = f"{alias} answered only after a held stream had ended, then the budget spent"
                    continue
                verdict = found
                break
            stream = self.hold(target)
            if stream.answered:
                continue
            if stream.code != "1302":
                verdict = Verdict(None, f"{target} answered {_refusal(stream)} with {len(held)} held")
                break
            if limit is not None:
                verdict = Verdict(None, f"{target} refused 1302 again with {len(held)} of {limit} held")
                break
            limit = len(self.held)
            if not limit:
                verdict = Verdict(None, f"{target} refused 1302 with none held: the account is busy")
                break
        return verdict, {} if limit is None else {target: limit}

    def probe(
        self, alias: str, target: str, held: Sequence[Held], names: dict[str, NameResult]
    ) -> Verdict[Counters] | None:
        """Send `alias` while `held` fill `target`; None when it was answered but a held stream ended before
        it could be shown to have held its slot until then."""
        full = f"{target} full at {len(held)} streams"
        probe = self.up.open(alias, long=False)
        probe.close()
        if probe.answered:
            self.sleep(HELD_MARGIN)
            if not all(h.reader.is_alive() for h in held):
                return None
            return Verdict("own", f"{alias} answered with {full}")
        if probe.code != "1302":
            return Verdict(None, f"{alias} answered {_refusal(probe)} with {full}")
        other = next((n for n, r in names.items() if r.served == n and n != target), None)
        if other is None or self.up.left < 1:
            return Verdict("shared", f"{alias} refused 1302 with {full}; the account not tested")
        control = self.up.open(other, long=False)
        control.close()
        if control.answered:
            return Verdict("shared", f"{alias} refused 1302 with {full}, {other} answered")
        return Verdict(None, f"{alias} and {other} both refused with {full}: the account is full")

    def heads(self, names: dict[str, NameResult]) -> Verdict[bool]:
        """When the held streams' heads and first tokens came (one stream sent for it when none is held)."""
        if not self.held:
            served = sorted(n for n, r in names.items() if r.served == n)
            if not served or self.up.left < 1:
                return Verdict(None, "no stream to time")
            stream = self.hold(served[0])
            if not stream.answered:
                return Verdict(None, f"{served[0]} answered {_refusal(stream)}")
        deadline = time.monotonic() + self.up.timeout
        for held in self.held:
            while held.stream.first_token_seconds is None and held.reader.is_alive():
                if time.monotonic() > deadline:
                    break
                held.reader.join(0.05)
        samples = [
            (h.stream.head_seconds, h.stream.first_token_seconds)
            for h in self.held
            if h.stream.head_seconds is not None and h.stream.first_token_seconds is not None
        ]
        return heads_verdict(samples)

    def release(self) -> None:
        self.done.set()
        for held in self.held:
            held.stream.close()
        for held in self.held:
            held.reader.join(2.0)


def run(upstream: Upstream, host: str, *, settle: float, now: datetime) -> Findings:
    findings = Findings(host, upstream.door, now, budget=upstream.budget)
    check = Check(upstream, settle=settle)
    try:
        findings.names = check.names(upstream.list_models())
        findings.alias_counters, findings.limits = check.alias_counters(findings.names)
        findings.heads_with_first_token = check.heads(findings.names)
    except BudgetSpent:
        pass
    finally:
        check.release()
        findings.requests = upstream.sent
    return findings


def _hider(key: str) -> Callable[[str], str]:
    """What the check prints goes through this: the key (were z.ai to echo it in a model's name, say)
    never shows. A key too short to be one is not looked for: it would blot out common words."""
    if len(key) < MIN_KEY_LENGTH:
        return lambda text: text
    return lambda text: text.replace(key, "***")


def _refusal(stream: Stream) -> str:
    if stream.code:
        return stream.code
    return stream.message or f"HTTP {stream.status}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chaos-mode check",
        description="Find, on your own z.ai account, which names z.ai routes to which model, whether an "
        "alias shares its target's concurrency counter, and whether stream heads come before the first "
        "token. Uses your key and at most --budget short requests (a few long streams among them).",
    )
    parser.add_argument(
        "--key-env",
        default=DEFAULT_KEY_ENV,
        metavar="NAME",
        help=f"environment variable holding the key (default {DEFAULT_KEY_ENV}); the key is never printed",
    )
    parser.add_argument("--base-url", default="https://api.z.ai", help="z.ai (default https://api.z.ai)")
    parser.add_argument("--door", choices=DOORS, default="anthropic", help="door to ask (default anthropic)")
    parser.add_argument(
        "--budget", type=int, default=DEFAULT_BUDGET, help=f"most requests sent (default {DEFAULT_BUDGET})"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for any one read (default 30)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds to wait after the per-name requests, before holding streams (default 3)",
    )
    parser.add_argument("--write", metavar="FILE", help="write the findings (aliases, facts) to FILE as JSON")
    parser.add_argument(
        "--save-aliases",
        metavar="LIMITS_FILE",
        nargs="?",
        const=str(Path("~/.mitmproxy") / FILE_NAME),
        help="add the aliases found to the proxy's learned-limits file, read at its next start "
        f"(default ~/.mitmproxy/{FILE_NAME}, the chaos_limits_file option's)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    key = os.environ.get(args.key_env, "").strip()
    if not key:
        print(f"chaos-mode check: set {args.key_env} to your z.ai key (or name another with --key-env)")
        return 2
    if not _KEY.fullmatch(key):
        print(
            f"chaos-mode check: {args.key_env} holds a character no key has (a newline, a space, non-ASCII)"
        )
        return 2
    if args.budget < 1 or not 0 < args.timeout <= MAX_SECONDS or not 0 <= args.settle <= MAX_SECONDS:
        print(
            f"chaos-mode check: --budget must be >= 1, --timeout > 0, --settle >= 0 (at most {MAX_SECONDS})"
        )
        return 2
    hide = _hider(key)
    try:
        upstream = Upstream(args.base_url, key, budget=args.budget, timeout=args.timeout, door=args.door)
    except CheckError as exc:  # the base URL
        print(f"chaos-mode check: {hide(str(exc))}")
        return 2
    try:
        findings = run(upstream, args.base_url, settle=args.settle, now=datetime.now(UTC))
    except CheckError as exc:
        print(f"chaos-mode check: {hide(str(exc))}")
        return 1
    except KeyboardInterrupt:
        return 130
    print(hide("\n".join(findings.report())))
    if args.write:
        text = hide(json.dumps(findings.document(), indent=2, ensure_ascii=False))
        try:
            Path(args.write).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"chaos-mode check: cannot write {args.write}: {exc.strerror or exc}")
            return 1
        print(f"findings written to {args.write}")
    if args.save_aliases and findings.aliases:
        path = Path(args.save_aliases).expanduser()
        try:
            save_aliases(path, findings.aliases, time.time())
        except ValueError as exc:
            print(f"chaos-mode check: aliases not saved: {exc}")
            return 1
        print(f"{len(findings.aliases)} aliases saved to {path}: the proxy reads them at its next start")
    return 0


if __name__ == "__main__":
    sys.exit(main())

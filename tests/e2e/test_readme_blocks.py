"""The README's shell blocks run as pasted: each one either runs here, with bash, in the checkout, or is
named below with the reason it cannot (a new block must be classified)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos_mode_tools.devtools.processes import port_open
from support.readme import readme_blocks

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 60.0  # seconds for one block; the offline one takes about 5 here
EXIT_TIMEOUT = 5.0  # seconds for what a block stopped to be gone

OFFLINE = "Try it offline, in front of the simulator #1"
# Each block by its heading and its place under it: None if it runs here, else why not.
BLOCKS: dict[str, str | None] = {
    "Quick start #1": "installs from the package index, then runs the proxy in the foreground",
    "Quick start #2": "the test command itself",
    OFFLINE: None,
    "Claude Code and other agents #1": "z.ai online, a real key; the proxy and `claude` in the foreground",
    "Claude Code and other agents #2": "the proxy in the foreground, for agents reaching z.ai online",
}
TOOLS = {OFFLINE: ("curl",)}  # what it runs besides bash and `chaos-mode`
PORTS = {OFFLINE: (8700, 8080, 9464)}  # fixed in the block: free before it runs
PRINTS = {OFFLINE: r'"model": ?"glm-[\w.-]+"'}  # what its output shows: a GLM model answered


def _named() -> dict[str, str]:
    """The README's shell blocks by name: their heading and their place under it ("Quick start #2")."""
    named: dict[str, str] = {}
    for heading, text in readme_blocks("sh"):
        named[f"{heading} #{1 + sum(name.rsplit(' #', 1)[0] == heading for name in named)}"] = text
    return named


def _runnable() -> list[str]:
    return [name for name in _named() if name in BLOCKS and BLOCKS[name] is None]


def _alive(group: int) -> list[str]:
    """The live (not zombie) processes of a process group, as `pid command`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = stat.with_name("cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(f"{stat.parent.name} {command}")
    return found


def test_every_shell_block_is_classified() -> None:
    names = list(_named())
    assert [name for name in names if name not in BLOCKS] == [], "a new README block: classify it in BLOCKS"
    assert [name for name in BLOCKS if name not in names] == [], "a README block went: update BLOCKS"


@pytest.mark.parametrize("name", _runnable())
def test_a_block_runs_as_pasted(name: str, tmp_path: Path) -> None:
    """bash reads the block as an interactive shell reads a paste (a command that reads its standard input
    would eat the lines after it); it ends with nothing left running and nothing new in the checkout."""
    text = _named()[name]
    missing = [tool for tool in TOOLS.get(name, ()) if shutil.which(tool) is None]
    if missing:
        why = f"the README block runs {missing}, not on PATH: apt-get install {' '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(why + " — required when CI is set", pytrace=False)
        pytest.skip(why)
    taken = [port for port in PORTS.get(name, ()) if port_open("127.0.0.1", port)]
    assert taken == [], f"the README block uses ports {taken}, taken here: free them to run this test"
    before = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # `chaos-mode`
        "HOME": str(tmp_path),  # mitmproxy's confdir (its CA, the learned limits) under ~
        "TMPDIR": str(tmp_path),
    }
    script, out, err = tmp_path / "block.sh", tmp_path / "stdout", tmp_path / "stderr"
    script.write_text(text, encoding="utf-8")
    with script.open("rb") as stdin, out.open("wb") as stdout, err.open("wb") as stderr:
        shell = subprocess.Popen(
            ["bash"], cwd=ROOT, env=env, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True
        )
    try:
        ended = True
        try:
            shell.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            ended = False
        deadline = time.monotonic() + EXIT_TIMEOUT
        while (left := _alive(shell.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)  # after a timeout, or what the block left running
        shell.wait()
    output = "".join(path.read_text(encoding="utf-8", errors="replace") for path in (out, err))
    after = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    problems = []
    if not ended:
        problems.append(f"the block did not end within {RUN_TIMEOUT} s")
    if left:
        problems.append(f"still running after the block: {left}")
    if after != before:
        problems.append(f"new in the checkout: {after}")
    if name in PRINTS and not re.search(PRINTS[name], output):
        problems.append(f"nothing like {PRINTS[name]} in what it printed")
    assert problems == [], f"{problems}\n{output}"

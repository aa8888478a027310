"""The code stays ruff- and mypy-clean: run both as part of the test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        ("ruff", "check", "addon", "tests"),
        ("ruff", "format", "--check", "addon", "tests"),
        ("mypy",),
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_clean(args: tuple[str, ...]) -> None:
    result = _run(*args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_does_not_import_mitmproxy() -> None:
    """Pure core, thin adapter: only the adapter modules (and the flow recorder, a development tool
    that writes mitmproxy flow files) may import mitmproxy."""
    package = ROOT / "addon" / "chaos_mode"
    allowed = {"addon.py", "flow_bodies.py", "flow_view.py", "waiting.py", "sim/record.py"}
    offenders = [
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if path.relative_to(package).as_posix() not in allowed
        and any(
            line.lstrip().startswith(("import mitmproxy", "from mitmproxy"))
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert offenders == []

"""Running the project's command-line tools from the checkout, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_module(
    module: str, *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m module args...` from the checkout, its output kept; never raises on a failure. The
    checkout's package comes first on the child's path (not one installed elsewhere in the environment);
    `env` adds to the environment."""
    path = os.pathsep.join(p for p in (str(ROOT / "addon"), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {}), "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )

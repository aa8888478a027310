"""The packages the addon needs beyond mitmproxy's own, and the one line that says how to add them."""

from __future__ import annotations

from typing import Final

# Import name -> distribution name, for every runtime import that mitmproxy does not bring itself
# (mitmproxy already requires ruamel.yaml and tornado).
EXTRA_PACKAGES: Final = {
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
    "prometheus_client": "prometheus-client",
}
_INSTALL: Final = " ".join(sorted(set(EXTRA_PACKAGES.values())))


def missing_package(exc: ModuleNotFoundError) -> str | None:
    """The distribution to install when `exc` is one of the addon's own dependencies, else None."""
    return EXTRA_PACKAGES.get((exc.name or "").split(".", 1)[0])


def install_hint(package: str) -> str:
    """One line: what is missing and how to add it to the environment mitmproxy runs in."""
    return (
        f"chaos-mode cannot load: the Python package {package} is not installed where mitmproxy runs. "
        f"Add the addon's packages to mitmproxy's environment: pipx inject mitmproxy {_INSTALL} "
        f"(pipx), or pip install {_INSTALL} with that environment's pip; the standalone mitmproxy binary "
        "cannot take packages: install mitmproxy with pipx or pip instead (README: mitmproxy installed on "
        "its own)"
    )


def versions_hint(python: tuple[int, ...], mitmproxy: str) -> str | None:
    """One line when this Python or this mitmproxy is older than the addon needs (3.12, 12): the addon's
    modules would fail to import with a traceback (a syntax error, a package mitmproxy 11 lacks)."""
    major = mitmproxy.split(".", 1)[0]
    if python[:2] >= (3, 12) and major.isdigit() and int(major) >= 12:
        return None
    return (
        f"chaos-mode cannot load: it needs Python 3.12 or later and mitmproxy 12 or later; mitmdump runs on "
        f"Python {'.'.join(map(str, python[:3]))} with mitmproxy {mitmproxy}: install chaos-mode with pipx "
        "(pipx install --python python3.12 .), which brings its own mitmproxy"
    )

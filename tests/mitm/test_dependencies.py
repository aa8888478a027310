"""The install hint names exactly the packages the addon needs beyond mitmproxy's own."""

from __future__ import annotations

import re
from importlib.metadata import requires

from chaos_mode.mitm.dependencies import EXTRA_PACKAGES, install_hint, missing_package


def _names(distribution: str) -> set[str]:
    """The distributions `distribution` requires at run time (no extras), normalised."""
    found = set()
    for requirement in requires(distribution) or []:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]
        found.add(re.sub(r"[-_.]+", "-", name).lower())
    return found


def test_the_extra_packages_are_what_the_addon_requires_beyond_mitmproxy() -> None:
    beyond = _names("chaos-mode") - _names("mitmproxy") - {"mitmproxy"}
    assert set(EXTRA_PACKAGES.values()) == beyond


def test_a_missing_dependency_is_named_with_what_to_install() -> None:
    exc = ModuleNotFoundError(
        "No module named 'pydantic_core._pydantic_core'", name="pydantic_core._pydantic_core"
    )
    assert missing_package(exc) == "pydantic"
    hint = install_hint("pydantic")
    assert "\n" not in hint
    assert "pipx inject mitmproxy prometheus-client pydantic" in hint
    assert "standalone mitmproxy binary cannot take packages" in hint


def test_another_missing_module_is_not_ours_to_explain() -> None:
    assert missing_package(ModuleNotFoundError("No module named 'foo'", name="foo")) is None
    assert missing_package(ModuleNotFoundError("no name")) is None

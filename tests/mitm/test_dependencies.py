"""The install hint names exactly the packages the addon needs beyond mitmproxy's own."""

from __future__ import annotations

import re
from importlib.metadata import requires

from chaos_mode.mitm.dependencies import EXTRA_PACKAGES, install_hint, missing_package, versions_hint


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


def test_a_python_or_a_mitmproxy_too_old_is_one_line_naming_both() -> None:
    """mitmdump on Python 3.11 met a syntax error in the addon's modules; mitmproxy 11 a missing package."""
    assert versions_hint((3, 12, 1), "12.2.1") is None and versions_hint((3, 13, 0), "13.0") is None
    for python, mitmproxy in [((3, 11, 7), "12.2.1"), ((3, 12, 1), "11.1.3"), ((3, 12, 1), "dev")]:
        hint = versions_hint(python, mitmproxy)
        assert hint is not None and "\n" not in hint
        assert "needs Python 3.12 or later and mitmproxy 12 or later" in hint and mitmproxy in hint

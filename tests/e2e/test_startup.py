"""Starting mitmdump with a bad config: one plain error and an exit, never a traceback."""

from __future__ import annotations

import pytest

from chaos_mode.child import ProxyProcess

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"chaosMode": {"strategy": "fastest"}}, "modelRouting.chaosMode.strategy: Input should be"),
        (
            {"chaosMode": {"excludeModels": ["glm-9"]}},
            "modelRouting.chaosMode.excludeModels: not in the catalog",
        ),
    ],
)
def test_a_bad_config_at_start_is_one_clear_line_and_an_exit(config: dict[str, object], message: str) -> None:
    proxy = ProxyProcess(config=config, start_timeout=30)
    with pytest.raises(RuntimeError, match="exited") as raised:
        proxy.start()
    output = str(raised.value)
    assert "chaos-mode: chaos_config: " in output
    assert message in output
    assert "Traceback" not in output
    assert proxy.returncode not in (None, 0)

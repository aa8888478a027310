"""An edited chaos_config file is read again by a running mitmdump, as `chaos.reload` reads it: a good edit
takes effect within seconds, a broken one keeps the config in force and says why in one line."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import MakeProxy
from .support import Sim, poll, routing, status

pytestmark = pytest.mark.e2e

WITHIN = 5.0  # seconds: the watch looks once a second and reads an edit once it held still for one look


def lines_with(text: str, output: str) -> list[str]:
    """The lines of mitmdump's output holding `text`, from the addon's `chaos-mode:` on."""
    return [line[line.index("chaos-mode:") :] for line in output.splitlines() if text in line]


async def test_an_edited_config_file_takes_effect_and_a_broken_edit_keeps_the_old(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    proxy = await make_proxy(upstream=sim.base_url, config=routing(chaosMode={"strategy": "round-robin"}))
    path = proxy.workdir / "chaos.json"
    assert (await status(http, proxy))["strategy"] == "round-robin"

    def write(block: dict[str, Any]) -> None:
        path.write_text(json.dumps({"modelRouting": block}), encoding="utf-8")

    write(routing(chaosMode={"strategy": "weighted-random"}))
    document = await poll(lambda: status(http, proxy), lambda d: d["strategy"] == "weighted-random", WITHIN)
    assert document["strategy"] == "weighted-random"
    reloaded = "changed: config reloaded"
    output = await poll(lambda: asyncio.to_thread(proxy.output), lambda text: reloaded in text, WITHIN)
    assert lines_with(reloaded, output) == [f"chaos-mode: {path} changed: config reloaded"]

    # Saved as many editors save: a new file renamed over the old one.
    broken = path.with_suffix(".new")
    block = routing(chaosMode={"strategy": "least-loaded"}, upstreamHosts=["https://127.0.0.1"])
    broken.write_text(json.dumps({"modelRouting": block}), encoding="utf-8")
    os.replace(broken, path)
    said = "config not reloaded, the old one stays in force"
    output = await poll(lambda: asyncio.to_thread(proxy.output), lambda text: said in text, WITHIN)
    assert lines_with(said, output) == [
        f"chaos-mode: {said}: {path}: modelRouting.upstreamHosts: 'https://127.0.0.1' is a URL; write the "
        "host name alone: 127.0.0.1"
    ]
    assert "Traceback" not in output
    assert (await status(http, proxy))["strategy"] == "weighted-random"
    # The config in force still routes: a request through the proxy is served by a GLM model.
    response = await http.post(
        proxy.url + "/api/anthropic/v1/messages",
        json={"model": "claude-opus-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200 and response.json()["model"].startswith("glm-")


async def test_a_config_file_caught_empty_keeps_the_config_in_force(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    path = tmp_path / "chaos.yaml"

    def write(block: dict[str, Any]) -> None:
        path.write_text(json.dumps({"modelRouting": block}), encoding="utf-8")  # JSON is YAML too

    write(routing(chaosMode={"strategy": "round-robin"}))
    proxy = await make_proxy(upstream=sim.base_url, extra_args=["--set", f"chaos_config={path}"])
    path.write_text("", encoding="utf-8")  # `gen > chaos.yaml`: truncated, gen has not written yet
    said = "config not reloaded, the old one stays in force"
    output = await poll(lambda: asyncio.to_thread(proxy.output), lambda text: said in text, WITHIN)
    assert lines_with(said, output) == [
        f"chaos-mode: {said}: {path}: empty, no modelRouting key "
        "(`modelRouting:` alone: the built-in defaults)"
    ]
    document = await status(http, proxy)
    assert document["enabled"] is True and document["strategy"] == "round-robin"

    write(routing(chaosMode={"strategy": "weighted-random"}))  # the writer is done: its config is read
    document = await poll(lambda: status(http, proxy), lambda d: d["strategy"] == "weighted-random", WITHIN)
    assert document["enabled"] is True and document["strategy"] == "weighted-random"
    assert "Traceback" not in proxy.output()

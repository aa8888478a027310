"""Reading config files: YAML and JSON, and every way a file can be wrong is one line (never a hang)."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from chaos_mode.config.file import MAX_BYTES, MAX_VALUES, load_config
from chaos_mode.config.schema import ConfigError, default_config
from support.readme import readme_yaml

YAML_TEXT = """\
modelRouting:
  chaosMode:
    enabled: true
    strategy: round-robin
    excludeModels: [glm-5.4]
    maxCostPerRequest: 0.02
  accountConcurrency: 10
"""


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_load_config_reads_yaml_and_json(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"chaos{suffix}"
    if suffix == ".json":
        data = {
            "modelRouting": {
                "chaosMode": {
                    "enabled": True,
                    "strategy": "round-robin",
                    "excludeModels": ["glm-5.4"],
                    "maxCostPerRequest": 0.02,
                },
                "accountConcurrency": 10,
            }
        }
        path.write_text(json.dumps(data), encoding="utf-8")
    else:
        path.write_text(YAML_TEXT, encoding="utf-8")
    config = load_config(path)
    assert config.chaos_mode.enabled is True
    assert config.chaos_mode.strategy == "round-robin"
    assert config.chaos_mode.exclude_models == ("glm-5.4",)
    assert config.chaos_mode.max_cost_per_request == 0.02
    assert config.total_capacity == 10
    assert config.eligible_models("heavy") == ["glm-5.3"]


@pytest.mark.parametrize(
    ("name", "text"),
    [("empty.yaml", ""), ("empty.yml", "  \n\n"), ("empty.yaml", "# nothing here\n"), ("empty.json", "")],
)
def test_an_empty_file_is_refused(tmp_path: Path, name: str, text: str) -> None:
    """Caught while its writer truncated it (`gen > chaos.yaml`): no config, so a reload keeps the old."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    said = "empty, no modelRouting key" if name.endswith("l") else "not valid JSON"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {said}"):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("bad.yaml", "modelRouting: [unclosed\n", r"bad\.yaml: not valid YAML"),
        ("bad.json", '{"modelRouting": ', r"bad\.json: not valid JSON"),
        ("list.yaml", "- 1\n- 2\n", r"list\.yaml: the top level must be a mapping"),
        ("scalar.json", "42", r"scalar\.json: the top level must be a mapping"),
        ("typo.yaml", "modelRouting:\n  chaosMode:\n    strategie: x\n", r"typo\.yaml: .*strategie: Extra"),
        (  # as YAML refuses it: JSON would keep the last one silently
            "dup.json",
            '{"modelRouting": {"chaosMode": {"enabled": true}, "chaosMode": {"enabled": false}}}',
            r'dup\.json: not valid JSON: duplicate key "chaosMode"$',
        ),
        (
            "dup2.json",
            '{"modelRouting": {"models": {"a": {"tier": "HEAVY", "maxConcurrency": 1, "tier": "LIGHT"}}}}',
            r'dup2\.json: not valid JSON: duplicate key "tier"$',
        ),
        (  # a lone surrogate, written as an escape: not UTF-8, so no model name
            "surro.json",
            '{"modelRouting": {"models": {"glm-5.3\\ud800": {"tier": "HEAVY", "maxConcurrency": 3}}}}',
            r"surro\.json: modelRouting\.models: model name 'glm-5\.3\\ud800': must",
        ),
        (
            "surro.yaml",
            'modelRouting: {models: {"glm-5.3\\ud800": {tier: HEAVY, maxConcurrency: 3}}}',
            r"surro\.yaml: modelRouting\.models: model name 'glm-5\.3\\ud800': must",
        ),
    ],
)
def test_file_errors(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_a_long_duplicate_key_is_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    key = "k" * 50
    path.write_text(f'{{"{key}": 1, "{key}": 2}}', encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == f'{path}: not valid JSON: duplicate key "{key[:40]}"...'


def test_a_path_from_the_home_folder_is_read_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`chaos_config: ~/chaos.yaml` in mitmproxy's config.yaml, where no shell expands it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "chaos.yaml").write_text(YAML_TEXT, encoding="utf-8")
    assert load_config("~/chaos.yaml").chaos_mode.strategy == "round-robin"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_config(tmp_path / "nope.yaml")


def refused(path: Path) -> str:
    """The ConfigError's message for `path`: it must be one line and never a traceback's worth."""
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("deep.yaml", "modelRouting: " + "[" * 5000 + "]" * 5000, "not valid YAML: nested too deeply"),
        (
            "deep.json",
            '{"modelRouting": ' + "[" * 5000 + "]" * 5000 + "}",
            "not valid JSON: nested too deeply",
        ),
        ("deeper.yaml", "modelRouting: " + "[" * 40 + "]" * 40, "modelRouting[0]"),
        ("digits.yaml", "modelRouting:\n  accountConcurrency: " + "9" * 5000, "line 2: Exceeds the limit"),
        ("digits.json", '{"modelRouting":\n {"accountConcurrency": ' + "9" * 5000 + "}}", "line 2: Exceeds"),
        (
            "flow.yaml",
            "modelRouting: {chaosMode: {enabled: true}\nqueue: 1\n",
            "YAML: line 2, column 1: expected ',' or '}'",
        ),
        (
            "indent.yaml",
            "modelRouting:\n  chaosMode:\n   - x\n  - y\n",
            "line 4, column 3: expected <block end>",
        ),
        ("tab.yaml", "modelRouting:\n\tchaosMode: {}\n", "line 2, column 1: found character '\\t'"),
        (
            "quote.yaml",
            "modelRouting: 'open\n",
            "not valid YAML: line 2, column 1: found unexpected end of stream",
        ),
        ("dup.yaml", "modelRouting: {}\nmodelRouting: {}\n", "line 2, column 1: found duplicate key"),
        ("alias.yaml", "modelRouting: *nothing\n", "line 1, column 15: found undefined alias"),
        ("tag.yaml", "modelRouting: !!python/object x\n", "could not determine a constructor"),
        ("trail.json", '{"modelRouting": {}} x', "not valid JSON: line 1, column 22: Extra data"),
        (
            "inf.yaml",
            "modelRouting:\n  sticky: {ttlSeconds: .inf}\n",
            "modelRouting.sticky.ttlSeconds: Input should be",
        ),
        (
            "bool.yaml",
            "modelRouting:\n  models: {a: {tier: HEAVY, maxConcurrency: true}}\n",
            "maxConcurrency: Input",
        ),
        ("latin1.yaml", "modelRouting: {}\n# caf\xe9\n", "not UTF-8 text"),
    ],
)
def test_a_bad_file_is_one_line_naming_where(tmp_path: Path, name: str, text: str, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1") if name.startswith("latin1") else text.encode())
    assert expected in refused(path)


def test_an_alias_bomb_is_refused_without_expanding(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nmodelRouting: {tierRules: {patterns: *a11}}\n", encoding="utf-8")
    assert f"more than {MAX_VALUES} values" in refused(path)


def test_an_empty_model_routing_means_all_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("modelRouting:\n", encoding="utf-8")
    assert load_config(path) == default_config()


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "chaos.yaml"
    os.mkfifo(path)
    result: list[str] = []
    # A reader that blocked on the FIFO would never return: run it aside and give it a bound.
    reader = threading.Thread(target=lambda: result.append(refused(path)), daemon=True)
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():  # unblock it, so the test process does not keep a stuck thread
        with open(path, "wb"):
            pass
        pytest.fail("load_config blocked on a FIFO")
    assert "not a regular file" in result[0]


@pytest.mark.parametrize("target", ["/dev/null", "."])
def test_a_device_or_a_folder_is_refused(tmp_path: Path, target: str) -> None:
    assert "not a regular file" in refused(tmp_path if target == "." else Path(target))


def test_a_huge_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    assert f"over {MAX_BYTES} bytes" in refused(path)


def test_json_numbers_stay_json(tmp_path: Path) -> None:
    path = tmp_path / "chaos.json"
    path.write_text(json.dumps({"modelRouting": {"sticky": {"ttlSeconds": 60}}}), encoding="utf-8")
    assert load_config(path).sticky.ttl_seconds == 60.0


def test_the_readme_configuration_example_is_the_defaults_and_safe_to_copy(tmp_path: Path) -> None:
    path = tmp_path / "chaos.yaml"
    path.write_text(readme_yaml("## Configuration"), encoding="utf-8")
    config = load_config(path)
    assert config == default_config()
    assert not config.replaces_catalog


def test_the_readme_newer_models_example_says_it_replaces_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "chaos.yaml"
    path.write_text(readme_yaml("## Adding models"), encoding="utf-8")
    config = load_config(path)
    assert config.replaces_catalog
    assert "glm-4.6v" not in config.models and "glm-5.3" in config.models
    assert config.aliases == {}  # a catalog of its own: no built-in aliases
